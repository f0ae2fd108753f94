package main

// How bench measures in rounds, turns the runs into medians and paired
// ratios, and checks (-check) that auto reaches the best single engine and
// hybrid reaches auto. In an emulated VM single runs move by 15–30%, more
// than the differences being judged; two runs made close together in time
// see much the same load, so the ratio of a policy's run to its rival's run
// of the same round is far steadier than either figure, and its median over
// the rounds is what is reported and checked.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/ratio"
	"github.com/offload-dev/offload/tunnel/record"
)

// benchCell is one policy at one stream count, with every run made of it
// in the order they were made.
type benchCell struct {
	policy  string
	engines []engine.Engine
	pol     record.Policy
	streams int
	runs    []benchRun
}

// cellRunner measures a cell once; the real one runs a tunnel, tests
// inject a fake.
type cellRunner func(ctx context.Context, c *benchCell) benchRun

// benchSession is the set of cells being measured and how.
type benchSession struct {
	cells   []*benchCell
	skipped []benchSkipped
	repeat  int
	rounds  int       // rounds started so far: the number of the next one
	stderr  io.Writer // progress lines
	runCell cellRunner
}

// rotation is the order in which round i (counted from 0) runs n cells:
// rounds go in pairs, the first of a pair starts at cell (i/2) mod n and
// wraps around, the second runs the same order backwards (A B C, C B A,
// B C A, A C B, ...): whichever of two cells runs first in one round runs
// second in the next. A cell's place in the round thus moves from round to
// round, so whatever the first or last run of a round meets (a machine
// still idle, or warmed and loaded by the runs before) does not always
// fall on the same policy; and a cell does not always follow the same
// neighbour (with rotation alone, every cell but one would follow the same
// cell in every round, and whatever a run leaves behind, garbage to
// collect, connections closing, would always weigh on the same next one).
func rotation(i, n int) []int {
	if n <= 0 {
		return nil
	}
	order := make([]int, n)
	for k := range order {
		order[k] = (i/2 + k) % n
	}
	if i%2 == 1 {
		slices.Reverse(order)
	}
	return order
}

// measure runs n more rounds of cells, each round every cell once in
// rotated order (cells of the same stream count next to each other), and
// appends the runs to the cells. Only a cancelled ctx
// ends it early.
func (s *benchSession) measure(ctx context.Context, cells []*benchCell, n int) error {
	base := make([]int, len(cells))
	for k, c := range cells {
		base[k] = len(c.runs)
	}
	// Within a round the cells of one stream count run next to each other
	// (the table lists them by policy): the policies a ratio compares are
	// measured close together in time.
	byStreams := make([]int, len(cells))
	for k := range byStreams {
		byStreams[k] = k
	}
	slices.SortStableFunc(byStreams, func(a, b int) int { return cells[a].streams - cells[b].streams })
	for j := range n {
		round := s.rounds
		s.rounds++
		for _, pos := range rotation(j, len(cells)) {
			k := byStreams[pos]
			c := cells[k]
			fmt.Fprintf(s.stderr, "bench: %s, %s%s: ", c.policy, plural(c.streams, "stream"), repeatNote(base[k]+j, base[k]+n))
			r := s.runCell(ctx, c)
			r.round = round
			if r.Error != "" {
				fmt.Fprintf(s.stderr, "failed: %s\n", r.Error)
			} else {
				fmt.Fprintf(s.stderr, "%s in %.2fs, %.1f MB/s\n", sizeString(r.Bytes), r.Seconds, r.MBps)
			}
			c.runs = append(c.runs, r)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	return nil
}

// isSelector says whether a policy is the selector's (auto, hybrid) rather
// than a single engine.
func isSelector(policy string) bool {
	return policy == config.EngineAuto || policy == config.EngineHybrid
}

// summarize makes the report's rows, one per cell: the median run, every
// round's MB/s, and the paired ratios against software, the best single
// engine and (for hybrid) auto at the same stream count.
func summarize(cells []*benchCell) []benchRun {
	find := func(policy string, streams int) *benchCell {
		for _, c := range cells {
			if c.policy == policy && c.streams == streams {
				return c
			}
		}
		return nil
	}
	out := make([]benchRun, len(cells))
	for i, c := range cells {
		r := median(c.runs)
		r.Repeats = make([]float64, len(c.runs))
		for k, run := range c.runs {
			if run.Error == "" {
				r.Repeats[k] = run.MBps
			}
		}
		if sw := find(engine.SoftwareName, c.streams); sw != nil {
			r.GainPaired = pairedRatio(c.runs, sw.runs)
			r.Gain = r.GainPaired.Median
		}
		if isSelector(c.policy) {
			if b := bestSingle(cells, c.streams); b != nil {
				r.VsBestSinglePaired = pairedRatio(c.runs, b.runs)
				r.VsBestSingle = r.VsBestSinglePaired.Median
				r.VsBestSinglePolicy = b.policy
			}
		}
		if a := find(config.EngineAuto, c.streams); a != nil && c.policy == config.EngineHybrid {
			r.VsAutoPaired = pairedRatio(c.runs, a.runs)
			r.VsAuto = r.VsAutoPaired.Median
		}
		// The row counts what hybrid handed over in all its rounds.
		r.HandedToCPU = 0
		for _, run := range c.runs {
			r.HandedToCPU += run.HandedToCPU
		}
		out[i] = r
	}
	return out
}

// bestSingle is the cell at the given stream count, among the policies
// that are not the selector's (software included), with the highest
// median MB/s over its successful runs; the first in policy order on a
// tie, nil if none ran.
func bestSingle(cells []*benchCell, streams int) *benchCell {
	var best *benchCell
	var bestMBps float64
	for _, c := range cells {
		if c.streams != streams || isSelector(c.policy) {
			continue
		}
		if m := medianMBps(c.runs); m > bestMBps {
			best, bestMBps = c, m
		}
	}
	return best
}

// medianMBps is the MB/s of the median successful run, as the table shows
// it when no run failed; 0 for none.
func medianMBps(runs []benchRun) float64 {
	ok := slices.DeleteFunc(slices.Clone(runs), func(r benchRun) bool { return r.Error != "" })
	if len(ok) == 0 {
		return 0
	}
	return median(ok).MBps
}

// pairedRatio is a's MB/s over b's in each round in which both ran
// successfully: their median and range (no rounds if there is no such
// round).
func pairedRatio(a, b []benchRun) ratio.Paired {
	var ratios []float64
	for _, x := range a {
		if x.Error != "" || x.MBps <= 0 {
			continue
		}
		for _, y := range b {
			if y.round == x.round && y.Error == "" && y.MBps > 0 {
				ratios = append(ratios, x.MBps/y.MBps)
				break
			}
		}
	}
	return ratio.Of(ratios)
}

// Kinds of benchCheck.
const (
	checkVsBestSingle = "vs_best_single" // auto against the best single engine
	checkVsAuto       = "vs_auto"        // hybrid against auto
)

// benchCheck is one comparison -check makes.
type benchCheck struct {
	Policy  string `json:"policy"`
	Streams int    `json:"streams,omitempty"` // 0: the policy did not run at all
	Kind    string `json:"kind"`
	// Against is the policy compared with: the best single engine, or auto.
	Against string  `json:"against,omitempty"`
	Ratio   float64 `json:"ratio"` // median of per-round ratios; 0: none
	// Paired is Ratio with the range of the per-round ratios, which the
	// line prints where they straddle 1.00x.
	Paired ratio.Paired `json:"paired"`
	Want   float64      `json:"want"` // the least Ratio that passes
	OK     bool         `json:"ok"`
	// Missing says why there is no ratio to judge.
	Missing string `json:"missing,omitempty"`
	// RoutedAsAuto: hybrid handed no frame to the CPU in any round, so it
	// routed every frame as auto does; Want is then 1 - 2·tolerance.
	RoutedAsAuto bool `json:"routed_as_auto,omitempty"`
}

func (c benchCheck) String() string {
	who := c.Policy
	if c.Streams > 0 {
		who += ", " + plural(c.Streams, "stream")
	}
	against := c.Against
	if c.Kind == checkVsBestSingle {
		against = fmt.Sprintf("the best single engine (%s)", c.Against)
	}
	switch {
	case c.Missing != "":
		return fmt.Sprintf("%s: %s", who, c.Missing)
	case c.Ratio == 0:
		return fmt.Sprintf("%s: no round in which both it and %s ran, want >= %.2f", who, against, c.Want)
	}
	if c.RoutedAsAuto {
		against += " (it handed no frame to the CPU: routed as auto, so only a gross loss fails)"
	}
	x := fmt.Sprintf("%.2fx", c.Ratio)
	if c.Paired.Rounds > 0 {
		x = c.Paired.String()
	}
	return fmt.Sprintf("%s: %s %s, want >= %.2f", who, x, against, c.Want)
}

// line is the check's line in bench's output.
func (c benchCheck) line() string {
	verdict := "ok"
	if !c.OK {
		verdict = "FAILED"
	}
	return "check: " + c.String() + ": " + verdict
}

// checkableError says why -check can't compare anything among policies,
// or nil: auto is compared with the best single-engine policy and hybrid
// with auto, so auto and at least one single engine are needed.
func checkableError(policies []string) error {
	auto, single := false, false
	for _, p := range policies {
		auto = auto || p == config.EngineAuto
		single = single || !isSelector(p)
	}
	if auto && single {
		return nil
	}
	return errors.New("-check compares auto with the best single-engine policy and hybrid with auto: " +
		"-policy needs auto and at least one single-engine policy (software counts)")
}

// ratioSlack keeps a ratio level with the bound from failing by rounding.
const ratioSlack = 1e-9

// evalChecks makes the checks for the rows runs: auto against the best
// single engine at each stream count auto ran at, hybrid against auto at
// each where both ran. An auto or hybrid policy that was skipped fails:
// a check must not pass because what it checks never ran.
func evalChecks(runs []benchRun, skipped []benchSkipped, tolerance float64) []benchCheck {
	want := 1 - tolerance
	var checks []benchCheck
	for _, s := range skipped {
		kind := checkVsBestSingle
		switch s.Policy {
		case config.EngineAuto:
		case config.EngineHybrid:
			kind = checkVsAuto
		default:
			continue
		}
		checks = append(checks, benchCheck{Policy: s.Policy, Kind: kind, Want: want,
			Missing: "not measured (unavailable: " + s.Reason + ")"})
	}
	autoAt := map[int]bool{}
	for _, r := range runs {
		autoAt[r.Streams] = autoAt[r.Streams] || r.Policy == config.EngineAuto
	}
	for _, r := range runs {
		var c benchCheck
		switch {
		case r.Policy == config.EngineAuto:
			c = benchCheck{Kind: checkVsBestSingle, Against: r.VsBestSinglePolicy, Ratio: r.VsBestSingle, Paired: r.VsBestSinglePaired}
			if c.Against == "" {
				c.Missing = "no single-engine policy ran at this stream count to compare with"
			}
		case r.Policy == config.EngineHybrid && autoAt[r.Streams]:
			c = benchCheck{Kind: checkVsAuto, Against: config.EngineAuto, Ratio: r.VsAuto, Paired: r.VsAutoPaired, RoutedAsAuto: r.HandedToCPU == 0}
		default:
			continue
		}
		c.Policy, c.Streams, c.Want = r.Policy, r.Streams, want
		if c.RoutedAsAuto {
			// Frame for frame what auto did: the ratio is the noise
			// between two runs of one routing; only a gross loss (the
			// cost of hybrid's bookkeeping) fails.
			c.Want = 1 - 2*tolerance
		}
		c.OK = c.Missing == "" && c.Ratio > 0 && c.Ratio >= c.Want-ratioSlack
		checks = append(checks, c)
	}
	return checks
}

// check runs -check on the session's cells: it prints a line per check
// to out and, if any fails, measures the cells involved in the failing
// comparisons (the policy, the one it is compared with, and software at
// the same stream count) -repeat more rounds, calls remeasured with the
// new rows, and checks again. It returns the final rows and checks, and
// an error naming the checks that still fail (or ctx's error).
//
// A failing comparison is measured once more because one unlucky round
// can still tip a median of three on a noisy machine; a real shortfall
// fails again.
func (s *benchSession) check(ctx context.Context, tolerance float64, out io.Writer, remeasured func([]benchRun)) ([]benchRun, []benchCheck, error) {
	runs := summarize(s.cells)
	checks := evalChecks(runs, s.skipped, tolerance)
	printChecks(out, checks)
	involved := s.involved(checks)
	if len(involved) == 0 {
		return runs, checks, checksError(checks)
	}
	// A failed run fails bench anyway: more rounds would not change that.
	for _, r := range runs {
		if r.Error != "" {
			fmt.Fprintln(out, "check: not measuring again: a run failed")
			return runs, checks, checksError(checks)
		}
	}
	fmt.Fprintf(out, "check: measuring the failing comparisons again (%d more rounds)\n", s.repeat)
	if err := s.measure(ctx, involved, s.repeat); err != nil {
		return runs, checks, err
	}
	runs = summarize(s.cells)
	if remeasured != nil {
		remeasured(runs)
	}
	checks = evalChecks(runs, s.skipped, tolerance)
	printChecks(out, checks)
	return runs, checks, checksError(checks)
}

// involved are the cells, in cell order, of the failing checks that have
// something to measure again: the policy, the one it was compared with,
// and software at the same stream count.
func (s *benchSession) involved(checks []benchCheck) []*benchCell {
	want := map[string]bool{}
	key := func(policy string, streams int) string { return fmt.Sprintf("%s/%d", policy, streams) }
	for _, c := range checks {
		if c.OK || c.Against == "" || c.Streams == 0 {
			continue
		}
		for _, p := range []string{c.Policy, c.Against, engine.SoftwareName} {
			want[key(p, c.Streams)] = true
		}
	}
	var cells []*benchCell
	for _, c := range s.cells {
		if want[key(c.policy, c.streams)] {
			cells = append(cells, c)
		}
	}
	return cells
}

func printChecks(w io.Writer, checks []benchCheck) {
	for _, c := range checks {
		fmt.Fprintln(w, c.line())
	}
}

// checksError names the failing checks; nil if all pass.
func checksError(checks []benchCheck) error {
	var failed []string
	for _, c := range checks {
		if !c.OK {
			failed = append(failed, c.String())
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("-check failed: %s", strings.Join(failed, "; "))
}
