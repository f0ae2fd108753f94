// Package ratio states a ratio of paired measurements together with how
// sure it is. A ratio is paired when each of its terms is a's figure over
// b's from the same round (two runs made close together in time, so they
// met much the same machine load); its median over the rounds is the
// figure to report, and the lowest and highest say whether the rounds even
// agree on which of a and b is ahead. Where they straddle 1.00x they do
// not, and the median is spread, not a gain: String says so, and bench,
// speed and harness/compare all print ratios through it.
package ratio

import (
	"fmt"
	"math"
	"slices"
)

// Paired is the median and range of per-round ratios.
type Paired struct {
	Median float64 `json:"median"`
	Low    float64 `json:"low"`
	High   float64 `json:"high"`
	Rounds int     `json:"rounds"`
}

// Of summarizes per-round ratios; ratios that are not positive and finite
// (a round in which one side failed or moved nothing) are left out. The
// median of an even count is the mean of the two middle ratios.
func Of(ratios []float64) Paired {
	s := slices.DeleteFunc(slices.Clone(ratios), func(x float64) bool {
		return !(x > 0) || math.IsInf(x, 0)
	})
	if len(s) == 0 {
		return Paired{}
	}
	slices.Sort(s)
	p := Paired{Low: s[0], High: s[len(s)-1], Rounds: len(s)}
	m := len(s) / 2
	if len(s)%2 == 1 {
		p.Median = s[m]
	} else {
		p.Median = (s[m-1] + s[m]) / 2
	}
	return p
}

// Median is the median of v (not modified): the middle value, or the
// mean of the two middle ones for an even count; 0 for none. Unlike Of it
// keeps every value: the selector's throughputs and the VM's spans are
// figures, not ratios, and a 0 among them is a measurement.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Pairs returns a[i]/b[i] for the rounds both have (0 where b[i] is not
// positive, which Of leaves out).
func Pairs(a, b []float64) []float64 {
	n := min(len(a), len(b))
	out := make([]float64, n)
	for i := range n {
		if b[i] > 0 {
			out[i] = a[i] / b[i]
		}
	}
	return out
}

// Straddles reports whether the rounds disagree on the side of 1.00x: at
// least one below and one above. A single round cannot tell.
func (p Paired) Straddles() bool { return p.Rounds > 1 && p.Low < 1 && p.High > 1 }

// Clear reports whether every round puts a on the same side of b (a real
// gain or loss, however small), which needs two rounds or more.
func (p Paired) Clear() bool { return p.Rounds > 1 && !p.Straddles() }

// String is the median as "1.17x", with the spread when it straddles 1.00x
// ("1.03x (within spread 0.91–1.12)") and a note when one round is all
// there is ("1.17x (1 round)"); "-" when there is no ratio.
func (p Paired) String() string {
	switch {
	case p.Rounds == 0:
		return "-"
	case p.Rounds == 1:
		return fmt.Sprintf("%.2fx (1 round)", p.Median)
	case p.Straddles():
		// Rounded to two places an end next to 1.00 could read 1.00 and
		// hide the straddle: such an end is rounded away from 1.
		lo, hi := p.Low, p.High
		if math.Round(lo*100) >= 100 {
			lo = math.Floor(lo*100) / 100
		}
		if math.Round(hi*100) <= 100 {
			hi = math.Ceil(hi*100) / 100
		}
		return fmt.Sprintf("%.2fx (within spread %.2f–%.2f)", p.Median, lo, hi)
	}
	return fmt.Sprintf("%.2fx", p.Median)
}
