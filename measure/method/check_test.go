package method

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func eval(cells []*Cell[res], skipped []Skipped, tolerance float64) []Check {
	return Checker{Roles: roles, Tolerance: tolerance, Skipped: skipped}.Eval(rows(cells))
}

// A hybrid that handed nothing to the CPU in any round routed as auto:
// only a gross loss (below 1 - 2·tolerance) fails it.
func TestEvalRoutedAsAuto(t *testing.T) {
	asAuto := func(c *Cell[res]) *Cell[res] {
		for i := range c.Runs {
			c.Runs[i].Result.handed = 0
		}
		return c
	}
	for _, tc := range []struct {
		hybrid float64
		ok     bool
	}{{9.2, true}, {8.0, true}, {7.9, false}} {
		checks := eval([]*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10),
			asAuto(cellOf("hybrid", 1, tc.hybrid, tc.hybrid, tc.hybrid))}, nil, 0.1)
		c := checks[1]
		if !c.RoutedAsAuto || c.Want != 0.8 || c.OK != tc.ok {
			t.Errorf("hybrid at %v routed as auto: check %+v, want routed as auto, want 0.80, ok %v", tc.hybrid, c, tc.ok)
		}
		if !strings.Contains(c.Line(), "routed as auto") {
			t.Errorf("check line %q does not say hybrid routed as auto", c.Line())
		}
	}
	// One frame handed over in one round: judged like any hybrid.
	h := asAuto(cellOf("hybrid", 1, 8.5, 8.5, 8.5))
	h.Runs[1].Result.handed = 1
	checks := eval([]*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10), h}, nil, 0.1)
	if c := checks[1]; c.RoutedAsAuto || c.Want != 0.9 || c.OK {
		t.Errorf("hybrid that handed a frame over at 0.85x: check %+v, want judged against 0.90 and failing", c)
	}
}

func TestEval(t *testing.T) {
	okOf := func(checks []Check) []bool {
		var out []bool
		for _, c := range checks {
			out = append(out, c.OK)
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		cells     []*Cell[res]
		tolerance float64
		want      []bool
	}{
		// 9/10 is exactly at 1 - 0.10, and passes; a hair below fails.
		{"at the bound", []*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 9, 9, 9), cellOf("hybrid", 1, 8.1, 8.1, 8.1)}, 0.10, []bool{true, true}},
		{"below the bound", []*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 8.99, 8.99, 8.99), cellOf("hybrid", 1, 8.1, 8.1, 8.1)}, 0.10, []bool{false, true}},
		{"hybrid below auto", []*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10), cellOf("hybrid", 1, 9.4, 9.4, 9.4)}, 0.05, []bool{true, false}},
		{"no tolerance", []*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 1, 10, 10, 10)}, 0, []bool{true}},
		// No hybrid check without auto at that stream count.
		{"hybrid alone", []*Cell[res]{cellOf("software", 1, 10, 10, 10), cellOf("auto", 8, 10, 10, 10), cellOf("hybrid", 1, 1, 1, 1)}, 0.1, []bool{false}},
		// auto with nothing to compare: fails, it does not pass.
		{"nothing to compare", []*Cell[res]{cellOf("auto", 1, 10, 10, 10)}, 0.1, []bool{false}},
		{"no paired round", []*Cell[res]{cellOf("software", 1, -1, -1, -1), cellOf("afalg", 1, 10, -1, 10), cellOf("auto", 1, -1, 10, -1)}, 0.1, []bool{false}},
	} {
		checks := eval(tc.cells, nil, tc.tolerance)
		if got := okOf(checks); !slices.Equal(got, tc.want) {
			t.Errorf("%s: checks %+v; want ok %v", tc.name, checks, tc.want)
		}
	}

	checks := eval([]*Cell[res]{
		cellOf("software", 1, 10, 10, 10), cellOf("afalg:x", 1, 10, 10, 10), cellOf("auto", 1, 10.3, 10.3, 10.3), cellOf("hybrid", 1, 1, 1, 1),
	}, nil, 0.1)
	want := []string{
		"check: auto, 1 stream: 1.03x the best single engine (software), want >= 0.90: ok",
		"check: hybrid, 1 stream: 0.10x auto, want >= 0.90: FAILED",
	}
	if len(checks) != 2 || checks[0].Line() != want[0] || checks[1].Line() != want[1] {
		t.Errorf("check lines %+v; want\n%s", checks, strings.Join(want, "\n"))
	}

	// A skipped auto or hybrid fails: a check must not pass because
	// what it checks never ran.
	checks = eval([]*Cell[res]{cellOf("software", 1, 10, 10, 10)}, []Skipped{{"afalg", "no AF_ALG"}, {"auto", "no profile"}}, 0.1)
	if len(checks) != 1 || checks[0].OK || !strings.Contains(checks[0].Line(), "auto: not measured (unavailable: no profile): FAILED") {
		t.Errorf("checks with auto skipped: %+v", checks)
	}
}

func TestCheckable(t *testing.T) {
	for _, tc := range []struct {
		names []string
		ok    bool
	}{
		{[]string{"software", "auto"}, true},
		{[]string{"afalg", "auto", "hybrid"}, true},
		{[]string{"software", "afalg"}, false},
		{[]string{"software", "hybrid"}, false},
		{[]string{"auto", "hybrid"}, false},
		{[]string{"auto"}, false},
	} {
		if err := roles.Checkable(tc.names); (err == nil) != tc.ok {
			t.Errorf("Checkable(%v) = %v, want ok %v", tc.names, err, tc.ok)
		}
	}
	want := "-check compares auto with the best single-engine policy and hybrid with auto: -policy needs auto and at least one single-engine policy (software counts)"
	if err := roles.Checkable(nil); err == nil || err.Error() != want {
		t.Errorf("Checkable(nil) = %v, want %q", err, want)
	}
}

// fakeBench is a session over software, afalg, auto and hybrid at 1 and 8
// streams whose runs come from rate.
type fakeBench struct {
	*recorder
	out        bytes.Buffer
	remeasured int // calls of Checker.Remeasured
}

func newFakeBench(rate func(name string, streams, i int) float64) *fakeBench {
	var cells []*Cell[res]
	for _, p := range []string{"software", "afalg", "auto", "hybrid"} {
		for _, n := range []int{1, 8} {
			cells = append(cells, &Cell[res]{Name: p, Streams: n})
		}
	}
	return &fakeBench{recorder: newRecorder(rate, cells...)}
}

// run measures 3 rounds and checks.
func (f *fakeBench) run(t *testing.T) ([]Check, error) {
	t.Helper()
	ctx := context.Background()
	if err := f.s.Rounds(ctx, f.s.Cells, 3); err != nil {
		t.Fatal(err)
	}
	ck := Checker{Roles: roles, Tolerance: 0.10, Repeat: 3, Out: &f.out, Remeasured: func() { f.remeasured++ }}
	return f.s.Check(ctx, ck, func() []CheckRow { return rows(f.s.Cells) })
}

// wantCalls checks that the cells listed ran 6 times (measured once
// more) and every other 3 times.
func (f *fakeBench) wantCalls(t *testing.T, again ...string) {
	t.Helper()
	for k, n := range f.calls {
		want := 3
		if slices.Contains(again, k) {
			want = 6
		}
		if n != want {
			t.Errorf("%s ran %d times, want %d (all: %v)", k, n, want, f.calls)
		}
	}
	if len(f.calls) != 8 {
		t.Errorf("%d cells ran, want 8: %v", len(f.calls), f.calls)
	}
}

// level is a machine where every row runs at 10 MB/s, times a factor
// that changes from round to round, as load does.
func level(_ string, _, i int) float64 { return 10 * []float64{1, 0.6, 1.3, 0.8, 1.1, 0.7}[i] }

func TestCheckPassesFirstTime(t *testing.T) {
	f := newFakeBench(level)
	checks, err := f.run(t)
	if err != nil || len(checks) != 4 {
		t.Fatalf("check: %v, checks %+v; want 4 passing", err, checks)
	}
	f.wantCalls(t)
	if f.remeasured != 0 || strings.Contains(f.out.String(), "again") || strings.Count(f.out.String(), ": ok\n") != 4 {
		t.Errorf("measured again or printed:\n%s", f.out.String())
	}
}

// auto trails afalg (the best single engine) at 1 stream in the first
// rounds and not in the next; only auto, afalg and software at 1 stream
// run again, once, and the check then passes.
func TestCheckRemeasureRecovers(t *testing.T) {
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
	checks, err := f.run(t)
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
	if r := ratiosOf(t, f.s.Cells, "auto", 1); len(r.Repeats) != 6 || !near(r.VsBestSingle, 0.9) || !checks[0].OK {
		t.Errorf("auto's ratios %+v, checks %+v; want 6 rounds at 0.90x", r, checks)
	}
}

// hybrid trails auto at 8 streams whenever it runs: after one more
// measurement of hybrid, auto and software at 8 streams, the check fails
// naming it.
func TestCheckRemeasureStillFails(t *testing.T) {
	f := newFakeBench(func(p string, n, i int) float64 {
		m := level(p, n, i)
		if p == "hybrid" && n == 8 {
			m *= 0.85
		}
		return m
	})
	checks, err := f.run(t)
	if !errors.Is(err, ErrCheck) || !strings.Contains(err.Error(), "hybrid, 8 streams: 0.85x auto, want >= 0.90") || strings.Contains(err.Error(), "1 stream") {
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

// A failed run fails bench anyway, so a failing check is not measured
// again.
func TestCheckNoRemeasureAfterFailedRun(t *testing.T) {
	f := newFakeBench(func(p string, n, i int) float64 {
		switch {
		case p == "afalg" && n == 8 && i == 1:
			return -1
		case p == "auto" && n == 1:
			return 1
		}
		return 10
	})
	if _, err := f.run(t); err == nil {
		t.Fatal("check passed with auto at 0.10x")
	}
	f.wantCalls(t)
	if f.remeasured != 0 || !strings.Contains(f.out.String(), "check: not measuring again: a run failed") {
		t.Errorf("output:\n%s", f.out.String())
	}
}

// Auto that sent its bytes to the best single row's engine routed as that
// row: only a gross loss fails it; routed elsewhere (or mixed), the usual
// bound holds.
func TestEvalRoutedAsBest(t *testing.T) {
	row := func(vs float64, routedAs string) []CheckRow {
		return []CheckRow{{Name: "auto", Streams: 4, RoutedAs: routedAs,
			Ratios: Ratios{VsBestSingle: vs, VsBestSinglePolicy: "afalg:dev"}}}
	}
	for _, tc := range []struct {
		vs       float64
		routedAs string
		best     bool
		want     float64
		ok       bool
	}{
		{0.85, "afalg:dev", true, 0.8, true},
		{0.79, "afalg:dev", true, 0.8, false},
		{0.85, "software", false, 0.9, false},
		{0.85, "", false, 0.9, false},
		{0.95, "", false, 0.9, true},
	} {
		c := Checker{Roles: roles, Tolerance: 0.1}.Eval(row(tc.vs, tc.routedAs))[0]
		if c.RoutedAsBest != tc.best || c.Want != tc.want || c.OK != tc.ok {
			t.Errorf("auto at %.2fx routed as %q: check %+v; want routed as best %v, want %.2f, ok %v", tc.vs, tc.routedAs, c, tc.best, tc.want, tc.ok)
		}
		if strings.Contains(c.Line(), "routed as it") != tc.best {
			t.Errorf("check line %q: says routed as the best engine: %v, want %v", c.Line(), !tc.best, tc.best)
		}
	}
}
