package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// cellOf makes a cell whose run i was made in round i at mbps[i] MB/s; a
// negative figure is a failed run.
func cellOf(policy string, streams int, mbps ...float64) *benchCell {
	c := &benchCell{policy: policy, streams: streams}
	for i, m := range mbps {
		r := benchRun{Policy: policy, Streams: streams, MBps: m, Bytes: 1 << 20, Seconds: 1, Verified: true, round: i}
		if policy == "hybrid" {
			r.HandedToCPU = 1 // a hybrid that did route otherwise than auto
		}
		if m < 0 {
			r.MBps, r.Error = 0, "broken"
		}
		c.runs = append(c.runs, r)
	}
	return c
}

func rowOf(t *testing.T, runs []benchRun, policy string, streams int) benchRun {
	t.Helper()
	for _, r := range runs {
		if r.Policy == policy && r.Streams == streams {
			return r
		}
	}
	t.Fatalf("no row for %s with %d streams in %+v", policy, streams, runs)
	return benchRun{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestBenchRotation(t *testing.T) {
	for _, tc := range []struct {
		i, n int
		want []int
	}{
		{0, 3, []int{0, 1, 2}},
		{1, 3, []int{2, 1, 0}}, // round 0's order backwards
		{2, 3, []int{1, 2, 0}},
		{3, 3, []int{0, 2, 1}},
		{4, 3, []int{2, 0, 1}},
		{5, 3, []int{1, 0, 2}},
		{6, 3, []int{0, 1, 2}},
		{0, 2, []int{0, 1}},
		{1, 2, []int{1, 0}},
		{2, 2, []int{1, 0}},
		{3, 2, []int{0, 1}},
		{5, 1, []int{0}},
		{2, 0, nil},
	} {
		if got := rotation(tc.i, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("rotation(%d, %d) = %v, want %v", tc.i, tc.n, got, tc.want)
		}
	}
}

// Cells of one stream count run next to each other, whatever the order
// of the table (policy by policy).
func TestBenchMeasureGroupsStreams(t *testing.T) {
	var order []string
	s := &benchSession{stderr: io.Discard, runCell: func(_ context.Context, c *benchCell) benchRun {
		order = append(order, fmt.Sprintf("%s%d", c.policy, c.streams))
		return benchRun{Policy: c.policy, Streams: c.streams, MBps: 1, Bytes: 1, Seconds: 1}
	}}
	s.cells = []*benchCell{{policy: "a", streams: 1}, {policy: "a", streams: 4}, {policy: "b", streams: 1}, {policy: "b", streams: 4}}
	if err := s.measure(context.Background(), s.cells, 2); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("a1 b1 a4 b4  b4 a4 b1 a1"); !slices.Equal(order, want) {
		t.Errorf("run order %v, want %v", order, want)
	}
}

// TestMeasureRotates checks the order runs are made in, their round
// numbers, and the progress lines.
func TestBenchMeasureRotates(t *testing.T) {
	var order []string
	var stderr bytes.Buffer
	s := &benchSession{stderr: &stderr, runCell: func(_ context.Context, c *benchCell) benchRun {
		order = append(order, c.policy)
		return benchRun{Policy: c.policy, Streams: c.streams, MBps: 1, Bytes: 1, Seconds: 1}
	}}
	s.cells = []*benchCell{{policy: "a", streams: 1}, {policy: "b", streams: 1}, {policy: "c", streams: 1}}
	if err := s.measure(context.Background(), s.cells, 3); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("a b c  c b a  b c a"); !slices.Equal(order, want) {
		t.Errorf("run order %v, want %v", order, want)
	}
	for _, c := range s.cells {
		var rounds []int
		for _, r := range c.runs {
			rounds = append(rounds, r.round)
		}
		if !slices.Equal(rounds, []int{0, 1, 2}) {
			t.Errorf("cell %s: rounds %v", c.policy, rounds)
		}
	}
	if !strings.Contains(stderr.String(), "bench: b, 1 stream (run 3 of 3): ") {
		t.Errorf("progress lines:\n%s", stderr.String())
	}

	// More rounds of some cells: numbered after the first, rotated
	// among those cells, and counted on from their earlier runs.
	order = nil
	if err := s.measure(context.Background(), s.cells[1:], 2); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("b c  c b"); !slices.Equal(order, want) {
		t.Errorf("run order %v, want %v", order, want)
	}
	if r := s.cells[2].runs; len(r) != 5 || r[3].round != 3 || r[4].round != 4 || len(s.cells[0].runs) != 3 {
		t.Errorf("runs after 2 more rounds: %+v", s.cells)
	}
	if !strings.Contains(stderr.String(), "bench: c, 1 stream (run 5 of 5): ") {
		t.Errorf("progress lines:\n%s", stderr.String())
	}
}

// TestPairedRatio: the gain is the median of the rounds' ratios, which
// a round in which the whole machine was slow does not move, where the
// ratio of the medians would.
func TestBenchPairedRatio(t *testing.T) {
	cells := []*benchCell{
		cellOf("software", 1, 10, 5, 20),
		cellOf("auto", 1, 11, 5.5, 8),
	}
	runs := summarize(cells)
	auto := rowOf(t, runs, "auto", 1)
	// Ratios 1.1, 1.1, 0.4; medians 8 and 10 would say 0.8.
	if !near(auto.Gain, 1.1) {
		t.Errorf("auto's gain %v, want the median of per-round ratios 1.1 (not 8/10)", auto.Gain)
	}
	if auto.MBps != 8 || !slices.Equal(auto.Repeats, []float64{11, 5.5, 8}) {
		t.Errorf("auto's row %+v; want the median run 8 MB/s and every round in run order", auto)
	}
	if sw := rowOf(t, runs, "software", 1); sw.Gain != 1 {
		t.Errorf("software's gain over itself %v", sw.Gain)
	}

	// A failed run leaves its round out of the ratios (two left: an
	// even count takes the mean of the middle two), and shows as 0.
	cells = []*benchCell{
		cellOf("software", 1, 10, -1, 20),
		cellOf("auto", 1, 11, 100, 8),
	}
	runs = summarize(cells)
	if auto := rowOf(t, runs, "auto", 1); !near(auto.Gain, (1.1+0.4)/2) {
		t.Errorf("auto's gain with software failing a round: %v, want %v", auto.Gain, (1.1+0.4)/2)
	}
	if sw := rowOf(t, runs, "software", 1); sw.Error == "" || !slices.Equal(sw.Repeats, []float64{10, 0, 20}) {
		t.Errorf("software's row %+v; want its failure reported and 0 for its round", sw)
	}

	// Runs pair by round, not by position.
	a, b := cellOf("auto", 1, 4, 6), cellOf("software", 1, 2, 3)
	b.runs[0].round, b.runs[1].round = 1, 7
	if got := pairedRatio(a.runs, b.runs).Median; got != 3 {
		t.Errorf("pairedRatio paired %v with %v: %v, want 6/2 (round 1 alone)", a.runs, b.runs, got)
	}
	if got := pairedRatio(a.runs, nil); got.Rounds != 0 {
		t.Errorf("pairedRatio with nothing to pair: %v", got)
	}
}

// TestBestSingle: B is the policy that is neither auto nor hybrid with
// the highest median MB/s at the stream count, software included; a
// policy that only failed is not a candidate.
func TestBenchBestSingle(t *testing.T) {
	cells := []*benchCell{
		cellOf("software", 1, 10, 10, 10),
		cellOf("software", 8, 10, 10, 10),
		cellOf("afalg:virtio_crypto_aes_cbc", 1, 9, 9, 12),
		cellOf("afalg:virtio_crypto_aes_cbc", 8, 11, 9, 12),
		cellOf("cryptodev", 1, -1, -1, -1),
		cellOf("cryptodev", 8, 30, -1, 30),
		cellOf("auto", 1, 10, 12, 8),
		cellOf("auto", 8, 11, 11, 11),
		cellOf("hybrid", 1, 20, 24, 16),
		cellOf("hybrid", 8, 11, 22, 11),
	}
	runs := summarize(cells)
	for _, tc := range []struct {
		policy  string
		streams int
		best    string
		ratio   float64
	}{
		// afalg's median at 1 stream is 9: software is best, though
		// afalg beat it in one round and hybrid beat them all.
		{"auto", 1, "software", 1},
		{"hybrid", 1, "software", 2},
		// cryptodev's successful runs have the highest median at 8
		// streams: its failed round is left out of its ratios.
		{"auto", 8, "cryptodev", 11.0 / 30},
		{"hybrid", 8, "cryptodev", 11.0 / 30},
	} {
		r := rowOf(t, runs, tc.policy, tc.streams)
		if r.VsBestSinglePolicy != tc.best || !near(r.VsBestSingle, tc.ratio) {
			t.Errorf("%s, %d streams: %.3fx %q; want %.3fx %q", tc.policy, tc.streams, r.VsBestSingle, r.VsBestSinglePolicy, tc.ratio, tc.best)
		}
	}
	cells[5] = cellOf("cryptodev", 8, -1, -1, -1)
	if r := rowOf(t, summarize(cells), "auto", 8); r.VsBestSinglePolicy != "afalg:virtio_crypto_aes_cbc" || !near(r.VsBestSingle, 1) {
		t.Errorf("auto, 8 streams with cryptodev failing: %.3fx %q; want 1x afalg (median of 11/11, 11/9, 11/12)", r.VsBestSingle, r.VsBestSinglePolicy)
	}
	if r := rowOf(t, runs, "hybrid", 1); !near(r.VsAuto, 2) {
		t.Errorf("hybrid's vs_auto %v, want 2", r.VsAuto)
	}
	for _, p := range []string{"software", "afalg:virtio_crypto_aes_cbc", "auto"} {
		if r := rowOf(t, runs, p, 1); (r.VsBestSingle != 0 || r.VsBestSinglePolicy != "") != (p == "auto") || r.VsAuto != 0 {
			t.Errorf("%s's row %+v: only auto and hybrid compare with the best single, only hybrid with auto", p, r)
		}
	}
}

// A hybrid that handed nothing to the CPU in any round routed as auto:
// only a gross loss (below 1 - 2·tolerance) fails it.
func TestBenchEvalChecksRoutedAsAuto(t *testing.T) {
	asAuto := func(c *benchCell) *benchCell {
		for i := range c.runs {
			c.runs[i].HandedToCPU = 0
		}
		return c
	}
	for _, tc := range []struct {
		hybrid float64
		ok     bool
	}{{9.2, true}, {8.0, true}, {7.9, false}} {
		checks := evalChecks(summarize([]*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10),
			asAuto(cellOf("hybrid", 1, tc.hybrid, tc.hybrid, tc.hybrid))}), nil, 0.1)
		c := checks[1]
		if !c.RoutedAsAuto || c.Want != 0.8 || c.OK != tc.ok {
			t.Errorf("hybrid at %v routed as auto: check %+v, want routed as auto, want 0.80, ok %v", tc.hybrid, c, tc.ok)
		}
		if !strings.Contains(c.line(), "routed as auto") {
			t.Errorf("check line %q does not say hybrid routed as auto", c.line())
		}
	}
	// One frame handed over in one round: judged like any hybrid.
	h := asAuto(cellOf("hybrid", 1, 8.5, 8.5, 8.5))
	h.runs[1].HandedToCPU = 1
	checks := evalChecks(summarize([]*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10), h}), nil, 0.1)
	if c := checks[1]; c.RoutedAsAuto || c.Want != 0.9 || c.OK {
		t.Errorf("hybrid that handed a frame over at 0.85x: check %+v, want judged against 0.90 and failing", c)
	}
}

func TestBenchEvalChecks(t *testing.T) {
	okOf := func(checks []benchCheck) []bool {
		var out []bool
		for _, c := range checks {
			out = append(out, c.OK)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		cells     []*benchCell
		tolerance float64
		want      []bool
	}{
		// 9/10 is exactly at 1 - 0.10, and passes; a hair below fails.
		{"at the bound", []*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 9, 9, 9), cellOf("hybrid", 1, 8.1, 8.1, 8.1)}, 0.10, []bool{true, true}},
		{"below the bound", []*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 8.99, 8.99, 8.99), cellOf("hybrid", 1, 8.1, 8.1, 8.1)}, 0.10, []bool{false, true}},
		{"hybrid below auto", []*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10), cellOf("hybrid", 1, 9.4, 9.4, 9.4)}, 0.05, []bool{true, false}},
		{"no tolerance", []*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10)}, 0, []bool{true}},
		// No hybrid check without auto at that stream count.
		{"hybrid alone", []*benchCell{cellOf("software", 1, 10, 10, 10), cellOf("auto", 8, 10, 10, 10), cellOf("hybrid", 1, 1, 1, 1)}, 0.1, []bool{false}},
		// auto with nothing to compare: fails, it does not pass.
		{"nothing to compare", []*benchCell{cellOf("auto", 1, 10, 10, 10)}, 0.1, []bool{false}},
		{"no paired round", []*benchCell{cellOf("software", 1, -1, -1, -1), cellOf("afalg", 1, 10, -1, 10), cellOf("auto", 1, -1, 10, -1)}, 0.1, []bool{false}},
	} {
		checks := evalChecks(summarize(tc.cells), nil, tc.tolerance)
		if got := okOf(checks); !slices.Equal(got, tc.want) {
			t.Errorf("%s: checks %+v; want ok %v", tc.name, checks, tc.want)
		}
	}

	checks := evalChecks(summarize([]*benchCell{
		cellOf("software", 1, 10, 10, 10), cellOf("afalg:x", 1, 10, 10, 10), cellOf("auto", 1, 10.3, 10.3, 10.3), cellOf("hybrid", 1, 1, 1, 1),
	}), nil, 0.1)
	want := []string{
		"check: auto, 1 stream: 1.03x the best single engine (software), want >= 0.90: ok",
		"check: hybrid, 1 stream: 0.10x auto, want >= 0.90: FAILED",
	}
	if len(checks) != 2 || checks[0].line() != want[0] || checks[1].line() != want[1] {
		t.Errorf("check lines %+v; want\n%s", checks, strings.Join(want, "\n"))
	}

	// A skipped auto or hybrid fails: a check must not pass because
	// what it checks never ran.
	checks = evalChecks(summarize([]*benchCell{cellOf("software", 1, 10, 10, 10)}),
		[]benchSkipped{{"afalg", "no AF_ALG"}, {"auto", "no profile"}}, 0.1)
	if len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].line(), "auto: not measured (unavailable: no profile): FAILED") {
		t.Errorf("checks with auto skipped: %+v", checks)
	}
}

func TestBenchCheckableError(t *testing.T) {
	for _, tc := range []struct {
		policies []string
		ok       bool
	}{
		{[]string{"software", "auto"}, true},
		{[]string{"afalg", "auto", "hybrid"}, true},
		{[]string{"software", "afalg"}, false},
		{[]string{"software", "hybrid"}, false},
		{[]string{"auto", "hybrid"}, false},
		{[]string{"auto"}, false},
	} {
		if err := checkableError(tc.policies); (err == nil) != tc.ok {
			t.Errorf("checkableError(%v) = %v, want ok %v", tc.policies, err, tc.ok)
		}
	}
}

// fakeBench is a session over software, afalg, auto and hybrid at 1 and 8
// streams whose runs come from mbps, by cell and the cell's run index; it
// counts the runs of every cell.
type fakeBench struct {
	sess  *benchSession
	calls map[string]int
	out   bytes.Buffer
	// remeasured counts the calls of check's callback.
	remeasured int
}

func newFakeBench(mbps func(policy string, streams, i int) float64) *fakeBench {
	f := &fakeBench{calls: map[string]int{}}
	f.sess = &benchSession{repeat: 3, stderr: &bytes.Buffer{}, runCell: func(_ context.Context, c *benchCell) benchRun {
		f.calls[fmt.Sprintf("%s/%d", c.policy, c.streams)]++
		m := mbps(c.policy, c.streams, len(c.runs))
		r := benchRun{Policy: c.policy, Streams: c.streams, MBps: m, Bytes: 1 << 20, Seconds: 1, Verified: true}
		if c.policy == "hybrid" {
			r.HandedToCPU = 1
		}
		if m < 0 {
			r.MBps, r.Error = 0, "broken"
		}
		return r
	}}
	for _, p := range []string{"software", "afalg", "auto", "hybrid"} {
		for _, n := range []int{1, 8} {
			f.sess.cells = append(f.sess.cells, &benchCell{policy: p, streams: n})
		}
	}
	return f
}

// run measures the first -repeat rounds and checks.
func (f *fakeBench) run(t *testing.T) ([]benchRun, []benchCheck, error) {
	t.Helper()
	ctx := context.Background()
	if err := f.sess.measure(ctx, f.sess.cells, f.sess.repeat); err != nil {
		t.Fatal(err)
	}
	return f.sess.check(ctx, 0.10, &f.out, func([]benchRun) { f.remeasured++ })
}

// wantCalls checks that the cells listed ran 6 times (measured once
// more) and every other 3 times.
func (f *fakeBench) wantCalls(t *testing.T, again ...string) {
	t.Helper()
	for _, c := range f.sess.cells {
		key := fmt.Sprintf("%s/%d", c.policy, c.streams)
		want := 3
		if slices.Contains(again, key) {
			want = 6
		}
		if f.calls[key] != want {
			t.Errorf("%s ran %d times, want %d (all: %v)", key, f.calls[key], want, f.calls)
		}
	}
}

// level is a machine where every policy runs at 10 MB/s, times a factor
// that changes from round to round, as load does.
func level(_ string, _, i int) float64 { return 10 * []float64{1, 0.6, 1.3, 0.8, 1.1, 0.7}[i] }

func TestBenchCheckPassesFirstTime(t *testing.T) {
	f := newFakeBench(level)
	_, checks, err := f.run(t)
	if err != nil || len(checks) != 4 {
		t.Fatalf("check: %v, checks %+v; want 4 passing", err, checks)
	}
	f.wantCalls(t)
	if f.remeasured != 0 || strings.Contains(f.out.String(), "again") || strings.Count(f.out.String(), ": ok\n") != 4 {
		t.Errorf("measured again or printed:\n%s", f.out.String())
	}
}

// TestCheckRemeasureRecovers: auto trails afalg (the best single engine)
// at 1 stream in the first rounds and not in the next; only auto, afalg
// and software at 1 stream run again, once, and the check then passes.
func TestBenchCheckRemeasureRecovers(t *testing.T) {
	f := newFakeBench(func(p string, n, i int) float64 {
		m := level(p, n, i)
		switch {
		case p == "software":
			m /= 2
		case p == "afalg" && n == 1 && i < 3:
			m *= 1.25 // auto at 0.80x
		}
		return m
	})
	runs, checks, err := f.run(t)
	if err != nil {
		t.Fatalf("check after measuring again: %v\n%s", err, f.out.String())
	}
	f.wantCalls(t, "software/1", "afalg/1", "auto/1")
	out := f.out.String()
	if f.remeasured != 1 || strings.Count(out, "check: measuring the failing comparisons again (3 more rounds)\n") != 1 {
		t.Errorf("measured again %d times; output:\n%s", f.remeasured, out)
	}
	if !strings.Contains(out, "check: auto, 1 stream: 0.80x the best single engine (afalg), want >= 0.90: FAILED\n") ||
		strings.Count(out, "FAILED") != 1 || strings.Count(out, ": ok\n") != 3+4 {
		t.Errorf("check lines:\n%s", out)
	}
	// Ratios 0.8 three times and 1 three times: the median is 0.9.
	if auto := rowOf(t, runs, "auto", 1); len(auto.Repeats) != 6 || !near(auto.VsBestSingle, 0.9) || !checks[0].OK {
		t.Errorf("auto's row %+v, checks %+v; want 6 rounds at 0.90x", auto, checks)
	}
}

// TestCheckRemeasureStillFails: hybrid trails auto at 8 streams whenever
// it runs: after one more measurement of hybrid, auto and software at 8
// streams, check fails naming it.
func TestBenchCheckRemeasureStillFails(t *testing.T) {
	f := newFakeBench(func(p string, n, i int) float64 {
		m := level(p, n, i)
		if p == "hybrid" && n == 8 {
			m *= 0.85
		}
		return m
	})
	_, checks, err := f.run(t)
	if err == nil || !strings.Contains(err.Error(), "hybrid, 8 streams: 0.85x auto, want >= 0.90") || strings.Contains(err.Error(), "1 stream") {
		t.Fatalf("check: %v; want an error naming hybrid at 8 streams alone\n%s", err, f.out.String())
	}
	f.wantCalls(t, "software/8", "auto/8", "hybrid/8")
	if f.remeasured != 1 || strings.Count(f.out.String(), "again") != 1 || strings.Count(f.out.String(), "FAILED") != 2 {
		t.Errorf("measured again %d times; output:\n%s", f.remeasured, f.out.String())
	}
	if len(checks) != 4 || checks[3].OK || checks[3].Policy != "hybrid" || checks[3].Streams != 8 {
		t.Errorf("final checks %+v", checks)
	}
}

// TestCheckNoRemeasureAfterFailedRun: a failed run fails bench anyway,
// so a failing check is not measured again.
func TestBenchCheckNoRemeasureAfterFailedRun(t *testing.T) {
	f := newFakeBench(func(p string, n, i int) float64 {
		switch {
		case p == "afalg" && n == 8 && i == 1:
			return -1
		case p == "auto" && n == 1:
			return 1
		}
		return 10
	})
	if _, _, err := f.run(t); err == nil {
		t.Fatal("check passed with auto at 0.10x")
	}
	f.wantCalls(t)
	if f.remeasured != 0 || !strings.Contains(f.out.String(), "check: not measuring again: a run failed") {
		t.Errorf("output:\n%s", f.out.String())
	}
}

// Issue 10's case: hybrid routed exactly as auto (nothing handed over) and
// its rounds against auto and software fall on both sides of 1.00x; the
// table and the check line must show the spread, not a gain.
func TestBenchSpreadNotGain(t *testing.T) {
	hybrid := cellOf("hybrid", 1, 11.7, 9.1, 11.2)
	for i := range hybrid.runs {
		hybrid.runs[i].HandedToCPU = 0
	}
	cells := []*benchCell{
		cellOf("software", 1, 10, 10, 10),
		cellOf("auto", 1, 10, 10, 10),
		hybrid,
		cellOf("afalg", 1, 13, 12, 14), // clearly ahead in every round
	}
	runs := summarize(cells)
	h := rowOf(t, runs, "hybrid", 1)
	if !h.GainPaired.Straddles() || !near(h.Gain, 1.12) || !near(h.GainPaired.Low, 0.91) || !near(h.GainPaired.High, 1.17) {
		t.Errorf("hybrid's gain %+v, want median 1.12 over 0.91–1.17, straddling", h.GainPaired)
	}
	rep := &benchReport{Suite: "aes-256-cbc-hmac-sha256", Mode: "in-process", Bytes: 1 << 20, MaxFrame: 65536, WriteSize: 32768, Repeat: 3, Runs: runs}
	var b strings.Builder
	printBenchTable(&b, rep)
	out := b.String()
	// Against afalg every round is a loss: that is shown plainly.
	if !regexp.MustCompile(`(?m)^hybrid .* 1\.12x \(within spread 0\.91–1\.17\) +0\.80x afalg `).MatchString(out) {
		t.Errorf("hybrid's row shows a gain where its rounds straddle 1.00x:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^afalg .* 1\.30x +- `).MatchString(out) {
		t.Errorf("afalg's clear gain is not shown plainly:\n%s", out)
	}
	checks := evalChecks(runs, nil, 0.1)
	if l := checks[len(checks)-1].line(); !strings.Contains(l, "1.12x (within spread 0.91–1.17) auto") {
		t.Errorf("hybrid's check line %q does not show the spread", l)
	}
}
