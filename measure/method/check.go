package method

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/offload-dev/offload/measure/ratio"
)

// Kinds of Check.
const (
	KindVsBestSingle = "vs_best_single" // auto against the best single row
	KindVsAuto       = "vs_auto"        // hybrid against auto
)

// Check is one comparison bench -check makes.
type Check struct {
	Policy  string `json:"policy"`
	Streams int    `json:"streams,omitempty"` // 0: the policy did not run at all
	Kind    string `json:"kind"`
	// Against is the row compared with: the best single engine, or auto.
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
	// routed every frame as auto does; Want is then grossLoss's.
	RoutedAsAuto bool `json:"routed_as_auto,omitempty"`
	// RoutedAsBest: auto sent (nearly) all its bytes to the engine of the
	// best single row, so it routed as that row does; Want is then
	// grossLoss's too.
	RoutedAsBest bool `json:"routed_as_best,omitempty"`
}

func (c Check) String() string {
	who := c.Policy
	if c.Streams > 0 {
		who += ", " + Plural(c.Streams, "stream")
	}
	against := c.Against
	if c.Kind == KindVsBestSingle {
		against = fmt.Sprintf("the best single engine (%s)", c.Against)
	}
	switch {
	case c.Missing != "":
		return fmt.Sprintf("%s: %s", who, c.Missing)
	case c.Ratio == 0:
		return fmt.Sprintf("%s: no round in which both it and %s ran, want >= %.2f", who, against, c.Want)
	}
	switch {
	case c.RoutedAsAuto:
		against += " (it handed no frame to the CPU: routed as auto, so only a gross loss fails)"
	case c.RoutedAsBest:
		against += " (it sent its bytes to that engine: routed as it, so only a gross loss fails)"
	}
	x := fmt.Sprintf("%.2fx", c.Ratio)
	if c.Paired.Rounds > 0 {
		x = c.Paired.String()
	}
	return fmt.Sprintf("%s: %s %s, want >= %.2f", who, x, against, c.Want)
}

// Line is the check's line in bench's output.
func (c Check) Line() string {
	verdict := "ok"
	if !c.OK {
		verdict = "FAILED"
	}
	return "check: " + c.String() + ": " + verdict
}

// Skipped is a row that could not be measured, and why.
type Skipped struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// CheckRow is what the checks read of a reported row.
type CheckRow struct {
	Name    string
	Streams int
	Ratios  Ratios
	// Failed: a run of the row failed (which fails bench anyway, so the
	// checks do not measure again).
	Failed bool
	// RoutedAsAuto (hybrid): it handed no frame to the CPU in any round.
	RoutedAsAuto bool
	// RoutedAs (auto) is the engine that carried at least RoutedShare of
	// the row's bytes, or "" if none did.
	RoutedAs string
}

// RoutedShare is the share of a row's bytes one engine must carry for
// the row to count as routed as that engine: the rest is the few small
// frames (stream headers, window updates) a selector gives the CPU.
const RoutedShare = 0.99

// Checker is how bench -check judges: auto against the best single row
// at each stream count auto ran at, hybrid against auto at each where
// both ran, each a median of paired per-round ratios at least
// 1 - Tolerance.
type Checker struct {
	Roles     Roles
	Tolerance float64
	// Skipped are the rows that could not run: an Auto or Hybrid among
	// them fails, since a check must not pass because what it checks
	// never ran.
	Skipped []Skipped
	// Repeat is how many more rounds the cells of failing comparisons
	// are measured.
	Repeat int
	// Out gets a line per check and what is measured again.
	Out io.Writer
	// Remeasured, if set, is called once the failing comparisons have
	// been measured again, before they are judged again (bench prints
	// its table anew).
	Remeasured func()
}

// Checkable says why the checks can't compare anything among names, or
// nil: Auto is compared with the best single row and Hybrid with Auto,
// so Auto and at least one single row are needed.
func (ro Roles) Checkable(names []string) error {
	auto, single := false, false
	for _, p := range names {
		auto = auto || p == ro.Auto
		single = single || ro.Single(p)
	}
	if auto && single {
		return nil
	}
	return fmt.Errorf("-check compares %s with the best single-engine policy and %s with %s: "+
		"-policy needs %s and at least one single-engine policy (%s counts)", ro.Auto, ro.Hybrid, ro.Auto, ro.Auto, ro.Baseline)
}

// grossLoss is the bound of a row that routed as the row it is compared
// with: 1 - 2·tolerance, and never under half the usual bound, so a
// large tolerance does not make the check unable to fail.
func grossLoss(tolerance float64) float64 {
	return max(1-2*tolerance, (1-tolerance)/2)
}

// ratioSlack keeps a ratio level with the bound from failing by rounding.
const ratioSlack = 1e-9

// Eval makes the checks for rows.
func (ck Checker) Eval(rows []CheckRow) []Check {
	ro := ck.Roles
	want := 1 - ck.Tolerance
	var checks []Check
	for _, s := range ck.Skipped {
		kind := KindVsBestSingle
		switch s.Policy {
		case ro.Auto:
		case ro.Hybrid:
			kind = KindVsAuto
		default:
			continue
		}
		checks = append(checks, Check{Policy: s.Policy, Kind: kind, Want: want,
			Missing: "not measured (unavailable: " + s.Reason + ")"})
	}
	autoAt := map[int]bool{}
	for _, r := range rows {
		autoAt[r.Streams] = autoAt[r.Streams] || r.Name == ro.Auto
	}
	for _, r := range rows {
		var c Check
		switch {
		case r.Name == ro.Auto:
			c = Check{Kind: KindVsBestSingle, Against: r.Ratios.VsBestSinglePolicy, Ratio: r.Ratios.VsBestSingle, Paired: r.Ratios.VsBestSinglePaired}
			if c.Against == "" {
				c.Missing = "no single-engine policy ran at this stream count to compare with"
			}
		case r.Name == ro.Hybrid && autoAt[r.Streams]:
			c = Check{Kind: KindVsAuto, Against: ro.Auto, Ratio: r.Ratios.VsAuto, Paired: r.Ratios.VsAutoPaired, RoutedAsAuto: r.RoutedAsAuto}
		default:
			continue
		}
		c.Policy, c.Streams, c.Want = r.Name, r.Streams, want
		c.RoutedAsBest = r.Name == ro.Auto && c.Against != "" && r.RoutedAs == c.Against
		if c.RoutedAsAuto || c.RoutedAsBest {
			// Frame for frame (byte for byte) what the other row did:
			// the ratio is the noise between two runs of one routing,
			// which on an emulated VM reaches ±10% and more per round;
			// only a gross loss (the cost of the selector's
			// bookkeeping) fails.
			c.Want = grossLoss(ck.Tolerance)
		}
		c.OK = c.Missing == "" && c.Ratio > 0 && c.Ratio >= c.Want-ratioSlack
		checks = append(checks, c)
	}
	return checks
}

// Check judges the session's rows (rows returns them as they stand): it
// prints a line per check to ck.Out and, if any fails, measures the cells
// involved in the failing comparisons (the row, the one it is compared
// with, and the baseline at the same stream count) ck.Repeat more rounds,
// calls ck.Remeasured and judges again. It returns the final checks, and
// an error naming the checks that still fail (or the rounds' error).
//
// A failing comparison is measured once more because one unlucky round
// can still tip a median of three on a noisy machine; a real shortfall
// fails again.
func (s *Session[R]) Check(ctx context.Context, ck Checker, rows func() []CheckRow) ([]Check, error) {
	rs := rows()
	checks := ck.Eval(rs)
	printChecks(ck.Out, checks)
	involved := s.involved(ck.Roles, checks)
	if len(involved) == 0 {
		return checks, checksError(checks)
	}
	// A failed run fails bench anyway: more rounds would not change that.
	for _, r := range rs {
		if r.Failed {
			fmt.Fprintln(ck.Out, "check: not measuring again: a run failed")
			return checks, checksError(checks)
		}
	}
	fmt.Fprintf(ck.Out, "check: measuring the failing comparisons again (%d more rounds)\n", ck.Repeat)
	if err := s.Rounds(ctx, involved, ck.Repeat); err != nil {
		return checks, fmt.Errorf("-check measuring again: %w", err)
	}
	if ck.Remeasured != nil {
		ck.Remeasured()
	}
	checks = ck.Eval(rows())
	printChecks(ck.Out, checks)
	return checks, checksError(checks)
}

// involved are the cells, in cell order, of the failing checks that have
// something to measure again: the row, the one it was compared with, and
// the baseline at the same stream count.
func (s *Session[R]) involved(ro Roles, checks []Check) []*Cell[R] {
	type key struct {
		name    string
		streams int
	}
	want := map[key]bool{}
	for _, c := range checks {
		if c.OK || c.Against == "" || c.Streams == 0 {
			continue
		}
		for _, p := range []string{c.Policy, c.Against, ro.Baseline} {
			want[key{p, c.Streams}] = true
		}
	}
	var cells []*Cell[R]
	for _, c := range s.Cells {
		if want[key{c.Name, c.Streams}] {
			cells = append(cells, c)
		}
	}
	return cells
}

func printChecks(w io.Writer, checks []Check) {
	for _, c := range checks {
		fmt.Fprintln(w, c.Line())
	}
}

// ErrCheck marks a check that failed: bench exits 1 with it.
var ErrCheck = errors.New("-check failed")

// checksError names the failing checks; nil if all pass.
func checksError(checks []Check) error {
	var failed []string
	for _, c := range checks {
		if !c.OK {
			failed = append(failed, c.String())
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrCheck, strings.Join(failed, "; "))
}
