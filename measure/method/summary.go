package method

import (
	"slices"

	"github.com/offload-dev/offload/measure/ratio"
)

// MedianIndex is the index in v of its median (the lower of the middle
// two when even; the first of equal values), so that other figures of
// the same run can go with it: harness/compare reports the CPU of the run
// whose CPU total is the median, user and system of one run, not medians
// of their own.
func MedianIndex(v []float64) int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case v[a] < v[b]:
			return -1
		case v[a] > v[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// ok reports whether a run succeeded and moved something, so that it
// can be one side of a ratio.
func ok[R Result](r R) bool { return r.Failure() == "" && r.Rate() > 0 }

// Median is the run with the median rate; a failed run wins, so that
// failures are never hidden behind a good median. The zero R for a cell
// without runs.
func (c *Cell[R]) Median() R {
	var zero R
	if len(c.Runs) == 0 {
		return zero
	}
	for _, r := range c.Runs {
		if r.Result.Failure() != "" {
			return r.Result
		}
	}
	return c.Runs[MedianIndex(c.Rates())].Result
}

// Rates is every run's rate in run order, 0 for a failed run.
func (c *Cell[R]) Rates() []float64 {
	out := make([]float64, len(c.Runs))
	for i, r := range c.Runs {
		if r.Result.Failure() == "" {
			out[i] = r.Result.Rate()
		}
	}
	return out
}

// MedianRate is the rate of the median successful run, as the table shows
// it when no run failed; 0 for none.
func (c *Cell[R]) MedianRate() float64 {
	var rates []float64
	for _, r := range c.Runs {
		if r.Result.Failure() == "" {
			rates = append(rates, r.Result.Rate())
		}
	}
	if len(rates) == 0 {
		return 0
	}
	return rates[MedianIndex(rates)]
}

// Paired is a's rate over b's in each round in which both ran and moved
// something: their median and range (no rounds if there is no such
// round).
func Paired[R Result](a, b *Cell[R]) ratio.Paired {
	var ratios []float64
	for _, x := range a.Runs {
		if !ok(x.Result) {
			continue
		}
		i := slices.IndexFunc(b.Runs, func(y Run[R]) bool { return y.Round == x.Round && ok(y.Result) })
		if i >= 0 {
			ratios = append(ratios, x.Result.Rate()/b.Runs[i].Result.Rate())
		}
	}
	return ratio.Of(ratios)
}

// Find is the cell of name at streams, or nil.
func Find[R Result](cells []*Cell[R], name string, streams int) *Cell[R] {
	i := slices.IndexFunc(cells, func(c *Cell[R]) bool { return c.Name == name && c.Streams == streams })
	if i < 0 {
		return nil
	}
	return cells[i]
}

// Roles names the rows bench's comparisons are about: every row's gain
// is over Baseline, Auto is compared with the best single row (one that
// is neither Auto nor Hybrid, Baseline included), Hybrid with that and
// with Auto. The caller names them (bench: software, auto, hybrid), so
// this package does not depend on how engine specs are spelled.
type Roles struct {
	Baseline, Auto, Hybrid string
}

// Single says whether name is a single row rather than Auto or Hybrid.
func (ro Roles) Single(name string) bool { return name != ro.Auto && name != ro.Hybrid }

// BestSingle is the cell at the given stream count, among the single
// rows, with the highest median rate over its successful runs; the first
// in cell order on a tie, nil if none ran.
func BestSingle[R Result](ro Roles, cells []*Cell[R], streams int) *Cell[R] {
	var best *Cell[R]
	var bestRate float64
	for _, c := range cells {
		if c.Streams != streams || !ro.Single(c.Name) {
			continue
		}
		if m := c.MedianRate(); m > bestRate {
			best, bestRate = c, m
		}
	}
	return best
}

// Ratios are a row's figures over the rounds and its paired ratios
// against the rows Roles names, at the same stream count. They are part
// of bench's JSON rows, so their names are bench's.
type Ratios struct {
	// Repeats is the MB/s of every run of the row, in run order (0 for a
	// failed run): entry i is round i, and the cells -check measured
	// again have their extra rounds after the first -repeat.
	Repeats []float64 `json:"repeats_mb_per_s,omitempty"`
	// Gain is the median over the rounds of MB/s over the baseline's
	// (software) in the same round (0: no baseline run to compare with).
	// Failed runs are left out.
	Gain float64 `json:"gain_vs_software,omitempty"`
	// GainPaired, VsBestSinglePaired and VsAutoPaired are those medians
	// with the range of their per-round ratios: where it straddles 1.00x
	// the rounds do not agree on which side is ahead, and the table says
	// so instead of showing a gain.
	GainPaired         ratio.Paired `json:"gain_vs_software_paired,omitzero"`
	VsBestSinglePaired ratio.Paired `json:"vs_best_single_paired,omitzero"`
	VsAutoPaired       ratio.Paired `json:"vs_auto_paired,omitzero"`
	// VsBestSingle (auto and hybrid only) is the same median of ratios
	// against VsBestSinglePolicy, the BestSingle row.
	VsBestSingle       float64 `json:"vs_best_single,omitempty"`
	VsBestSinglePolicy string  `json:"vs_best_single_policy,omitempty"`
	// VsAuto (hybrid only) is the same median of ratios against auto.
	VsAuto float64 `json:"vs_auto,omitempty"`
}

// Compare is c's Ratios among cells.
func Compare[R Result](ro Roles, cells []*Cell[R], c *Cell[R]) Ratios {
	r := Ratios{Repeats: c.Rates()}
	if b := Find(cells, ro.Baseline, c.Streams); b != nil {
		r.GainPaired = Paired(c, b)
		r.Gain = r.GainPaired.Median
	}
	if !ro.Single(c.Name) {
		if b := BestSingle(ro, cells, c.Streams); b != nil {
			r.VsBestSinglePaired = Paired(c, b)
			r.VsBestSingle = r.VsBestSinglePaired.Median
			r.VsBestSinglePolicy = b.Name
		}
	}
	if a := Find(cells, ro.Auto, c.Streams); a != nil && c.Name == ro.Hybrid {
		r.VsAutoPaired = Paired(c, a)
		r.VsAuto = r.VsAutoPaired.Median
	}
	return r
}
