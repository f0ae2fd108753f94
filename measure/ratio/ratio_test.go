package ratio

import (
	"math"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want Paired
	}{
		{nil, Paired{}},
		{[]float64{0, -1, math.NaN(), math.Inf(1)}, Paired{}},
		{[]float64{1.2}, Paired{1.2, 1.2, 1.2, 1}},
		{[]float64{1.3, 0.9, 1.1}, Paired{1.1, 0.9, 1.3, 3}},
		{[]float64{1.4, 0, 1.0, 1.2, 1.1}, Paired{1.15, 1.0, 1.4, 4}},
	} {
		got := Of(tc.in)
		if math.Abs(got.Median-tc.want.Median) > 1e-12 || got.Low != tc.want.Low || got.High != tc.want.High || got.Rounds != tc.want.Rounds {
			t.Errorf("Of(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	in := []float64{3, 1, 2}
	Of(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("Of modified its argument: %v", in)
	}
}

// The rule of issue 10: a median whose rounds lie on both sides of 1.00x
// is printed with its spread, never as a bare gain.
func TestString(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want string
	}{
		{nil, "-"},
		{[]float64{1.17}, "1.17x (1 round)"},
		{[]float64{1.12, 0.91, 1.03}, "1.03x (within spread 0.91–1.12)"},
		{[]float64{1.30, 1.17, 1.05}, "1.17x"},
		{[]float64{0.80, 0.95, 0.90}, "0.90x"},
		// Level with 1.00x at one end is not a disagreement on the side.
		{[]float64{1.00, 1.10, 1.20}, "1.10x"},
		{[]float64{0.99, 1.01}, "1.00x (within spread 0.99–1.01)"},
		// Ends that round to 1.00 are rounded away from it, so the
		// straddle shows.
		{[]float64{0.997, 1.02, 1.05}, "1.02x (within spread 0.99–1.05)"},
		{[]float64{0.95, 0.98, 1.002}, "0.98x (within spread 0.95–1.01)"},
	} {
		p := Of(tc.in)
		if got := p.String(); got != tc.want {
			t.Errorf("Of(%v).String() = %q, want %q", tc.in, got, tc.want)
		}
		if p.Straddles() == p.Clear() && p.Rounds > 1 {
			t.Errorf("Of(%v): Straddles %v and Clear %v", tc.in, p.Straddles(), p.Clear())
		}
	}
}

func TestPairs(t *testing.T) {
	got := Pairs([]float64{2, 3, 4}, []float64{1, 0})
	if len(got) != 2 || got[0] != 2 || got[1] != 0 {
		t.Errorf("Pairs = %v, want [2 0]", got)
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{9, 1, 5}, 5}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
	xs := []float64{3, 1, 2}
	Median(xs)
	if xs[0] != 3 || xs[1] != 1 || xs[2] != 2 {
		t.Errorf("Median sorted its argument: %v", xs)
	}
}
