package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/measure/bench"
)

// scenario is one disruption: an outage of the veth, a roam or cuts.
type scenario struct {
	name   string
	outage time.Duration
	roam   bool
	cuts   int
}

// row is one run's outcome.
type row struct {
	name      string
	echoReset int
	examples  []string // the first few echo streams' errors
	up, down  error    // the transfers' (nil: sha256 checked and equal)
	moving    time.Duration
	stalled   bool // a transfer never moved again after the path's return
	served    time.Duration
	refused   int      // new connections that failed before one was served
	rss       [2]int64 // most VmRSS of server, client while the path was away
	waiting   []string // the server's status lines about a waiting session
	perCut    []time.Duration
}

// far is how far movedBy follows the transfers after a cut or a roam:
// past what the socket buffers and a yamux window still held at that
// instant (those arrive regardless), so that the stall it finds is the
// one the cut caused.
const far = 8 << 20

func measure(ctx context.Context, r *rig, o options, sc scenario, seed uint64) (row, error) {
	rw := row{name: sc.name}
	p := &progress{r: r, base: r.sunk.Load()}
	l, err := startLoad(ctx, r, o.streams, o.bytes, seed)
	if err != nil {
		return rw, err
	}
	p.l = l
	defer l.close()
	// Interrupted: the streams and transfers end now, not at their deadlines.
	defer context.AfterFunc(ctx, l.close)()
	if err := p.waitFor(ctx, o.bytes/4); err != nil {
		return rw, fmt.Errorf("before the disruption: %w", err)
	}
	if ended(&l.up) || ended(&l.down) {
		return rw, fmt.Errorf("a transfer ended before the disruption (up: %v, down: %v): raise -bytes or lower -rate", l.up.err, l.down.err)
	}
	s := startSampler(r.srv.Cmd.Process.Pid, r.cli.Cmd.Process.Pid)
	switch {
	case sc.outage > 0:
		if err := r.linkDown(true); err != nil {
			return rw, err
		}

		// The server's view every 2 s: a session waits only once an end
		// has given the link up (keepalive), which may be late in it.
		for end := time.Now().Add(sc.outage); time.Until(end) > 0 && ctx.Err() == nil; {
			sleep(ctx, min(2*time.Second, time.Until(end)))
			if rw.waiting == nil && time.Until(end) > 0 {
				if l := waitingLines(r.status()); l != nil {
					rw.waiting = append([]string{fmt.Sprintf("%.0f s into the outage:", sc.outage.Seconds()-time.Until(end).Seconds())}, l...)
				}
			}
		}
		if err := r.linkDown(false); err != nil {
			return rw, err
		}
		back := time.Now()

		rw.rss = s.stop()
		if rw.moving, rw.served, rw.refused, err = recoverAfter(ctx, r, p, back, 1); err != nil {
			return rw, err
		}
	case sc.roam:
		if err := r.roam(); err != nil {
			return rw, err
		}
		back := time.Now()
		if rw.moving, rw.served, rw.refused, err = recoverAfter(ctx, r, p, back, far); err != nil {
			return rw, err
		}
		rw.rss = s.stop()
	default:
		for k := 1; k <= sc.cuts; k++ {
			if err := p.waitFor(ctx, o.bytes*int64(k)/int64(sc.cuts+1)); err != nil {
				return rw, fmt.Errorf("before cut %d: %w", k, err)
			}
			if err := r.cut(); err != nil {
				return rw, fmt.Errorf("cut %d: %w", k, err)
			}
			at := time.Now()
			moving, served, refused, err := recoverAfter(ctx, r, p, at, far)
			if err != nil {
				return rw, fmt.Errorf("cut %d: %w", k, err)
			}
			rw.stalled = rw.stalled || moving < 0
			rw.perCut = append(rw.perCut, moving)
			rw.moving, rw.served = max(rw.moving, moving), max(rw.served, served)
			rw.refused += refused
		}
		rw.rss = s.stop()
	}
	rw.stalled = rw.stalled || rw.moving < 0
	l.finish(5 * time.Minute)
	rw.echoReset, rw.examples = l.resets()
	rw.up, rw.down = l.up.err, l.down.err
	return rw, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// progress is how far the transfers of one load got at their far ends.
type progress struct {
	r    *rig
	l    *load
	base int64 // the sink's count before this load
}

func (p *progress) now() (up, down int64) { return p.r.sunk.Load() - p.base, p.l.got.Load() }

func ended(t *transfer) bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// waitFor waits until each transfer still running has delivered n bytes
// (up to 10 minutes).
func (p *progress) waitFor(ctx context.Context, n int64) error {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		up, down := p.now()
		if (up >= n || ended(&p.l.up)) && (down >= n || ended(&p.l.down)) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the transfers did not reach %d bytes within 10 minutes (up %d, down %d)", n, up, down)
		}
		sleep(ctx, 5*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// movedBy follows the transfers from t until each has delivered need
// bytes more than at the call (or finished) and returns when they moved
// again: per transfer, the end of its longest stall (no byte delivered)
// in that span, the later of the two, after t. With need 1 that is the
// first byte after t. It is -1 if a transfer failed first or neither got
// there within ctx.
func (p *progress) movedBy(ctx context.Context, t time.Time, need int64) time.Duration {
	type follow struct {
		tr          *transfer
		start, last int64
		lastAt      time.Time // when last grew (t at first)
		gap         time.Duration
		resumed     time.Time // the end of the longest gap
	}
	up, down := p.now()
	fs := [2]*follow{{tr: &p.l.up, start: up, last: up, lastAt: t}, {tr: &p.l.down, start: down, last: down, lastAt: t}}
	for {
		now := time.Now()
		up, down := p.now()
		done := 0
		for i, n := range [2]int64{up, down} {
			f := fs[i]
			if n > f.last {
				if gap := now.Sub(f.lastAt); gap > f.gap {
					f.gap, f.resumed = gap, now
				}
				f.last, f.lastAt = n, now
			}
			switch {
			case n-f.start >= need:
				done++
			case ended(f.tr) && f.tr.err != nil:
				return -1
			case ended(f.tr):
				done++
			}
		}
		if done == 2 {
			return max(fs[0].resumed.Sub(t), fs[1].resumed.Sub(t), 0)
		}
		sleep(ctx, 2*time.Millisecond)
		if ctx.Err() != nil {
			return -1
		}
	}
}

// recoverAfter measures, from t (the path back, or a cut), until the
// transfers moved need bytes and until a new connection was served
// (which must happen within 3 minutes: else the tunnel is broken, not
// slow).
func recoverAfter(ctx context.Context, r *rig, p *progress, t time.Time, need int64) (moving, served time.Duration, refused int, err error) {
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	type probed struct {
		at     time.Time
		failed int
		err    error
	}
	pc := make(chan probed, 1)
	go func() {
		f, err := r.probe(pctx)
		pc <- probed{time.Now(), f, err}
	}()
	moving = p.movedBy(pctx, t, need)
	pr := <-pc
	if pr.err != nil {
		return 0, 0, pr.failed, fmt.Errorf("no new connection served within 3m: %w", pr.err)
	}
	return moving, pr.at.Sub(t), pr.failed, nil
}

// sampler keeps the most VmRSS of some processes, read every 100 ms.
type sampler struct {
	done chan struct{}
	out  chan [2]int64
}

func startSampler(pids ...int) *sampler {
	s := &sampler{done: make(chan struct{}), out: make(chan [2]int64, 1)}
	go func() {
		var peak [2]int64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for i, pid := range pids[:2] {
				if m, err := bench.ProcMemory(pid); err == nil {
					peak[i] = max(peak[i], m.RSS)
				}
			}
			select {
			case <-s.done:
				s.out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() [2]int64 {
	close(s.done)
	return <-s.out
}

// waitingLines are the status lines that speak of a session waiting for
// its client (or of resumption); none on an end that keeps no sessions.
func waitingLines(status string) []string {
	var out []string
	for _, l := range strings.Split(status, "\n") {
		low := strings.ToLower(l)
		if strings.Contains(low, "session") || strings.Contains(low, "waiting") || strings.Contains(low, "resum") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

func (rw row) mismatches() int {
	n := 0
	for _, err := range []error{rw.up, rw.down} {
		if errors.Is(err, bench.ErrMismatch) {
			n++
		}
	}
	return n
}

// resets counts the applications that saw their connection fail: echo
// streams and transfers (a hash mismatch is counted by mismatches).
func (rw row) resets() int {
	n := rw.echoReset
	for _, err := range []error{rw.up, rw.down} {
		if err != nil && !errors.Is(err, bench.ErrMismatch) {
			n++
		}
	}
	return n
}

func transferCell(err error) string {
	switch {
	case err == nil:
		return "sha256 ok"
	case errors.Is(err, bench.ErrMismatch):
		return "**sha256 BAD**"
	}
	return "reset"
}

func (rw row) movingCell() string {
	if rw.stalled {
		return "never (reset)"
	}
	return fmt.Sprintf("%.2f s", rw.moving.Seconds())
}

func (rw row) summary(streams int) string {
	return fmt.Sprintf("%d of %d echo streams reset, upload %s, download %s, moving %s, served %.2f s",
		rw.echoReset, streams, transferCell(rw.up), transferCell(rw.down), rw.movingCell(), rw.served.Seconds())
}

// writeTable prints the runs as a Markdown table, then what each run's
// failures said and what the server's status showed mid-outage.
func writeTable(w io.Writer, rows []row, streams int) {
	fmt.Fprintf(w, "\n| run | echo streams reset (of %d) | upload | download | moving | served (refused) | RSS server / client |\n", streams)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, rw := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %.2f s (%d) | %.1f / %.1f MiB |\n", rw.name, rw.echoReset,
			transferCell(rw.up), transferCell(rw.down), rw.movingCell(), rw.served.Seconds(), rw.refused,
			float64(rw.rss[0])/(1<<20), float64(rw.rss[1])/(1<<20))
	}
	fmt.Fprintln(w)
	for _, rw := range rows {
		for _, e := range rw.examples {
			fmt.Fprintf(w, "%s: %s\n", rw.name, e)
		}
		for i, err := range []error{rw.up, rw.down} {
			if err != nil {
				fmt.Fprintf(w, "%s: %s: %v\n", rw.name, [2]string{"upload", "download"}[i], err)
			}
		}
		if len(rw.perCut) > 0 && !rw.stalled {
			c := slices.Clone(rw.perCut)
			slices.Sort(c)
			fmt.Fprintf(w, "%s: moving after each cut: median %.2f s, max %.2f s\n", rw.name, c[len(c)/2].Seconds(), c[len(c)-1].Seconds())
		}
		if strings.HasPrefix(rw.name, "outage") {
			if len(rw.waiting) == 0 {
				fmt.Fprintf(w, "%s: offload status (server, mid-outage): no waiting session shown\n", rw.name)
			}
			for _, l := range rw.waiting {
				fmt.Fprintf(w, "%s: offload status (server, mid-outage): %s\n", rw.name, l)
			}
		}
	}
}
