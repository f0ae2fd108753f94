//go:build linux

package wgcompare

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestPrintTable checks the table's arithmetic on made-up runs: medians,
// ratios to WireGuard, the CPU a path adds beyond plaintext and the paired
// ratios.
func TestPrintTable(t *testing.T) {
	results := map[string][]sample{
		plaintext.Name:   {{mbps: 8, busyS: 3}, {mbps: 10, busyS: 2}, {mbps: 9, busyS: 4}},
		wireguard.Name:   {{mbps: 4, busyS: 8}, {mbps: 5, busyS: 8}, {mbps: 3, busyS: 9}, {mbps: 4, busyS: 8}},
		offloads[0].Name: {{mbps: 1, busyS: 33}, {mbps: 1.2, busyS: 30}},
	}
	paired := map[string][]float64{plaintext.Name: {2, 2.5, 3}, offloads[0].Name: {0.2, 0.3}}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	printTable(t, 32, 3, []path{plaintext, wireguard, offloads[0]}, results, paired)
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	rows := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		for _, p := range []path{plaintext, wireguard, offloads[0]} {
			if strings.HasPrefix(l, "| "+p.Label+" ") {
				rows[p.Name] = strings.Join(strings.Fields(strings.ReplaceAll(l, "|", " ")), " ")
			}
		}
	}
	// plaintext: median 9 MB/s = 2.25x WireGuard's 4; busy median 3 s.
	// WireGuard adds 8-3 = 5 s; the offload path adds 31.5-3 = 28.5 s,
	// 5.70x WireGuard's.
	for name, want := range map[string]string{
		plaintext.Name:   "3 9.00 2.25x 2.50x 3.00 0% - -",
		wireguard.Name:   "4 4.00 1.00x 1.00x 8.00 0% 5.00 1.00x",
		offloads[0].Name: "2 1.10 0.28x 0.25x 31.50 0% 28.50 5.70x",
	} {
		if !strings.HasSuffix(rows[name], want) {
			t.Errorf("%s row %q, want it to end %q\n%s", name, rows[name], want, out)
		}
	}
}
