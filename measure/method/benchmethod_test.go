package method

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// res is a run as the tests make them: a negative rate is a failed run.
type res struct {
	mbps   float64
	err    string
	handed uint64 // frames hybrid handed to the CPU
}

func (r res) Rate() float64   { return r.mbps }
func (r res) Failure() string { return r.err }

var roles = Roles{Baseline: "software", Auto: "auto", Hybrid: "hybrid"}

// cellOf makes a cell whose run i was made in round i at mbps[i] MB/s; a
// negative figure is a failed run. A hybrid's runs hand a frame to the
// CPU each (it routed otherwise than auto).
func cellOf(name string, streams int, mbps ...float64) *Cell[res] {
	c := &Cell[res]{Name: name, Streams: streams}
	for i, m := range mbps {
		r := res{mbps: m}
		if name == "hybrid" {
			r.handed = 1
		}
		if m < 0 {
			r = res{err: "broken"}
		}
		c.Runs = append(c.Runs, Run[res]{Round: i, Result: r})
	}
	return c
}

// rows is what a caller hands the checks: every cell's Ratios.
func rows(cells []*Cell[res]) []CheckRow {
	out := make([]CheckRow, len(cells))
	for i, c := range cells {
		var handed uint64
		for _, r := range c.Runs {
			handed += r.Result.handed
		}
		out[i] = CheckRow{Name: c.Name, Streams: c.Streams, Ratios: Compare(roles, cells, c),
			Failed: c.Median().Failure() != "", RoutedAsAuto: handed == 0}
	}
	return out
}

func ratiosOf(t *testing.T, cells []*Cell[res], name string, streams int) Ratios {
	t.Helper()
	c := Find(cells, name, streams)
	if c == nil {
		t.Fatalf("no cell %s at %d streams", name, streams)
	}
	return Compare(roles, cells, c)
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestRotation(t *testing.T) {
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
		if got := Rotation(tc.i, tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("Rotation(%d, %d) = %v, want %v", tc.i, tc.n, got, tc.want)
		}
	}
	// Over 2n rounds every cell runs first twice and no cell always
	// follows the same one.
	const n = 5
	first := map[int]int{}
	follows := map[[2]int]int{}
	for i := range 2 * n {
		o := Rotation(i, n)
		first[o[0]]++
		for k := 1; k < n; k++ {
			follows[[2]int{o[k-1], o[k]}]++
		}
	}
	for k := range n {
		if first[k] != 2 {
			t.Errorf("over %d rounds cell %d ran first %d times, want 2", 2*n, k, first[k])
		}
	}
	for p, c := range follows {
		if c == 2*n {
			t.Errorf("cell %d followed cell %d in every round", p[1], p[0])
		}
	}
}

// recorder is a session whose runs come from rate, by cell and the
// cell's run index; it records the order of the runs and the turns.
type recorder struct {
	s     *Session[res]
	order []string
	turns []Turn
	calls map[string]int
}

func newRecorder(rate func(name string, streams, i int) float64, cells ...*Cell[res]) *recorder {
	r := &recorder{calls: map[string]int{}}
	r.s = &Session[res]{Cells: cells, Measure: func(_ context.Context, c *Cell[res], t Turn) (res, error) {
		r.order = append(r.order, fmt.Sprintf("%s%d", c.Name, c.Streams))
		r.turns = append(r.turns, t)
		r.calls[fmt.Sprintf("%s/%d", c.Name, c.Streams)]++
		m := rate(c.Name, c.Streams, len(c.Runs))
		x := res{mbps: m}
		if c.Name == "hybrid" {
			x.handed = 1
		}
		if m < 0 {
			x = res{err: "broken"}
		}
		return x, nil
	}}
	return r
}

func one(string, int, int) float64 { return 1 }

// Cells of one stream count run next to each other, whatever the order
// of the table (row by row).
func TestRoundsGroupStreams(t *testing.T) {
	r := newRecorder(one, &Cell[res]{Name: "a", Streams: 1}, &Cell[res]{Name: "a", Streams: 4}, &Cell[res]{Name: "b", Streams: 1}, &Cell[res]{Name: "b", Streams: 4})
	if err := r.s.Rounds(context.Background(), r.s.Cells, 2); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("a1 b1 a4 b4  b4 a4 b1 a1"); !slices.Equal(r.order, want) {
		t.Errorf("run order %v, want %v", r.order, want)
	}
}

// ByStreams: every round of a stream count, in the cells' order of
// stream counts, before the next.
func TestRoundsByStreams(t *testing.T) {
	r := newRecorder(one, &Cell[res]{Name: "a", Streams: 8}, &Cell[res]{Name: "b", Streams: 8}, &Cell[res]{Name: "a", Streams: 1}, &Cell[res]{Name: "b", Streams: 1})
	r.s.ByStreams = true
	if err := r.s.Rounds(context.Background(), r.s.Cells, 2); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("a8 b8  b8 a8  a1 b1  b1 a1"); !slices.Equal(r.order, want) {
		t.Errorf("run order %v, want %v", r.order, want)
	}
	if rounds := []int{r.s.Cells[0].Runs[1].Round, r.s.Cells[2].Runs[0].Round}; !slices.Equal(rounds, []int{1, 2}) {
		t.Errorf("rounds %v: want 1 for the 8-stream cells' second, 2 for the 1-stream cells' first", rounds)
	}
}

// The order runs are made in, their round numbers and turns.
func TestRoundsRotate(t *testing.T) {
	r := newRecorder(one, &Cell[res]{Name: "a", Streams: 1}, &Cell[res]{Name: "b", Streams: 1}, &Cell[res]{Name: "c", Streams: 1})
	ctx := context.Background()
	if err := r.s.Rounds(ctx, r.s.Cells, 3); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("a1 b1 c1  c1 b1 a1  b1 c1 a1"); !slices.Equal(r.order, want) {
		t.Errorf("run order %v, want %v", r.order, want)
	}
	for _, c := range r.s.Cells {
		var rounds []int
		for _, x := range c.Runs {
			rounds = append(rounds, x.Round)
		}
		if !slices.Equal(rounds, []int{0, 1, 2}) {
			t.Errorf("cell %s: rounds %v", c.Name, rounds)
		}
	}
	if last := r.turns[len(r.turns)-1]; last != (Turn{Round: 2, N: 2, Of: 3}) {
		t.Errorf("last turn %+v, want round 2, run 2 of 3", last)
	}

	// More rounds of some cells: numbered after the first, rotated
	// among those cells, and counted on from their earlier runs.
	r.order, r.turns = nil, nil
	if err := r.s.Rounds(ctx, r.s.Cells[1:], 2); err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields("b1 c1  c1 b1"); !slices.Equal(r.order, want) {
		t.Errorf("run order %v, want %v", r.order, want)
	}
	if x := r.s.Cells[2].Runs; len(x) != 5 || x[3].Round != 3 || x[4].Round != 4 || len(r.s.Cells[0].Runs) != 3 {
		t.Errorf("runs after 2 more rounds: %+v", r.s.Cells)
	}
	if last := r.turns[len(r.turns)-1]; last.N != 4 || last.Of != 5 {
		t.Errorf("last turn %+v, want run 4 of 5", last)
	}
}

// An error of Measure stops the rounds and is returned; so does a
// cancelled context, after the run it cut short.
func TestRoundsStop(t *testing.T) {
	broken := errors.New("data did not arrive intact")
	n := 0
	s := &Session[res]{Cells: []*Cell[res]{{Name: "a", Streams: 1}, {Name: "b", Streams: 1}},
		Measure: func(context.Context, *Cell[res], Turn) (res, error) {
			if n++; n == 2 {
				return res{}, broken
			}
			return res{mbps: 1}, nil
		}}
	if err := s.Rounds(context.Background(), s.Cells, 3); !errors.Is(err, broken) || n != 2 || len(s.Cells[1].Runs) != 0 {
		t.Errorf("Rounds = %v after %d runs, want the measure's error after 2", err, n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n = 0
	s.Measure = func(context.Context, *Cell[res], Turn) (res, error) {
		n++
		cancel()
		return res{mbps: 1}, nil
	}
	if err := s.Rounds(ctx, s.Cells, 3); !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("Rounds = %v after %d runs, want cancelled after 1", err, n)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want int
	}{{[]float64{3}, 0}, {[]float64{9, 1, 5}, 2}, {[]float64{4, 1, 3, 2}, 3}, {[]float64{2, 2, 1}, 0}} {
		if got := MedianIndex(c.in); got != c.want {
			t.Errorf("MedianIndex(%v) = %d, want %d", c.in, got, c.want)
		}
	}
	if m := cellOf("a", 1, 4, 1, 3, 2).Median(); m.mbps != 2 {
		t.Errorf("Median = %+v, want the lower middle, 2", m)
	}
	if m := cellOf("a", 1, 4, -1, 3).Median(); m.err == "" {
		t.Errorf("Median = %+v, want the failed run", m)
	}
	if m := cellOf("a", 1, 4, -1, 3, 1).MedianRate(); m != 3 {
		t.Errorf("MedianRate = %v, want 3 (of the successful runs 1, 3, 4)", m)
	}
	if m := (&Cell[res]{}).Median(); m != (res{}) {
		t.Errorf("Median of no runs = %+v", m)
	}
}

// The gain is the median of the rounds' ratios, which a round in which
// the whole machine was slow does not move, where the ratio of the
// medians would.
func TestPaired(t *testing.T) {
	cells := []*Cell[res]{cellOf("software", 1, 10, 5, 20), cellOf("auto", 1, 11, 5.5, 8)}
	auto := ratiosOf(t, cells, "auto", 1)
	// Ratios 1.1, 1.1, 0.4; medians 8 and 10 would say 0.8.
	if !near(auto.Gain, 1.1) || auto.GainPaired.Rounds != 3 {
		t.Errorf("auto's gain %+v, want the median of 3 per-round ratios 1.1 (not 8/10)", auto.GainPaired)
	}
	if !slices.Equal(auto.Repeats, []float64{11, 5.5, 8}) {
		t.Errorf("auto's repeats %v, want every round in run order", auto.Repeats)
	}
	if sw := ratiosOf(t, cells, "software", 1); sw.Gain != 1 {
		t.Errorf("software's gain over itself %v", sw.Gain)
	}

	// A failed run leaves its round out of the ratios (two left: an
	// even count takes the mean of the middle two), and shows as 0.
	cells = []*Cell[res]{cellOf("software", 1, 10, -1, 20), cellOf("auto", 1, 11, 100, 8)}
	if auto := ratiosOf(t, cells, "auto", 1); !near(auto.Gain, (1.1+0.4)/2) {
		t.Errorf("auto's gain with software failing a round: %v, want %v", auto.Gain, (1.1+0.4)/2)
	}
	if sw := ratiosOf(t, cells, "software", 1); !slices.Equal(sw.Repeats, []float64{10, 0, 20}) {
		t.Errorf("software's repeats %v; want 0 for its failed round", sw.Repeats)
	}

	// Runs pair by round, not by position.
	a, b := cellOf("auto", 1, 4, 6), cellOf("software", 1, 2, 3)
	b.Runs[0].Round, b.Runs[1].Round = 1, 7
	if got := Paired(a, b); got.Median != 3 || got.Rounds != 1 {
		t.Errorf("Paired(%v, %v) = %+v, want 6/2 (round 1 alone)", a.Runs, b.Runs, got)
	}
	if got := Paired(a, &Cell[res]{}); got.Rounds != 0 {
		t.Errorf("Paired with nothing to pair: %v", got)
	}
	// The spread: rounds on both sides of 1.00x.
	if got := Paired(cellOf("h", 1, 11.7, 9.1, 11.2), cellOf("s", 1, 10, 10, 10)); !got.Straddles() || !near(got.Low, 0.91) || !near(got.High, 1.17) || !near(got.Median, 1.12) {
		t.Errorf("Paired spread %+v, want median 1.12 over 0.91–1.17, straddling", got)
	}
}

// BestSingle is the row that is neither auto nor hybrid with the highest
// median MB/s at the stream count, software included; a row that only
// failed is not a candidate.
func TestBestSingle(t *testing.T) {
	cells := []*Cell[res]{
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
	for _, tc := range []struct {
		name    string
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
		r := ratiosOf(t, cells, tc.name, tc.streams)
		if r.VsBestSinglePolicy != tc.best || !near(r.VsBestSingle, tc.ratio) {
			t.Errorf("%s, %d streams: %.3fx %q; want %.3fx %q", tc.name, tc.streams, r.VsBestSingle, r.VsBestSinglePolicy, tc.ratio, tc.best)
		}
	}
	cells[5] = cellOf("cryptodev", 8, -1, -1, -1)
	if r := ratiosOf(t, cells, "auto", 8); r.VsBestSinglePolicy != "afalg:virtio_crypto_aes_cbc" || !near(r.VsBestSingle, 1) {
		t.Errorf("auto, 8 streams with cryptodev failing: %.3fx %q; want 1x afalg (median of 11/11, 11/9, 11/12)", r.VsBestSingle, r.VsBestSinglePolicy)
	}
	if r := ratiosOf(t, cells, "hybrid", 1); !near(r.VsAuto, 2) {
		t.Errorf("hybrid's vs_auto %v, want 2", r.VsAuto)
	}
	for _, p := range []string{"software", "afalg:virtio_crypto_aes_cbc", "auto"} {
		if r := ratiosOf(t, cells, p, 1); (r.VsBestSingle != 0 || r.VsBestSinglePolicy != "") != (p == "auto") || r.VsAuto != 0 {
			t.Errorf("%s's ratios %+v: only auto and hybrid compare with the best single, only hybrid with auto", p, r)
		}
	}
	if BestSingle(roles, cells, 4) != nil {
		t.Error("BestSingle at a stream count nothing ran at is not nil")
	}
}
