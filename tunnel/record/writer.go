package record

import (
	"fmt"
	"net"
	"runtime"
	"sync"

	"github.com/offload-dev/offload/engine"
)

/* The writer pipeline (one per Conn):

   Write(p) ──copy──> open frame ──> filled ──> cutter ──────────┬──> work ──> worker 1..W
   (wmu: one Write    (mu: Write     (mu;       takes a slot,    │           seal in place:
   at a time; blocks  copies p into  bounded    then takes the   │           engine (policy
   on space, the      the buffer of  by Write-  oldest filled    │           pick, software redo
   write deadline or  the frame it   Buffer)    frame, or the    │           on error, stall)
   the link's end)    will be sealed            open one as it   │           + MAC with the
                      in)                       is; epoch, seq++ │           frame's epoch
                                                                 │           keys; f.done
                                                                 └──> sendq ──> sender
                                                                      (seq order)  waits f.done of the
                                                                                   head frame, batches the
                                                                                   sealed frames behind it,
                                                                                   writes them (writev),
                                                                                   frees their slots

   WriteInPlace(fill) ──fill──> open frame    (wmu, as Write; fill writes
                                              into the frame's room without
                                              mu, flagged filling, and must
                                              not block: the tunnel's socket
                                              read of what is there)

   Copies: one, from p into the frame buffer that is sealed in place and
   written; there is no staging ring. WriteInPlace has none of ours: it
   lends its caller the open frame's free space (the tunnel reads a local
   socket straight into it, behind room for the mux and chunk headers) and
   commits what the caller wrote; while it fills (without mu, under wmu)
   the cutter leaves the open frame alone, and the fill must not block. A frame starts in a small buffer and moves to a full-size one
   only when a write overflows it, so an idle link's short frames do not
   hold MaxFrame buffers; an open frame a fill left empty is given back.

   Locking: mu guards the open and filled frames, the byte count and the
   closing flag; nothing else is shared. Write and the cutter signal each
   other through one-slot channels (data, space), so a Write never waits
   while holding mu. The cutter is the only producer of work and sendq and
   the only one that assigns seq, so frames enter sendq in seq order; the
   sender is their only consumer and writes them in that order whatever
   order the workers finish in.

   Bounds: Write buffers at most WriteBuffer plaintext bytes. slots counts
   frames cut but not yet written; the pipeline holds at most
   pipelineBytes of them (but at least 2 frames, at most 2W+2), so memory
   per link is bounded in bytes whatever MaxFrame is. The cutter takes a
   slot before it cuts, so while the pipeline is busy the buffer fills and
   the next frame is a full one (bulk: MaxFrame frames, where a hardware
   engine wins), and on an idle link a small write is cut at once (low
   latency). work and sendq never block their producer: each holds at most
   as many frames as there are slots (+1 for the close marker).

   Close: the cutter cuts what is left, queues a close marker and stops;
   when the sender reaches the marker everything before it is on the wire.
   On a link failure quit is closed: the cutter stops and closes work, the
   workers finish what they hold (so every frame gets its done signal) and
   exit, the sender exits.

   The inline path (Options.DataPath = DataPathInline, opt-in: meant for
   one CPU, where the pipeline's parallelism buys nothing and each hand-off
   is a scheduling round; on the router anchor it measured dearer, see
   DataPathAuto):

   Write / WriteInPlace ──> open frame ──> filled ──> sealer (one goroutine)
   (as above)                (as above)     (as above)  cut: the full frames, else the
                                                        open one, at most depth (as the
                                                        slots bound) and maxBatch;
                                                        epoch, seq++ for each
                                                        seal each in turn (worker, as above)
                                                        writev the batch; cut again

   One goroutine hand-off per frame, Write's caller to the sealer (data),
   instead of three (cutter, worker, sender); frames leave in seq order as
   they are cut. The sealer's state (batch, sealed) lives in the writer, so
   when a seal's engine request stalls the watchdog's new worker redoes
   the frame in software and goes on with the batch and the loop
   (worker.resume, stall.go). Close: the sealer writes what was cut, cuts
   what is left, and closes flushed once nothing is buffered; on quit it
   stops. */

// smallCut is the size under which the cutter yields once before cutting,
// so a header written just before its body (yamux writes them as two
// Writes) usually goes out in the same frame.
const smallCut = 64

// maxBatch is how many sealed frames the sender writes in one writev.
const maxBatch = 16

// pipelineBytes bounds the frames in flight per direction (cut and not yet
// written; read and not yet delivered) in bytes, so larger frames mean
// fewer of them rather than more memory.
const pipelineBytes = 256 << 10

// pipelineDepth is how many frames of maxFrame bytes fit pipelineBytes,
// between 2 (one being sealed or opened while one moves) and hi.
func pipelineDepth(maxFrame, hi int) int {
	return max(2, min(hi, pipelineBytes/maxFrame))
}

// smallPlain is the plaintext a frame holds in a small-class buffer, with
// room for its header, CBC padding and tag.
const smallPlain = classSmall - HeaderSize - engine.BlockSize - TagSize

type writer struct {
	c *Conn

	wmu      sync.Mutex // one Write at a time
	deadline deadline

	mu       sync.Mutex
	open     *frame   // the frame Write is filling; nil if none
	filled   []*frame // full frames waiting for the cutter, oldest first
	buffered int      // plaintext bytes in open and filled
	filling  bool     // WriteInPlace is writing into open: the cutter leaves it
	closing  bool

	data  chan struct{} // Write → cutter: there is data (or closing)
	space chan struct{} // cutter → Write: there is space
	slots chan struct{}
	work  chan *frame
	sendq chan *frame

	flushed chan struct{} // closed when the close marker was sent

	// The inline path's state (sealer), the current sealing goroutine's
	// only, kept here so that a goroutine taking over from a stalled one
	// (stall.go) goes on from it: the frames cut together, the first
	// not sealed yet, and the writev's vectors.
	batch  []*frame
	sealed int
	bufs   net.Buffers
	iovecs net.Buffers // WriteTo's receiver: a field, so it is not a new heap value per writev
	depth  int
}

func (w *writer) init(c *Conn) {
	w.c = c
	w.deadline.init()
	depth := pipelineDepth(c.sendFrame, 2*c.opt.Workers+2)
	w.data = make(chan struct{}, 1)
	w.space = make(chan struct{}, 1)
	w.slots = make(chan struct{}, depth)
	w.work = make(chan *frame, depth)
	w.sendq = make(chan *frame, depth+1)
	w.flushed = make(chan struct{})

	if c.inline {
		w.depth = min(depth, maxBatch)
		w.batch = make([]*frame, 0, w.depth)
		w.bufs = make(net.Buffers, 0, w.depth)
		wk := newWorker(c, engine.Encrypt, nil)
		wk.resume = w.resume
		c.wg.Add(1)
		go func() {
			defer wk.release()
			defer wk.close()
			w.sealer(wk)
		}()
		return
	}
	c.wg.Add(2 + c.opt.Workers)
	go func() { defer c.wg.Done(); w.cutter() }()
	go func() { defer c.wg.Done(); w.sender() }()
	for range c.opt.Workers {
		wk := newWorker(c, engine.Encrypt, w.work)
		go func() { defer wk.release(); wk.run() }()
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
		k := w.fill(p[n:])
		w.mu.Unlock()
		if k > 0 {
			n += k
			c.traffic.sent(k)
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

// Filler writes bytes into room it is lent (WriteInPlace): Fill returns
// how many it wrote at the start of b. An interface rather than a func so
// that a caller's per-stream value goes in without an allocation per call;
// an alias of the literal type, so that tunnel/mux names the same type
// without importing this package.
type Filler = interface {
	Fill(b []byte) int
}

// WriteInPlace appends to the stream what fill writes straight into the
// open frame's buffer, so the caller's bytes are copied once (typically by
// a socket read) instead of into a buffer of its own and then again by
// Write. fill gets room for need to most bytes (less than most where the
// frame or the write buffer ends; a frame with less than need left is cut
// as it is) and returns how many it wrote at the start of it; 0 adds
// nothing. WriteInPlace waits for room as Write does, then calls fill
// once, under the writer's lock: fill must not block, since Write and the
// cutter wait for it. It returns what was added, and an error only if fill
// was not called (the link is down, the write deadline passed, or need is
// not 1..the frame's plaintext).
func (c *Conn) WriteInPlace(need, most int, fill Filler) (int, error) {
	w := &c.w
	if need < 1 || need > c.maxPlain || most < need {
		return 0, fmt.Errorf("record: WriteInPlace of %d..%d bytes: want 1 ≤ need ≤ most, need ≤ %d", need, most, c.maxPlain)
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	for {
		if isClosed(c.dead) {
			return 0, c.linkErr()
		}
		if w.deadline.expired() {
			return 0, errTimeout
		}
		w.mu.Lock()
		if b := w.room(need, most); b != nil {
			// The open frame is ours while filling is set (wmu keeps
			// every other writer out, and the cutter leaves it), so
			// fill runs without mu: the cutter goes on cutting.
			w.filling = true
			w.mu.Unlock()
			n := max(0, min(fill.Fill(b), len(b)))
			w.mu.Lock()
			w.filling = false
			w.commit(n)
			w.mu.Unlock()
			if n > 0 {
				c.traffic.sent(n)
			}
			notify(w.data) // also for a cutter that waited for the fill
			return n, nil
		}
		w.mu.Unlock()
		select {
		case <-w.space:
		case <-c.dead:
		case <-w.deadline.wait():
		}
	}
}

// room returns the open frame's free space for WriteInPlace, need to max
// bytes, or nil while the write buffer has less than need free. The
// caller holds mu and calls commit next.
func (w *writer) room(need, most int) []byte {
	maxPlain := w.c.maxPlain
	free := w.c.opt.WriteBuffer - w.buffered
	if free < need {
		return nil
	}
	f := w.open
	if f != nil && maxPlain-f.n < need {
		// The caller's unit does not fit the rest of this frame: the
		// frame is complete as it is.
		w.filled = append(w.filled, f)
		w.open = nil
		f = nil
	}
	if f == nil {
		f = getFrame(classSmall)
		w.open = f
	}
	want := min(most, maxPlain-f.n, free)
	if f.n+want > smallPlain && len(f.buf) == classSmall {
		w.grow(f)
	}
	return f.buf[HeaderSize+f.n : HeaderSize+f.n+want]
}

// commit adds the n bytes fill wrote into the room to the open frame; an
// open frame left empty is given back, so an idle link holds no buffer.
// The caller holds mu.
func (w *writer) commit(n int) {
	f := w.open
	f.n += n
	w.buffered += n
	switch {
	case f.n == 0:
		putFrame(f)
		w.open = nil
	case f.n == w.c.maxPlain:
		w.filled = append(w.filled, f)
		w.open = nil
	}
}

// grow moves the open frame f out of its small buffer into a full-size one.
func (w *writer) grow(f *frame) {
	big := getBuf(wireSize(w.c.maxPlain + engine.BlockSize))
	copy(big[HeaderSize:], f.buf[HeaderSize:HeaderSize+f.n])
	putBuf(f.buf)
	f.buf = big
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
		buffered, closing := w.buffered, w.closing
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
		f := w.take()
		w.mu.Unlock()
		if f == nil {
			// Only the frame being filled has data: cut it once the
			// fill is done (it notifies data).
			<-w.slots
			select {
			case <-w.data:
				continue
			case <-c.quit:
				return
			}
		}
		notify(w.space)
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

// sealer is the inline path's one goroutine (DataPathInline): it cuts
// what Write buffered into a batch of frames, seals them one after the
// other with wk and writes them in one writev, then cuts again. It
// returns when the writer is closed and flushed, the link fails, or the
// stall watchdog takes wk's frame over (the new goroutine goes on).
func (w *writer) sealer(wk *worker) {
	for {
		for w.sealed < len(w.batch) {
			f := w.batch[w.sealed]
			if !wk.do(f) {
				return // taken over: f and the batch are the new worker's
			}
			<-f.done // nobody else waits for it here
			w.sealed++
		}
		if len(w.batch) > 0 && !w.flush() {
			w.c.send.close()
			return
		}
		if !w.cut() {
			w.c.send.close()
			return
		}
	}
}

// resume is the inline writer's worker.resume: nw redoes the frame the
// stalled worker held (the batch's w.sealed-th) and goes on sealing.
func (w *writer) resume(nw *worker, f *frame) {
	nw.redo(f)
	<-f.done
	w.sealed++
	w.sealer(nw)
}

// cut waits for buffered data and cuts the next batch: every full frame
// Write has filled, then the open one, at most depth frames (the bound of
// the pipeline's slots), each given its epoch and seq. It reports false
// once there is nothing more to send: the writer is closed and flushed
// (flushed is closed) or the link is down.
func (w *writer) cut() bool {
	c := w.c
	w.batch, w.sealed = w.batch[:0], 0
	for {
		w.mu.Lock()
		buffered, closing := w.buffered, w.closing
		w.mu.Unlock()
		if buffered == 0 {
			if closing {
				close(w.flushed)
				return false
			}
			select {
			case <-w.data:
				continue
			case <-c.quit:
				return false
			}
		}
		if buffered < smallCut {
			runtime.Gosched()
		}
		w.mu.Lock()
		for len(w.batch) < w.depth && w.buffered > 0 {
			if len(w.batch) > 0 && len(w.filled) == 0 {
				// Behind full frames the open one waits for the
				// next cut (after this batch is written) and fills
				// meanwhile: bulk goes in full frames.
				break
			}
			f := w.take()
			if f == nil {
				break // the rest is being filled
			}
			w.batch = append(w.batch, f)
		}
		w.mu.Unlock()
		if len(w.batch) == 0 {
			// Only the frame being filled has data: cut it once the
			// fill is done (it notifies data).
			select {
			case <-w.data:
				continue
			case <-c.quit:
				return false
			}
		}
		notify(w.space)
		for i, f := range w.batch {
			if err := c.send.assign(f); err != nil {
				// Send the frames before it, then fail (flush).
				for _, g := range w.batch[i:] {
					putFrame(g)
				}
				w.batch = append(w.batch[:i], newMarker(markNone, err))
				w.sealed = i + 1
				<-w.batch[i].done
				break
			}
		}
		return true
	}
}

// flush writes the sealed batch in one writev and recycles it; a frame
// that failed (or the marker of a failed assign) fails the link after the
// frames before it are written. It reports false when the link is down.
func (w *writer) flush() bool {
	c := w.c
	defer func() {
		for i, g := range w.batch {
			putFrame(g)
			w.batch[i] = nil
		}
		w.batch, w.sealed = w.batch[:0], 0
	}()
	w.bufs = w.bufs[:0]
	var err error
	for _, g := range w.batch {
		if g.err != nil {
			err = g.err
			break
		}
		w.bufs = append(w.bufs, g.buf[:wireSize(g.n)])
	}
	if len(w.bufs) > 0 {
		w.iovecs = w.bufs // WriteTo consumes its receiver
		if _, werr := w.iovecs.WriteTo(c.conn); werr != nil {
			c.fail(werr)
			return false
		}
	}
	if err != nil {
		c.fail(err)
		return false
	}
	return true
}

// drain recycles the frames left in the queues once every goroutine has
// exited (Close).
func (w *writer) drain() {
	// wmu: a Write or WriteInPlace still returning (the link is down)
	// is done with the open frame before it is recycled.
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	if w.open != nil {
		putFrame(w.open)
		w.open = nil
	}
	for _, f := range w.filled {
		putFrame(f)
	}
	w.filled, w.buffered = nil, 0
	w.mu.Unlock()
	// The inline batch, once a failure stopped its goroutine before
	// flush: a frame of it is sealed or not, never waited for.
	for i, f := range w.batch {
		putFrame(f)
		w.batch[i] = nil
	}
	w.batch = w.batch[:0]
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

// fill copies as much of p as the write buffer has room for into the
// open frame, moving full frames to filled; it returns how much it took.
// The caller holds mu.
func (w *writer) fill(p []byte) int {
	maxPlain := w.c.maxPlain
	total := 0
	for len(p) > 0 && w.buffered < w.c.opt.WriteBuffer {
		f := w.open
		if f == nil {
			f = getFrame(classSmall)
			w.open = f
		}
		want := min(len(p), maxPlain-f.n, w.c.opt.WriteBuffer-w.buffered)
		if f.n+want > smallPlain && len(f.buf) == classSmall {
			w.grow(f) // outgrown the small buffer
		}
		k := copy(f.buf[HeaderSize+f.n:HeaderSize+f.n+want], p)
		f.n += k
		w.buffered += k
		total += k
		p = p[k:]
		if f.n == maxPlain {
			w.filled = append(w.filled, f)
			w.open = nil
		}
	}
	return total
}

// take removes the next frame to cut: the oldest full one, else the open
// one as it is, unless WriteInPlace is filling it (nil). The caller holds
// mu and has seen buffered > 0.
func (w *writer) take() *frame {
	var f *frame
	if len(w.filled) > 0 {
		// A handful at most (WriteBuffer/MaxFrame+1): shift, so the
		// slice's array is reused and nothing is allocated per frame.
		f = w.filled[0]
		last := len(w.filled) - 1
		copy(w.filled, w.filled[1:])
		w.filled[last] = nil
		w.filled = w.filled[:last]
	} else {
		if w.filling {
			return nil
		}
		f, w.open = w.open, nil
	}
	w.buffered -= f.n
	return f
}
