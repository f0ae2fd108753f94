package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/offload-dev/offload/harness/wgcompare"
)

// run2 makes a run of 1e6 bytes whose routers cost a and b qemu CPU
// seconds, with timer rates ra and rb.
func run2(boot int, name string, a, b, ra, rb float64) routerRun {
	return routerRun{Boot: boot, Name: name, Bytes: 1e6, HostS: 10, Router: [2]routerCost{
		{QemuS: a, VCPUS: a / 2, GuestS: 10 * ra, ClockS: 10},
		{QemuS: b, VCPUS: b / 2, GuestS: 10 * rb, ClockS: 10},
	}}
}

func TestTimerRate(t *testing.T) {
	c := routerCost{GuestS: 4.2, ClockS: 10}
	if got := c.rate(); math.Abs(got-0.42) > 1e-9 {
		t.Errorf("rate = %v, want 0.42", got)
	}
	if got := (routerCost{GuestS: 3}).rate(); got != 0 {
		t.Errorf("rate without a host interval = %v, want 0 (unknown)", got)
	}
}

// A run whose timer ran at another rate, on either router, is marked;
// the medians are per router; a run without clock readings is marked too.
func TestMarkRegimes(t *testing.T) {
	runs := []routerRun{
		run2(0, "wireguard", 1, 1, 1.0, 0.99),
		run2(0, "relay", 1, 1, 1.01, 1.0),
		run2(0, "plaintext", 1, 1, 0.98, 1.0),
		run2(1, "wireguard", 1, 1, 1.0, 0.42), // B in the other regime
		run2(1, "relay", 1, 1, 0.42, 1.0),     // A
		run2(1, "plaintext", 1, 1, 1.0, 1.0),
		{Name: "ssh", Bytes: 1e6, Router: [2]routerCost{{QemuS: 1}, {QemuS: 1}}},
	}
	med := markRegimes(runs)
	if math.Abs(med[0]-1.0) > 0.011 || math.Abs(med[1]-1.0) > 0.011 {
		t.Errorf("medians %v, want about 1.0 each", med)
	}
	want := []bool{false, false, false, true, true, false, true}
	for i, r := range runs {
		if r.Off != want[i] {
			t.Errorf("run %d (%s, rates %.2f %.2f): off %v, want %v", i, r.Name, r.Router[0].rate(), r.Router[1].rate(), r.Off, want[i])
		}
	}
}

// The busier router's figure is taken per run, off-regime runs stay out of
// every figure, and the ratios are cost over cost on the busier router.
func TestPoolRouters(t *testing.T) {
	runs := []routerRun{
		run2(0, "wireguard", 0.10, 0.08, 1, 1), // busier A: 10 MB/s
		run2(0, "wireguard", 0.05, 0.10, 1, 1), // busier B: 10
		run2(1, "wireguard", 0.10, 0.05, 1, 1),
		run2(0, "afalg-64k", 0.20, 0.05, 1, 1),     // 5
		run2(1, "afalg-64k", 0.04, 0.25, 1, 1),     // 4
		run2(1, "afalg-64k", 0.04, 0.20, 1, 1),     // 5
		run2(1, "afalg-64k", 0.001, 0.001, 0.4, 1), // off-regime: would be 1000
	}
	failedRun := run2(1, "afalg-64k", 0.0001, 0.0001, 1, 1) // failed: would be 10000
	failedRun.Err = "send: connection reset by peer\nA's offload said: ..."
	markRegimes(runs)
	rows := poolRouters(runs)
	by := map[string]*routerRow{}
	for _, r := range rows {
		by[r.name] = r
	}
	wg, af := by["wireguard"], by["afalg-64k"]
	if wg == nil || af == nil || rows[0] != wg {
		t.Fatalf("rows %v: want wireguard first (the paths' order) and afalg-64k", rows)
	}
	if wg.busier != 10 || af.busier != 5 || af.runs != 3 || af.off != 1 {
		t.Errorf("busier wireguard %v, afalg %v (runs %d, off %d); want 10, 5, 3, 1", wg.busier, af.busier, af.runs, af.off)
	}
	// A's median over afalg's in-regime runs: 5, 25, 25 MB/s.
	if af.per[0] != 25 || af.per[1] != 5 {
		t.Errorf("afalg per router %v, want [25 5]", af.per)
	}
	if af.byBoot[0] != 5 || af.byBoot[1] != 4.5 {
		t.Errorf("afalg per boot %v, want 5 and 4.5", af.byBoot)
	}
	var out bytes.Buffer
	writeRouterTable(&out, append(runs, failedRun), 2)
	s := out.String()
	for _, want := range []string{
		"1 of 7 runs in another regime",
		"- FAILED, out of the figures: boot 2 round 1 afalg-64k: send: connection reset by peer\n",
		"marked, another regime: boot 2 round 1 afalg-64k (timer A 0.40, B 1.00)",
		"| 0.50 | 0.50 / 0.45 |", // × WireGuard, then per boot (boot 2's WireGuard is 10)
		"offload with the device ≥ 1.0x kernel WireGuard: NOT met (afalg-64k 0.50x wireguard)",
		"offload in software ≥ 0.35x kernel WireGuard: not measured",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("table lacks %q:\n%s", want, s)
		}
	}
}

func TestGoalLines(t *testing.T) {
	by := map[string]*routerRow{
		"wireguard":  {busier: 10},
		"relay":      {busier: 20},
		"ssh":        {busier: 4},
		"ipsec-dev":  {busier: 2},
		"afalg-64k":  {busier: 12},
		"ctr-sw-64k": {busier: 3},
	}
	got := strings.Join(goalLines(by), "\n")
	for _, want := range []string{
		"≥ 1.0x kernel WireGuard: met (afalg-64k 1.20x wireguard)",
		"≤ 1.1x the two-relay floor's: NOT met (afalg-64k 0.60x relay)",
		"≥ 2x ssh -L: met (afalg-64k 3.00x ssh)",
		"≥ 1.5x IPsec on the device: met (afalg-64k 6.00x ipsec-dev)",
		"software ≥ 0.35x kernel WireGuard: NOT met (ctr-sw-64k 0.30x wireguard)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("goals lack %q:\n%s", want, got)
		}
	}
}

// Each router's harness/vm line: the agent with its own MACs and LAN
// address, qemu's pid file, the LAN card on the tap, the WAN card on the
// UDP wire whose ends cross (A's remote is B's local).
func TestVMCommandLine(t *testing.T) {
	common := []string{"-arch", "mipsle"}
	a := strings.Join(vmCommandLine(common, sides[0], "tapA", "/o/a.pid", 4001, 4002, false), " ")
	b := strings.Join(vmCommandLine(common, sides[1], "tapB", "/o/b.pid", 4002, 4001, true), " ")
	for _, c := range []struct{ line, want string }{
		{a, "-arch mipsle -cmd router serve -lan 52:54:00:77:0a:01=10.77.1.1/24 -wan 52:54:00:77:0a:02 -listen 7070 -level-irqs=true"},
		{b, "-listen 7070 -level-irqs=false"},
		{a, "-qemu-arg=-pidfile -qemu-arg=/o/a.pid"},
		{a, "-qemu-arg=-nic -qemu-arg=tap,ifname=tapA,script=no,downscript=no,model=virtio-net-pci,mac=52:54:00:77:0a:01"},
		{a, "-qemu-arg=-nic -qemu-arg=socket,udp=127.0.0.1:4002,localaddr=127.0.0.1:4001,model=virtio-net-pci,mac=52:54:00:77:0a:02"},
		{b, "router serve -lan 52:54:00:77:0b:01=10.77.2.1/24 -wan 52:54:00:77:0b:02"},
		{b, "socket,udp=127.0.0.1:4001,localaddr=127.0.0.1:4002,"},
	} {
		if !strings.Contains(c.line, c.want) {
			t.Errorf("%q lacks %q", c.line, c.want)
		}
	}
	if len(common) != 2 {
		t.Errorf("vmCommandLine changed its common arguments: %v", common)
	}
}

// Every kind of path has a target, each LAN pair its own subnets.
func TestTargets(t *testing.T) {
	seen := map[string]string{}
	for _, p := range wgcompare.Paths {
		tg := target(p.Kind)
		if tg == "" {
			t.Errorf("%s (%s): no target", p.Name, p.Kind)
		}
		if k, ok := seen[tg]; ok && k != p.Kind {
			t.Errorf("%s and %s share target %s", k, p.Kind, tg)
		}
		seen[tg] = p.Kind
	}
	if subnet("10.77.23.2/24") != "10.77.23.0/24" {
		t.Errorf("subnet = %q", subnet("10.77.23.2/24"))
	}
}

func TestRouterPaths(t *testing.T) {
	got, err := routerPaths(&options{paths: "plaintext,wireguard,afalg-64k", cryptodev: "auto"})
	if err != nil || len(got) != 2 || got[0].Name != "plaintext" || got[1].Name != "afalg-64k" {
		t.Errorf("routerPaths = %v, %v; want plaintext, afalg-64k (WireGuard is always run, apart)", got, err)
	}
	all, err := routerPaths(&options{cryptodev: "off"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		if p.Extra || p.Cryptodev() || p.Name == wgcompare.WireGuard {
			t.Errorf("default paths with cryptodev off hold %s", p.Name)
		}
	}
	if _, err := routerPaths(&options{paths: "nosuch"}); err == nil {
		t.Error("an unknown path: no error")
	}
	if _, err := routerPaths(&options{paths: "afalg-64k-base"}); err == nil {
		t.Error("a baseline path without -baseline: no error")
	}
	// -set goes to every offload path, -twin makes a twin beside each in
	// its place; other paths are left alone.
	got, err = routerPaths(&options{paths: "plaintext,ctr-sw-64k", cryptodev: "off", set: []string{"resume_window: 0s"}, twin: []string{"resume_window: 1m"}})
	if err != nil || len(got) != 3 || got[0].Conf != nil || got[1].Name != "ctr-sw-64k" || got[2].Name != "ctr-sw-64k-twin" {
		t.Fatalf("routerPaths with -set, -twin = %v, %v; want plaintext, ctr-sw-64k, ctr-sw-64k-twin", got, err)
	}
	srv, cli := offloadConfigs(got[1])
	tsrv, tcli := offloadConfigs(got[2])
	for _, c := range []struct{ conf, want, not string }{{srv, "resume_window: 0s\n", "1m"}, {cli, "resume_window: 0s\n", "1m"},
		{tsrv, "resume_window: 1m\n", "0s"}, {tcli, "resume_window: 1m\n", "0s"}} {
		if !strings.HasSuffix(c.conf, c.want) || strings.Contains(c.conf, "resume_window: "+c.not) {
			t.Errorf("config does not end with %q alone:\n%s", c.want, c.conf)
		}
	}
}

func TestParseCounters(t *testing.T) {
	out := "123456\n789\n 11:      40321    XT-PIC  11  virtio2\ncpu  100 5 200 300 7 11 13 0 0 0\nsrc 10.77.0.1 dst 10.77.0.2\n\tlifetime current:\n\t  33554432(bytes), 23000(packets)\n"
	c, err := parseCounters(out)
	if err != nil || c.wanRx != 123456 || c.wgTx != 789 || c.irq != 40321 || c.espBytes != 33554432 ||
		c.cpu != (guestCPU{User: 105, Sys: 200, Idle: 307, IRQ: 11, Softirq: 13}) {
		t.Errorf("parseCounters = %+v, %v", c, err)
	}
	for _, bad := range []string{"1\n2\n", "x\n2\n 11: 5 XT-PIC\ncpu 1 2 3 4 5 6 7\n", "1\n2\nnot an interrupt line\ncpu 1 2 3 4 5 6 7\n",
		"1\n2\n 11: 5 XT-PIC\ncpux 1 2 3 4 5 6 7\n", "1\n2\n 11: 5 XT-PIC\ncpu 1 2\n"} {
		if _, err := parseCounters(bad); err == nil {
			t.Errorf("parseCounters(%q): no error", bad)
		}
	}
}

func TestESPDriver(t *testing.T) {
	proc := "name         : cbc(aes)\ndriver       : virtio_crypto_aes_cbc\n\n" +
		"name         : authenc(hmac(sha256),cbc(aes))\ndriver       : authenc(hmac(sha256-generic),virtio_crypto_aes_cbc)\n\n"
	if got := espDriver(proc); got != "authenc(hmac(sha256-generic),virtio_crypto_aes_cbc)" {
		t.Errorf("espDriver = %q", got)
	}
	if got := espDriver("name : cbc(aes)\ndriver : cbc-aes\n"); got != "" {
		t.Errorf("espDriver without ESP's transform = %q", got)
	}
}

// The host sink answers ok only for the exact stream: a flipped byte, a
// short stream or a bad header is refused.
func TestHashStream(t *testing.T) {
	stream := func(n int64, payload []byte) []byte {
		var b bytes.Buffer
		b.WriteString(wgcompare.Magic)
		_ = binary.Write(&b, binary.BigEndian, uint64(n))
		b.Write(payload)
		return b.Bytes()
	}
	p := wgcompare.Pattern()
	n := int64(len(p) + 1000) // past one period of the pattern
	good := append(append([]byte{}, p...), p[:1000]...)
	if got := hashStream(bytes.NewReader(stream(n, good))); got != fmt.Sprintf("ok %d %d", n, n) {
		t.Errorf("the right stream: %q", got)
	}
	bad := append([]byte{}, good...)
	bad[len(p)+7] ^= 1
	if got := hashStream(bytes.NewReader(stream(n, bad))); !strings.HasPrefix(got, "bad sha256") {
		t.Errorf("a flipped byte: %q", got)
	}
	if got := hashStream(bytes.NewReader(stream(n, good[:100]))); !strings.HasPrefix(got, "bad length") {
		t.Errorf("a short stream: %q", got)
	}
	if got := hashStream(strings.NewReader("NOTANCHR12345678")); !strings.HasPrefix(got, "bad magic") {
		t.Errorf("a bad header: %q", got)
	}
	want := sha256.Sum256(good)
	if !bytes.Equal(patternSHA(n), want[:]) {
		t.Error("patternSHA differs from the stream's sha256")
	}
}

func TestEngineFrames(t *testing.T) {
	sum := "\nA frames: offload_frames_total{engine=\"software\",dir=\"encrypt\"} 0 offload_frames_total{engine=\"afalg:virtio_crypto_aes_cbc\",dir=\"encrypt\"} 73" +
		"\nB frames: offload_frames_total{engine=\"afalg:virtio_crypto_aes_cbc\",dir=\"decrypt\"} 72"
	for _, c := range []struct {
		name, engine, dir string
		want              int64
	}{
		{"A", "afalg:virtio_crypto_aes_cbc", "encrypt", 73},
		{"B", "afalg:virtio_crypto_aes_cbc", "decrypt", 72},
		{"A", "software", "encrypt", 0},
		{"B", "afalg:virtio_crypto_aes_cbc", "encrypt", 0},
		{"A", "cryptodev", "encrypt", 0},
	} {
		if got := engineFrames(sum, c.name, c.engine, c.dir); got != c.want {
			t.Errorf("engineFrames(%s, %s, %s) = %d, want %d", c.name, c.engine, c.dir, got, c.want)
		}
	}
}

// sealedBytes reads a sealing relay's report lines as wgcompare.SealStats
// prints them: the stream's, not the answer's.
func TestSealedBytes(t *testing.T) {
	out := wgcompare.SealStats{Sealed: true, Frames: 257, Bytes: 16777232}.String() + "\n" +
		wgcompare.SealStats{Frames: 1, Bytes: 17}.String()
	for verb, want := range map[string]int64{"sealed": 16777232, "opened": 17, "lost": 0} {
		if got := sealedBytes("10.77.0.2:7102: "+out, verb); got != want {
			t.Errorf("sealedBytes(%s) = %d, want %d", verb, got, want)
		}
	}
}

// The guest's own split: shares of its ticks per router, off-regime runs
// left out, nothing at all for spans without ticks.
func TestWriteGuestSplit(t *testing.T) {
	var out bytes.Buffer
	writeGuestSplit(&out, []routerRun{run2(0, "relay", 1, 1, 1, 1)})
	if out.Len() != 0 {
		t.Errorf("spans without guest ticks printed %q", out.String())
	}
	r := run2(0, "relay", 1, 1, 1, 1)
	r.Router[0].Guest = guestCPU{User: 50, Sys: 30, Softirq: 10, IRQ: 0, Idle: 10}
	r.Router[1].Guest = guestCPU{User: 20, Sys: 20, Softirq: 40, IRQ: 10, Idle: 10}
	off := r
	off.Off = true
	off.Router[0].Guest = guestCPU{Idle: 100}
	writeGuestSplit(&out, []routerRun{r, off})
	if want := "| relay | 50 / 30 / 10 / 0 / 10 | 20 / 20 / 40 / 10 / 10 |"; !strings.Contains(out.String(), want) {
		t.Errorf("split lacks %q:\n%s", want, out.String())
	}
}
