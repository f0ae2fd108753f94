// Package method is how offload measures and compares throughput:
// rounds that run every row once in a turning order, medians over the
// rounds, ratios paired by round with their spread, bench's checks (auto
// against the best single engine, hybrid against auto) and the report's
// tables. offload bench, harness/compare and harness/budget all judge
// their figures through it.
//
// In an emulated VM single runs move by 15–30%, more than the differences
// being judged; two runs made close together in time see much the same
// load, so the ratio of a row's run to its rival's run of the same round
// is far steadier than either figure, and its median over the rounds is
// what is reported and checked (measure/ratio states such a ratio with
// its spread).
//
// It is its own package, not part of measure/bench, because the two
// change for different reasons: measure/bench makes load (sockets, the
// sink's wire format, /proc readers) and the tunnel's own benchmark
// imports it; this is arithmetic and layout on figures, whatever made
// them (an in-process tunnel, tool processes, offload's memory). It
// imports nothing of offload but measure/ratio, so it is tested without
// a socket, and it takes the names of the rows it compares (software,
// auto, hybrid) from its caller instead of importing the engine spec.
package method

import (
	"cmp"
	"context"
	"slices"
)

// Result is one measurement of a row, whatever else the caller keeps
// in it.
type Result interface {
	// Rate is the figure medians and ratios are taken of (MB/s); a run
	// that moved nothing is not positive.
	Rate() float64
	// Failure says why the run failed, "" if it did not.
	Failure() string
}

// Run is a result with the round it was made in, which pairs it with
// the other rows' runs of that round.
type Run[R Result] struct {
	Round  int
	Result R
}

// Cell is one row of a comparison (a policy or tool at a stream count)
// with every run made of it, in the order they were made.
type Cell[R Result] struct {
	Name    string
	Streams int
	Runs    []Run[R]
}

// Turn says where a run falls, for the caller's progress line.
type Turn struct {
	Round int // the session's round, from 0
	// N is this run's number among the cell's runs, from 0; Of is how
	// many the cell has once this call of Rounds ends.
	N, Of int
}

// Session is the set of cells being measured and how.
type Session[R Result] struct {
	Cells []*Cell[R]
	// Measure measures a cell once. A failed run is a Result whose
	// Failure says so and the rounds go on; an error stops them (the
	// caller gives up, as harness/compare does on data that did not
	// arrive intact).
	Measure func(ctx context.Context, c *Cell[R], t Turn) (R, error)
	// ByStreams runs every round of one stream count (in the order the
	// cells first name it) before any of the next, each round over the
	// cells of that count; without it a round runs every cell once, the
	// cells ordered by stream count so that those of one count run next
	// to each other.
	ByStreams bool
	rounds    int // rounds started so far: the number of the next one
}

// Rotation is the order in which round i (counted from 0) runs n cells:
// rounds go in pairs, the first of a pair starts at cell (i/2) mod n and
// wraps around, the second runs the same order backwards (A B C, C B A,
// B C A, A C B, ...): whichever of two cells runs first in one round runs
// second in the next. A cell's place in the round thus moves from round to
// round, so whatever the first or last run of a round meets (a machine
// still idle, or warmed and loaded by the runs before) does not always
// fall on the same row; and a cell does not always follow the same
// neighbour (with rotation alone, every cell but one would follow the same
// cell in every round, and whatever a run leaves behind, garbage to
// collect, connections closing, would always weigh on the same next one).
func Rotation(i, n int) []int {
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

// Rounds runs n more rounds of cells (all of the session's, or some of
// them to measure again), each round every cell once in Rotation order,
// and appends the runs to the cells. Only an error of Measure or a
// cancelled ctx ends it early.
func (s *Session[R]) Rounds(ctx context.Context, cells []*Cell[R], n int) error {
	base := make([]int, len(cells))
	for k, c := range cells {
		base[k] = len(c.Runs)
	}
	idx := make([]int, len(cells))
	for k := range idx {
		idx[k] = k
	}
	var groups [][]int
	if s.ByStreams {
		for _, k := range idx {
			g := slices.IndexFunc(groups, func(g []int) bool { return cells[g[0]].Streams == cells[k].Streams })
			if g < 0 {
				groups = append(groups, nil)
				g = len(groups) - 1
			}
			groups[g] = append(groups[g], k)
		}
	} else {
		// Within a round the cells of one stream count run next to each
		// other (the tables list them by row): the rows a ratio compares
		// are measured close together in time.
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(cells[a].Streams, cells[b].Streams) })
		groups = [][]int{idx}
	}
	for _, g := range groups {
		for j := range n {
			round := s.rounds
			s.rounds++
			for _, pos := range Rotation(j, len(g)) {
				k := g[pos]
				c := cells[k]
				r, err := s.Measure(ctx, c, Turn{Round: round, N: base[k] + j, Of: base[k] + n})
				if err != nil {
					return err
				}
				c.Runs = append(c.Runs, Run[R]{Round: round, Result: r})
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
