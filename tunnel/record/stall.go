package record

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Stalled engine requests. AF_ALG and /dev/crypto wait for the driver's
// completion uninterruptibly, so a request the device (or its driver)
// loses hangs the worker that made it, and every frame behind it waits in
// sequence order: the link carries nothing until keepalive cuts it, and
// Close would wait for the worker for ever. A StallWatch takes such a
// frame over:
//
//	worker:   begin(idx) ── engine request ─────────── (hangs) ··· end: lost, exit
//	watchdog:              busy > Timeout ─ CAS busy→taken ─ new worker:
//	                                                         frame again in software,
//	                                                         f.done, then the work queue
//
// On the inline data path (DataPathInline) the worker is the writer's
// sealing goroutine or the reader goroutine itself, so the new worker
// takes over that goroutine's loop too (worker.resume): it redoes the
// frame in software, then writes it (and the frames cut with it) or
// queues it for Read, and goes on cutting or reading the link. The inline
// path keeps its loop's state in the writer and reader, not in locals, so
// the new goroutine starts where the stuck one stopped.
//
// The request's output goes to the worker's spare buffer (engines other
// than software write out of place), so the frame's own buffer still holds
// its input and software redoes the frame from it. The stuck worker, its
// spare buffer and its engine state are left to the kernel; should the
// request ever return, the worker sees it lost the frame (end), touches
// nothing of it and exits (until then it holds its epoch, whose keys are
// wiped only when it lets go). OnStall takes the engine out (the tunnel's
// engine checks), so later frames go elsewhere. The streams notice a delay
// of Timeout, nothing else: the default (the tunnel's 5 s) is far beyond a
// real request (a 1 MiB frame at 2 MB/s is 0.5 s) and below yamux's 10 s
// write timeout, which would otherwise cut the link.

// ErrStalled is the error OnStall gets: an engine request did not come
// back within the StallWatch's Timeout.
var ErrStalled = errors.New("record: engine request did not complete")

// busyTaken marks a worker whose stalled frame the watchdog took over.
const busyTaken = -1

// StallWatch watches the engine requests of every Conn it is given to
// (Options.Stall); one may serve every link of a server or client, so its
// counters add up. A nil *StallWatch watches nothing.
type StallWatch struct {
	timeout time.Duration
	onStall func(idx int, err error)
	// Stalls counts, per engine index, the frames taken over.
	Stalls [MaxEngines]atomic.Uint64
}

// NewStallWatch returns a StallWatch that takes over a frame whose
// request to an engine other than software has not come back after
// timeout, and calls onStall (if not nil) with the engine index and an
// error wrapping ErrStalled, from the watchdog's goroutine.
func NewStallWatch(timeout time.Duration, onStall func(idx int, err error)) *StallWatch {
	return &StallWatch{timeout: timeout, onStall: onStall}
}

// watchdog is a Conn's side of its StallWatch: the workers it looks at.
//
// Its clock is its own tick count, not the time: a worker stamps every
// engine request with it, and reading the time there would cost a system
// call per request on CPUs without a vDSO clock (32-bit MIPS), where the
// router spends its cycles. A request is taken over once ticksPerTimeout
// whole ticks have passed since the one it began in, so after Timeout at
// the least and Timeout plus one tick at the most.
type watchdog struct {
	s       *StallWatch
	tick    atomic.Int64 // ticks since the Conn was made, from 1
	mu      sync.Mutex
	workers []*worker
	done    chan struct{} // closed once every worker has exited or been taken over
}

// ticksPerTimeout is how many watchdog ticks make a StallWatch's Timeout.
const ticksPerTimeout = 4

// period is the watchdog's tick.
func (d *watchdog) period() time.Duration {
	return max(d.s.timeout/ticksPerTimeout, time.Millisecond)
}

// overdue reports whether a request stamped v (a worker's busy) has
// waited a Timeout by tick now: it began at some time in tick v, so it
// has waited at least now-v-1 whole ticks. 0 (idle) and busyTaken never are.
func overdue(now, v int64) bool { return v > 0 && now-v-1 >= ticksPerTimeout }

// now is the stamp a worker's busy holds while it waits for an engine:
// the current tick, never 0 (idle) or busyTaken.
func (d *watchdog) now() int64 { return d.tick.Load() }

func (d *watchdog) add(w *worker) {
	d.mu.Lock()
	d.workers = append(d.workers, w)
	d.mu.Unlock()
}

// start runs the watchdog until every worker of c has exited or been
// taken over: after Close's wait, or for ever on a link nobody closes.
func (d *watchdog) start(c *Conn) {
	go func() {
		c.wg.Wait()
		close(d.done)
	}()
	go func() {
		t := time.NewTicker(d.period())
		defer t.Stop()
		for {
			select {
			case <-t.C:
				d.scan(c)
			case <-d.done:
				return
			}
		}
	}()
}

// scan takes over every frame whose engine request is older than timeout.
func (d *watchdog) scan(c *Conn) {
	d.mu.Lock()
	ws := d.workers
	d.mu.Unlock()
	now := d.tick.Add(1)
	for _, w := range ws {
		v := w.busy.Load()
		if !overdue(now, v) || !w.busy.CompareAndSwap(v, busyTaken) {
			continue
		}
		d.takeOver(c, w, time.Duration(now-v-1)*d.period())
	}
}

// takeOver hands w's frame to a new worker, which redoes it in software
// and then serves w's queue; w is released from the Conn's wait group,
// so Close does not wait for it.
func (d *watchdog) takeOver(c *Conn, w *worker, waited time.Duration) {
	idx, f := int(w.busyIdx.Load()), w.cur
	d.s.Stalls[idx].Add(1)
	total := c.stats.Fallbacks[idx].Add(1)
	err := fmt.Errorf("%w: engine %s held a %s request of frame %d for over %v", ErrStalled, c.opt.Engines[idx].Name(), w.dir, f.seq, waited.Round(time.Millisecond))
	if c.warn.allow() {
		c.log.Warn("engine request stalled; the frame is redone in software and the stuck worker left to the kernel",
			zap.String("engine", c.opt.Engines[idx].Name()), zap.Uint64("fallbacks", total), zap.Error(err))
	}
	if d.s.onStall != nil {
		d.s.onStall(idx, err)
	}
	nw := newWorker(c, w.dir, w.work) // and d.add(nw)
	nw.resume = w.resume
	// Count nw before w is released, so the count stays above zero.
	c.wg.Add(1)
	w.release()
	go func() {
		defer nw.release()
		if nw.resume != nil {
			defer nw.close()
			nw.resume(nw, f)
			return
		}
		nw.redo(f)
		nw.run()
	}()
}
