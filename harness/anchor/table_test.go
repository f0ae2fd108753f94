package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/harness/wgcompare"
)

// TestWriteTable checks the pooled table's arithmetic on made-up runs of
// 10 MB: per-run MB per qemu CPU second, medians over both boots, the ms/MB
// added beyond plaintext and the ratios to the anchors.
func TestWriteTable(t *testing.T) {
	const mb = 10_000_000
	settle := wgcompare.MarkerSettle.Seconds()
	var runs []sample
	add := func(boot int, name string, qemuS ...float64) {
		for _, q := range qemuS {
			runs = append(runs, sample{Boot: boot, Name: name, Bytes: mb, QemuS: q, HostS: q + settle, IRQ: 50})
		}
	}
	// Boot 0: plaintext 20 MB/s-CPU, WireGuard 5, relay 4, ssh 1.
	add(0, "plaintext", 0.5)
	add(0, "wireguard", 2, 2, 2)
	add(0, "relay", 2.5)
	add(0, "ssh", 10)
	add(0, "afalg-64k", 5)
	// Boot 1: the same but WireGuard 2.5, so afalg is 0.40x there, 0.50x in boot 0.
	add(1, "plaintext", 0.5)
	add(1, "wireguard", 4)
	add(1, "relay", 2.5)
	add(1, "ssh", 10)
	add(1, "afalg-64k", 5)
	runs = append(runs, sample{Boot: 1, Name: "afalg-64k", Bytes: mb, QemuS: 5, HostS: 31, IRQ: 50})
	// One ssh run the stall watch kicked: it counts, marked.
	runs = append(runs, sample{Boot: 1, Name: "ssh", Bytes: mb, QemuS: 10, HostS: 10 + settle, IRQ: 50, Kicks: 7})
	var b bytes.Buffer
	writeTable(&b, runs, 2)
	out := b.String()
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, "|")
		if len(f) > 3 {
			rows[strings.Fields(f[1])[0]] = strings.Join(strings.Fields(strings.Join(f[2:], " ")), " ")
		}
	}
	// WireGuard: median of 2, 2, 2, 4 s = 2 s, 5 MB per CPU s, 200 ms/MB,
	// plaintext 50 ms/MB, so WireGuard adds 150.
	// afalg: 2 MB per CPU s, 500 ms/MB, adds 450; 0.40x WireGuard, per boot
	// 0.40 (2 over 5) and 0.80 (2 over 2.5); 0.50x the relay floor (4),
	// 2.00x ssh (1); one of its three runs stalled (31 s wall for 5 s CPU).
	for name, want := range map[string]string{
		"plaintext": "2 20.00 – 4.00 4.00 / 8.00 5.00 20.00 – 5",
		"kernel":    "4 5.00 150.0 1.00 1.00 / 1.00 1.25 5.00 – 5",
		"offload":   "3 2.00 450.0 0.40 0.40 / 0.80 0.50 2.00 – 5",
	} {
		if rows[name] != want {
			t.Errorf("%s row %q, want %q\n%s", name, rows[name], want, out)
		}
	}
	for _, want := range []string{"(1 of 3 runs stalled)", "(1 of 3 runs kicked out of a stall)", "plaintext is 4.00x WireGuard",
		"the relay floor adds 200.0 ms/MB", "afalg-64k 250.0 ms/MB (1.25x the floor's own)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestProfileFiles(t *testing.T) {
	got, err := profileFiles("afalg-64k,cryptodev-64k", "", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{guestProfileDir + "/afalg-64k-server.prof", guestProfileDir + "/afalg-64k-client.prof",
		guestProfileDir + "/cryptodev-64k-server.prof", guestProfileDir + "/cryptodev-64k-client.prof"}
	if !slices.Equal(got, want) {
		t.Errorf("profileFiles = %q, want %q", got, want)
	}
	for _, c := range []struct{ profile, paths string }{
		{"ssh", ""},                              // not an offload path
		{"nope-64k", ""},                         // no such path
		{"afalg-64k", "plaintext,cryptodev-64k"}, // not measured
		{"cryptodev-64k", ""},                    // no module (below)
	} {
		if _, err := profileFiles(c.profile, c.paths, false); err == nil {
			t.Errorf("profileFiles(%q, %q) = nil error", c.profile, c.paths)
		}
	}
}

// TestStallExcludesSettle: the guest's idle settle after the begin marker
// is in every span's wall time; a short run is not a stall for it, a run
// that waited is.
func TestStallExcludesSettle(t *testing.T) {
	settle := wgcompare.MarkerSettle.Seconds()
	runs := []sample{{Name: "plaintext", Bytes: 32e6, QemuS: 0.3, HostS: 0.3 + settle}}
	for range 4 {
		runs = append(runs, sample{Name: "wireguard", Bytes: 32e6, QemuS: 3, HostS: 3 + settle})
	}
	runs = append(runs, sample{Name: "afalg-64k", Bytes: 32e6, QemuS: 8, HostS: 30 + settle})
	stalled := map[string]int{}
	for _, r := range pool(runs) {
		stalled[r.path.Name] = r.stalled
	}
	if stalled["plaintext"] != 0 || stalled["wireguard"] != 0 || stalled["afalg-64k"] != 1 {
		t.Errorf("stalled runs %v, want only afalg-64k's", stalled)
	}
}

func TestWriteVCPU(t *testing.T) {
	runs := []sample{
		{Name: "wireguard", Bytes: 10e6, QemuS: 1, VCPUS: 0.9},
		{Name: "ipsec-dev", Bytes: 10e6, QemuS: 4, VCPUS: 2},
	}
	var b bytes.Buffer
	writeVCPU(&b, runs)
	for _, want := range []string{"| wireguard | 1 | 11.11 | 1.00 | 90 % (90–90 %) |", "| ipsec-dev | 1 | 5.00 | 0.45 | 50 % (50–50 %) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	writeVCPU(&b, []sample{{Name: "wireguard", Bytes: 10e6, QemuS: 1}})
	if b.Len() != 0 {
		t.Errorf("printed a vCPU table without vCPU times:\n%s", b.String())
	}
}
