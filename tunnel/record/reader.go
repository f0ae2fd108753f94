package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"

	"github.com/offload-dev/offload/engine"
)

// The reader pipeline mirrors the writer's:
//
//	conn ──> reader goroutine ──┬──> work ──> worker 1..W: verify tag, then
//	         read header, check │             decrypt (and unpad) in place,
//	         len, epoch (flag), │             with the frame's epoch keys;
//	         read body into the │             f.done
//	         frame; seq++       └──> queue ──> Read (in seq order): waits for
//	                                          the head frame's done, copies out;
//	                                          or ReadLent: lends a piece of the
//	                                          frame itself (refs; the last
//	                                          Release recycles it)
//
// Short frames are read ahead several at a time; long ones (bulk) have
// their body read straight into the frame's buffer, with the next header
// in the same readv on a TCP link (linkReader), so a bulk byte is copied
// once, by Read, or not at all by a caller that takes it lent (ReadLent:
// the mux keeps big pieces as they are, tunnel/mux segment.go), and a bulk
// frame costs one read where the link keeps up. Only an opened frame is
// lent (next returns no other), so a tampered, replayed or truncated frame
// reaches nobody by either way.
//
// The reader goroutine checks the length against MaxFrame (and, for CBC,
// that it is a positive multiple of 16) before it takes a buffer or reads a
// byte of the body. queue bounds the frames read but not yet delivered
// (2W+4 of them, fewer where that would pass pipelineBytes: writer.go);
// work never blocks (it holds at most as many frames as queue, plus the
// one Read is waiting for). Read is the only consumer of queue; it
// delivers the frames before a failed one and then returns the failure.
// A worker whose engine request stalls loses its frame to a new worker
// that opens it in software (stall.go), in both pipelines.
//
// The inline path (Options.DataPath = DataPathInline, opt-in; writer.go):
//
//	conn ──> reader goroutine: read header, check ──> queue ──> Read (in seq
//	         len, epoch; read body into the frame;              order), copies
//	         verify tag, decrypt in place (worker);             out, or
//	         f.done; seq++                                      ReadLent lends
//
// One hand-off per frame (the reader to Read) instead of two. The reader's
// state (linkReader, seq) lives in the reader, so a stalled open is redone
// in software by the watchdog's new worker, which then queues the frame
// and goes on reading the link (worker.resume). Read does not open frames
// itself: the stall takeover needs the opening goroutine to be one the
// watchdog can replace, and Read's caller (the mux read loop) is not.

// readBufSize is the reader's buffer: headers and short frames come out
// of it, long bodies are read straight into the frame (linkReader).
const readBufSize = 32 << 10

type reader struct {
	c        *Conn
	deadline deadline
	queue    chan *frame
	work     chan *frame

	// The reading goroutine's (run), kept here so that on the inline
	// path a goroutine taking over from a stalled one (stall.go) goes on
	// reading the link where it stopped.
	br  *linkReader
	seq uint64 // frames read, for errors
	hdr [HeaderSize]byte

	rmu     sync.Mutex // one Read at a time; guards the fields below
	cur     *frame     // frame being delivered
	pending *frame     // head of queue, taken but not done yet
	err     error      // sticky: the error Read returned
}

func (r *reader) init(c *Conn) {
	r.c = c
	r.deadline.init()
	depth := pipelineDepth(c.maxFrame, 2*c.opt.Workers+4)
	r.queue = make(chan *frame, depth)
	r.work = make(chan *frame, depth+1)
	r.br = newLinkReader(c.conn)
	if c.inline {
		wk := newWorker(c, engine.Decrypt, nil)
		wk.resume = r.resume
		c.wg.Add(1)
		go func() {
			defer wk.release()
			defer wk.close()
			r.run(wk)
		}()
		return
	}
	c.wg.Add(1 + c.opt.Workers)
	go func() { defer c.wg.Done(); r.run(nil) }()
	for range c.opt.Workers {
		wk := newWorker(c, engine.Decrypt, r.work)
		go func() { defer wk.release(); wk.run() }()
	}
}

// run reads frames until the stream ends or the link fails. With a
// worker (the inline path) it opens each frame itself before it queues
// it; without, it queues it for Read and hands it to the workers.
func (r *reader) run(wk *worker) {
	c := r.c
loop:
	for ; ; r.seq++ {
		f := r.readFrame()
		if f == nil {
			break
		}
		if wk == nil {
			select {
			case r.queue <- f:
			case <-c.quit:
				putFrame(f)
				break loop
			}
			r.work <- f
			continue
		}
		if !wk.do(f) {
			return // taken over: f and the link are the new worker's
		}
		if !r.deliver(f) {
			break
		}
	}
	r.finish()
}

// resume is the inline reader's worker.resume: nw redoes the frame the
// stalled worker held, queues it and goes on reading the link.
func (r *reader) resume(nw *worker, f *frame) {
	nw.redo(f)
	if !r.deliver(f) {
		r.finish()
		return
	}
	r.seq++
	r.run(nw)
}

// deliver queues an opened frame for Read; it reports false when the
// reader must stop: the frame failed (the worker failed the link) or the
// link is down.
func (r *reader) deliver(f *frame) bool {
	ok := f.err == nil // f is Read's once queued
	select {
	case r.queue <- f:
		return ok
	case <-r.c.quit:
		r.release(f)
		return false
	}
}

// finish ends the reading goroutine's part: the workers stop once they
// have what is queued, the chain lets go of its epoch.
func (r *reader) finish() {
	if !r.c.inline {
		close(r.work)
	}
	r.c.recv.close()
}

// readFrame reads the next frame off the link, or returns nil once the
// stream ended (a marker is queued) or the link failed.
func (r *reader) readFrame() *frame {
	c, br, seq := r.c, r.br, r.seq
	hdr := r.hdr[:] // a field: a local would escape (the link's Read) once per frame
	if err := br.header(hdr); err != nil {
		if err == io.EOF {
			// The peer closed between two frames.
			select {
			case r.queue <- newMarker(markEnd, io.EOF):
			case <-c.quit:
			}
			return nil
		}
		c.fail(fmt.Errorf("record: reading frame %d header: %w", seq, err))
		return nil
	}
	// Checked as a u32: on 32-bit platforms int(0xffffffff) is -1.
	hw := binary.BigEndian.Uint32(hdr[:])
	if err := c.checkLen(hw &^ epochFlag); err != nil {
		c.fail(fmt.Errorf("frame %d: %w", seq, err))
		return nil
	}
	n := int(hw &^ epochFlag)
	ep, eseq, err := c.recv.accept(hw&epochFlag != 0)
	if err != nil {
		c.fail(fmt.Errorf("frame %d: %w", seq, err))
		return nil
	}
	f := getFrame(wireSize(n))
	f.ep, f.seq = ep, eseq // putFrame lets go of ep if f goes no further
	copy(f.buf, hdr)
	if err := br.body(f.buf[HeaderSize:wireSize(n)]); err != nil {
		putFrame(f)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		c.fail(fmt.Errorf("record: reading frame %d of %d bytes: %w", seq, n, err))
		return nil
	}
	f.n = n
	return f
}

// linkReader reads frames off the link. While frames are short (an idle
// or interactive link) it reads ahead into its buffer, so one read
// syscall brings several frames. Once they are long (bulk), the read-ahead
// would only copy the start of each body out of the buffer again, so the
// body is read straight into the frame's buffer; on a TCP link the read
// that ends a body also takes the next frame's header into the buffer
// (readv, readv_linux.go), so a bulk frame costs no header read of its own.
// Elsewhere the header is read exactly: one system call more per frame.
type linkReader struct {
	conn net.Conn
	buf  []byte
	r, w int  // buf[r:w] is read and not yet taken
	bulk bool // the last frame was long
	vec  vecReader
}

func newLinkReader(conn net.Conn) *linkReader {
	l := &linkReader{conn: conn, buf: make([]byte, readBufSize)}
	l.vec.init(conn)
	return l
}

// header fills h. It returns io.EOF only if the link ended before a byte
// of it, io.ErrUnexpectedEOF if it ended inside, and an error wrapping
// ErrPeerReset if a reset came before a byte of it.
func (l *linkReader) header(h []byte) error {
	k := copy(h, l.buf[l.r:l.w])
	l.r += k
	if k == len(h) {
		return nil
	}
	var n int
	var err error
	if l.bulk {
		n, err = io.ReadFull(l.conn, h[k:])
	} else {
		// Read ahead: at least the rest of the header, as much as comes.
		l.r, l.w = 0, 0
		n, err = io.ReadAtLeast(l.conn, l.buf, len(h)-k)
		l.w = n
		if err == nil {
			l.r = copy(h[k:], l.buf[:n])
		}
	}
	switch {
	case err == nil:
		return nil
	case err == io.EOF && k > 0:
		return io.ErrUnexpectedEOF
	case k == 0 && n == 0 && errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%w: %w", ErrPeerReset, err)
	}
	return err
}

// body fills p, a frame's body: what was read ahead first, the rest
// straight from the link.
func (l *linkReader) body(p []byte) error {
	l.bulk = len(p) >= len(l.buf)/2
	k := copy(p, l.buf[l.r:l.w])
	l.r += k
	if k == len(p) {
		return nil
	}
	if l.bulk && l.vec.ok() {
		// The buffer is empty (k < len(p) took all of it).
		l.r, l.w = 0, 0
		n, err := l.vec.read(p[k:], l.buf[:HeaderSize])
		l.w = n
		return err
	}
	_, err := io.ReadFull(l.conn, p[k:])
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// checkLen validates a frame header's length before anything is allocated
// or read for the body.
func (c *Conn) checkLen(n uint32) error {
	if n > uint32(c.maxFrame) {
		if n <= HardMaxFrame {
			// A length an older peer with a larger max_frame sends: the
			// likelier cause than corruption, and one the user can fix.
			// (A peer of version 3 on knows ours and sends no more.)
			return fmt.Errorf("%w: %d bytes, max_frame here is %d: the peer's max_frame may be larger (a peer older than protocol version 3 needs the same on both ends), or the link corrupted the header",
				ErrFrameTooLarge, n, c.maxFrame)
		}
		return fmt.Errorf("%w: %d bytes, max %d", ErrFrameTooLarge, n, c.maxFrame)
	}
	if n == 0 {
		return fmt.Errorf("%w: empty frame", ErrBadLength)
	}
	if c.suite.Cipher.Mode == engine.CBC && n%engine.BlockSize != 0 {
		return fmt.Errorf("%w: %d bytes is not a multiple of 16 (CBC)", ErrBadLength, n)
	}
	return nil
}

// Read implements net.Conn. It returns the plaintext of the frames that
// have been opened, in order; it blocks only while there is none.
func (c *Conn) Read(p []byte) (int, error) {
	r := &c.r
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if err := r.check(); err != nil || len(p) == 0 {
		return 0, err
	}
	n := 0
	for n < len(p) {
		f, err := r.head(n == 0)
		if err != nil {
			if n > 0 {
				return n, nil // the error stays sticky for the next Read
			}
			return 0, err
		}
		if f == nil {
			break
		}
		k := copy(p[n:], f.buf[f.off:f.end])
		n += k
		r.take(k)
	}
	return n, nil
}

// Lease keeps a piece ReadLent lent from being recycled until Release;
// Size is the memory it keeps (the frame's whole buffer). An alias of the
// literal type, so that tunnel/resume and tunnel/mux name the same type
// without importing this package (as Filler).
type Lease = interface {
	Release()
	Size() int
}

// ReadLent is Read without the copy: it returns up to most bytes of the
// next opened plaintext as a slice of the frame's own buffer, with the
// Lease that keeps them; the caller must not write to them and releases
// the lease once it is done with them. A piece never spans two frames, and
// the frames lent are the ones Read would deliver, in the same order, with
// the same errors: only a frame whose tag verified is ever lent. The
// buffer goes back to its pool once Read has moved past the frame and
// every piece lent from it is released, so a lease the caller keeps costs
// memory (Size), not correctness. Read and ReadLent may be mixed (the mux
// reads its frame headers with Read); neither may be called concurrently.
func (c *Conn) ReadLent(most int) ([]byte, Lease, error) {
	r := &c.r
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if err := r.check(); err != nil || most <= 0 {
		return nil, nil, err
	}
	f, err := r.head(true)
	if err != nil {
		return nil, nil, err
	}
	b := f.buf[f.off:min(f.end, f.off+most)]
	if f.ep != nil {
		// Opened: a lent piece must not keep its epoch's keys from being
		// wiped at the next rekey.
		f.ep.release()
		f.ep = nil
	}
	f.refs.Add(1)
	r.take(len(b))
	return b[:len(b):len(b)], f, nil
}

// check is why Read or ReadLent returns at once, if it does.
func (r *reader) check() error {
	switch {
	case isClosed(r.c.localClosed):
		return ErrClosed
	case r.err != nil:
		return r.err
	case r.deadline.expired():
		return errTimeout
	}
	return nil
}

// head returns the frame being delivered, taking the next opened one if
// there is none (waiting for it if block; without, nil, nil while none is
// ready). rmu held.
func (r *reader) head(block bool) (*frame, error) {
	if r.cur == nil {
		f, err := r.next(block)
		if f == nil {
			return nil, err
		}
		f.refs.Store(1) // Read's own, until it moves past the frame
		r.cur = f
	}
	return r.cur, nil
}

// take accounts k bytes delivered from the head frame and lets go of it
// once they reach its end. rmu held.
func (r *reader) take(k int) {
	r.c.traffic.received(k)
	r.cur.off += k
	if r.cur.off == r.cur.end {
		r.cur.unref()
		r.cur = nil
	}
}

// next returns the next opened frame. Without block it returns nil, nil if
// none is ready. An error is sticky (r.err); a failed frame fails the link.
func (r *reader) next(block bool) (*frame, error) {
	c := r.c
	if r.pending == nil {
		select {
		case r.pending = <-r.queue:
		default:
			if !block {
				return nil, nil
			}
			select {
			case r.pending = <-r.queue:
			case <-c.dead:
				// The link is down: deliver what was queued before it went.
				select {
				case r.pending = <-r.queue:
				default:
					if isClosed(c.localClosed) {
						return nil, ErrClosed
					}
					r.err = c.linkErr()
					return nil, r.err
				}
			case <-r.deadline.wait():
				return nil, errTimeout
			}
		}
	}
	f := r.pending
	if !f.ready(false) {
		if !block {
			return nil, nil
		}
		select {
		case <-f.done:
			f.seen = true
		case <-c.localClosed:
			return nil, ErrClosed
		case <-r.deadline.wait():
			return nil, errTimeout
		}
	}
	r.pending = nil
	if f.err != nil {
		r.err = f.err
		putFrame(f)
		if !errors.Is(r.err, io.EOF) {
			r.c.fail(r.err)
		}
		return nil, r.err
	}
	return f, nil
}

// release recycles a frame taken from queue outside Read (Close).
func (r *reader) release(f *frame) {
	f.ready(true)
	putFrame(f)
}

// drain recycles every frame left once the goroutines have exited (Close).
func (r *reader) drain() {
	r.rmu.Lock()
	defer r.rmu.Unlock()
	if r.cur != nil {
		r.cur.unref() // pieces lent from it keep it until released
		r.cur = nil
	}
	if r.pending != nil {
		r.release(r.pending)
		r.pending = nil
	}
	for {
		select {
		case f := <-r.queue:
			r.release(f)
		default:
			return
		}
	}
}
