package record

import (
	"net"
	"runtime"
	"sync"

	"github.com/offload-dev/offload/engine"
)

/* The writer pipeline (one per Conn):

   Write(p) ──copy──> ring ─────> cutter ─────────────┬──> work ──> worker 1..W
   (wmu: one Write    (mu;        takes a slot,       │           seal: engine (policy
   at a time; blocks  bounded     then cuts whatever  │           pick, software redo on
   on space, the      by Write-   the ring holds, up  │           engine error) + HMAC
   write deadline or  Buffer)     to maxPlain, as one │           with the frame's epoch
   the link's end)                frame; epoch, seq++ │           keys; signals f.done
                                                      └──> sendq ──> sender
                                                           (seq order)  waits f.done of the
                                                                        head frame, batches the
                                                                        sealed frames behind it,
                                                                        writes them (writev),
                                                                        frees their slots

   Locking: mu guards the ring and the closing flag; nothing else is shared.
   Write and the cutter signal each other through one-slot channels (data,
   space), so a Write never waits while holding mu. The cutter is the only
   producer of work and sendq and the only one that assigns seq, so frames
   enter sendq in seq order; the sender is their only consumer and writes
   them in that order whatever order the workers finish in.

   Bounds: slots (capacity 2W+2) counts frames cut but not yet written; the
   cutter takes a slot before it cuts, so while the pipeline is busy the
   ring fills and the next frame is a full one (bulk: MaxFrame frames, where
   a hardware engine wins), and on an idle link a small write is cut at once
   (low latency). work and sendq never block their producer: each holds at
   most as many frames as there are slots (+1 for the close marker).

   Close: the cutter cuts what is left, queues a close marker and stops;
   when the sender reaches the marker everything before it is on the wire.
   On a link failure quit is closed: the cutter stops and closes work, the
   workers finish what they hold (so every frame gets its done signal) and
   exit, the sender exits. */

// smallCut is the size under which the cutter yields once before cutting,
// so a header written just before its body (yamux writes them as two
// Writes) usually goes out in the same frame.
const smallCut = 64

// maxBatch is how many sealed frames the sender writes in one writev.
const maxBatch = 16

type writer struct {
	c *Conn

	wmu      sync.Mutex // one Write at a time
	deadline deadline

	mu      sync.Mutex
	ring    ring
	closing bool

	data  chan struct{} // Write → cutter: there is data (or closing)
	space chan struct{} // cutter → Write: there is space
	slots chan struct{}
	work  chan *frame
	sendq chan *frame

	flushed chan struct{} // closed when the close marker was sent
}

func (w *writer) init(c *Conn) {
	w.c = c
	w.deadline.init()
	w.ring.buf = make([]byte, c.opt.WriteBuffer)
	depth := 2*c.opt.Workers + 2
	w.data = make(chan struct{}, 1)
	w.space = make(chan struct{}, 1)
	w.slots = make(chan struct{}, depth)
	w.work = make(chan *frame, depth)
	w.sendq = make(chan *frame, depth+1)
	w.flushed = make(chan struct{})

	c.wg.Add(2 + c.opt.Workers)
	go func() { defer c.wg.Done(); w.cutter() }()
	go func() { defer c.wg.Done(); w.sender() }()
	for range c.opt.Workers {
		wk := newWorker(c, engine.Encrypt)
		go func() { defer c.wg.Done(); wk.run(w.work) }()
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Write implements net.Conn. It returns once p is buffered; it blocks while
// the buffer is full. Data accepted before a timeout is still sent.
func (c *Conn) Write(p []byte) (int, error) {
	w := &c.w
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if isClosed(c.dead) {
		return 0, c.linkErr()
	}
	if w.deadline.expired() {
		return 0, errTimeout
	}
	n := 0
	for n < len(p) {
		w.mu.Lock()
		k := w.ring.write(p[n:])
		w.mu.Unlock()
		if k > 0 {
			n += k
			notify(w.data)
			continue
		}
		select {
		case <-w.space:
		case <-c.dead:
			return n, c.linkErr()
		case <-w.deadline.wait():
			return n, errTimeout
		}
	}
	return n, nil
}

func (w *writer) beginClose() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	notify(w.data)
}

func (w *writer) cutter() {
	c := w.c
	defer close(w.work)
	defer c.send.close()
	for {
		w.mu.Lock()
		buffered, closing := w.ring.n, w.closing
		w.mu.Unlock()
		if buffered == 0 {
			if closing {
				w.sendq <- newMarker(markClose, nil)
				return
			}
			select {
			case <-w.data:
				continue
			case <-c.quit:
				return
			}
		}
		select {
		case w.slots <- struct{}{}:
		case <-c.quit:
			return
		}
		if buffered < smallCut {
			runtime.Gosched()
		}
		w.mu.Lock()
		take := min(w.ring.n, c.maxPlain)
		f := getFrame(wireSize(take + engine.BlockSize))
		w.ring.read(f.buf[HeaderSize : HeaderSize+take])
		w.mu.Unlock()
		notify(w.space)
		f.n = take
		if err := c.send.assign(f); err != nil {
			putFrame(f)
			w.sendq <- newMarker(markNone, err)
			return
		}
		w.sendq <- f
		w.work <- f
	}
}

func (w *writer) sender() {
	c := w.c
	var (
		next   *frame
		batch  = make([]*frame, 0, maxBatch)
		bufs   = make(net.Buffers, 0, maxBatch)
		iovecs net.Buffers
	)
	for {
		f := next
		next = nil
		if f == nil {
			select {
			case f = <-w.sendq:
			case <-c.quit:
				return
			}
		}
		if !f.seen {
			select {
			case <-f.done:
				f.seen = true
			case <-c.quit:
				return
			}
		}
		batch = append(batch[:0], f)
	more:
		for len(batch) < maxBatch && f.err == nil && f.mark == markNone {
			select {
			case g := <-w.sendq:
				if !g.ready(false) || g.err != nil || g.mark != markNone {
					next = g
					break more
				}
				batch = append(batch, g)
			default:
				break more
			}
		}
		bufs = bufs[:0]
		for _, g := range batch {
			if g.err != nil || g.mark != markNone {
				break
			}
			bufs = append(bufs, g.buf[:wireSize(g.n)])
		}
		if len(bufs) > 0 {
			iovecs = bufs // WriteTo consumes its receiver
			if _, err := iovecs.WriteTo(c.conn); err != nil {
				c.fail(err)
				return
			}
		}
		for _, g := range batch {
			switch {
			case g.mark == markClose:
				close(w.flushed)
				putFrame(g)
				return
			case g.err != nil:
				c.fail(g.err)
				return
			}
			putFrame(g)
			<-w.slots
		}
	}
}

// drain recycles the frames left in the queues once every goroutine has
// exited (Close).
func (w *writer) drain() {
	for {
		select {
		case f := <-w.sendq:
			f.ready(true)
			putFrame(f)
		default:
			return
		}
	}
}

// ring is a fixed-size byte FIFO.
type ring struct {
	buf  []byte
	r, n int
}

func (q *ring) write(p []byte) int {
	total := 0
	for len(p) > 0 && q.n < len(q.buf) {
		start := (q.r + q.n) % len(q.buf)
		end := len(q.buf)
		if start < q.r {
			end = q.r
		}
		k := copy(q.buf[start:end], p)
		q.n += k
		p = p[k:]
		total += k
	}
	return total
}

func (q *ring) read(p []byte) int {
	total := 0
	for len(p) > 0 && q.n > 0 {
		end := min(q.r+q.n, len(q.buf))
		k := copy(p, q.buf[q.r:end])
		q.r = (q.r + k) % len(q.buf)
		q.n -= k
		p = p[k:]
		total += k
	}
	return total
}
