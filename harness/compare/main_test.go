package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/bench"
)

func TestMedianOf(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2}} {
		if got := medianOf(c.in); got != c.want {
			t.Errorf("medianOf(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestGoals(t *testing.T) {
	rep := &report{
		Results: []result{
			{Tool: "offload", Streams: 1, MBps: 300}, {Tool: "ssh -L", Streams: 1, MBps: 100},
			{Tool: "spiped", Streams: 1, MBps: 100}, {Tool: "offload", Streams: 8, MBps: 1},
		},
		Memory: []memory{
			{End: "server", Streams: 100, Load: bench.Memory{RSS: 20 << 20, Peak: 21 << 20}},
			{End: "client", Streams: 100, Load: bench.Memory{RSS: 40 << 20, Peak: 33 << 20}},
		},
	}
	got := map[string]bool{}
	for _, g := range goals(rep) {
		got[g.What] = g.Met
	}
	want := map[string]bool{
		"offload vs ssh -L, 1 stream":                true,  // 3x >= 1.5x
		"offload vs spiped, 1 stream":                false, // 3x < 4x
		"offload server RSS, 100 streams under load": true,
		"offload client RSS, 100 streams under load": false, // sampled RSS over 32 MiB counts
	}
	if len(got) != len(want) {
		t.Fatalf("goals %v, want %v", got, want)
	}
	for k, v := range want {
		if m, ok := got[k]; !ok || m != v {
			t.Errorf("goal %q met=%v (present %v), want %v", k, m, ok, v)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{{"-bytes", "1MB"}, {"-streams", "0"}, {"-digest", "md5"}, {"-repeat", "0"}, {"extra"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("compare %v: exit %d, want 2", args, code)
		}
	}
}

func TestPrintReport(t *testing.T) {
	rep := &report{
		Date: "2026-11-30 06:00 UTC", Bytes: 4 << 20, Repeat: 3, Digest: "crc32c",
		Tools:   []toolInfo{{Name: "socat"}, {Name: "offload"}},
		Results: []result{{Tool: "socat", Streams: 1, MBps: 80}, {Tool: "offload", Streams: 1, MBps: 140}},
		Memory:  []memory{{End: "server", Streams: 100}},
	}
	rep.Goals = goals(rep)
	var w bytes.Buffer
	printReport(&w, rep)
	for _, s := range []string{"median of 3", "1 stream(s)", "offload         140.0", "100 streams"} {
		if !strings.Contains(w.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, w.String())
		}
	}
}
