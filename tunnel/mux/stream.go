package mux

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Why a stream was reset.
var (
	errPeerReset    = errors.New("by the peer")
	errLocalReset   = errors.New("by this end")
	errOverrun      = errors.New("its data would have overrun the session's receive budget")
	errOpenTimeout  = errors.New("the peer did not acknowledge it in time")
	errCloseTimeout = errors.New("the peer did not close it in time")
)

// Stream is one stream of a Session: a net.Conn with deadlines,
// half-close (CloseWrite) and Reset. One goroutine may read (Read, WriteTo
// or CopyTo) and one write at a time.
type Stream struct {
	sess *Session
	id   uint32

	mu         sync.Mutex
	segs       []*segment  // received, head first
	buffered   int         // unread bytes in segs
	held       int         // segment memory in segs
	filling    bool        // recvLoop is reading into the tail segment
	reading    int         // WriteTo is writing this many head segments out
	out        net.Buffers // copyTo's vectors (the one reader's)
	recvWindow uint32      // what the peer may still send
	sendWindow uint32      // what this end may still send
	ext        int64       // this stream's share of Session.extra
	synSent    bool        // this end opened it
	acked      bool
	finSent    bool
	finRecv    bool
	closed     bool  // Close: what arrives is discarded
	resetErr   error // reset, and why
	writeErr   error // reset after the peer's FIN: only writes fail
	sessDone   bool
	readCh     chan struct{}
	writeCh    chan struct{}
	rd, wd     deadline
	openTimer  *time.Timer
	closeTimer *time.Timer
	removed    atomic.Bool
	filler     dataFiller // Fill's (the one writer's)
}

func newStream(s *Session, id uint32) *Stream {
	return &Stream{
		sess:       s,
		id:         id,
		recvWindow: InitialWindow,
		sendWindow: InitialWindow,
		readCh:     make(chan struct{}, 1),
		writeCh:    make(chan struct{}, 1),
	}
}

// StreamID is the stream's id on the wire.
func (st *Stream) StreamID() uint32 { return st.id }

// Session is the session the stream belongs to.
func (st *Stream) Session() *Session { return st.sess }

func (st *Stream) dead() bool { return st.resetErr != nil || st.sessDone }

// discarding: nothing received will be read any more.
func (st *Stream) discarding() bool { return st.dead() || st.closed }

// --- receiving (recvLoop) ---

// receive reads a Data body of n bytes from the connection into the
// stream's segments, or resets the stream if they would take the session
// past its budget.
func (st *Stream) receive(n uint32) error {
	s := st.sess
	st.mu.Lock()
	if n > st.recvWindow {
		st.mu.Unlock()
		return fmt.Errorf("%w: %d bytes on stream %d, past its window of %d", ErrProtocol, n, st.id, st.recvWindow)
	}
	st.recvWindow -= n
	if n == 0 {
		st.mu.Unlock()
		return nil
	}
	if st.discarding() || st.finRecv {
		// Closed here (Close, or reset) or after the peer's FIN: the
		// bytes go nowhere. Data for a stream this end closed is answered
		// with an RST, as TCP answers data for a closed socket: the
		// peer's writer learns at once that nobody reads.
		live := !st.dead() && !st.finRecv
		if live {
			st.resetLocked(errLocalReset)
		}
		st.mu.Unlock()
		if live {
			st.sendReset()
		}
		return s.discard(n)
	}
	rem := int(n)
	room := 0
	if k := len(st.segs); k > 0 {
		t := st.segs[k-1]
		room = len(t.buf) - t.w
	}
	need := 0
	for r := rem - room; r > 0; {
		z := segmentSize(r)
		need += z
		r -= min(r, z)
	}
	if s.held.Load()+int64(need) > int64(s.cfg.ReceiveBudget) {
		return st.overrunLocked(n)
	}
	if s.lend != nil {
		return st.receiveLent(rem)
	}
	s.held.Add(int64(need))
	st.held += need
	for rem > 0 {
		var t *segment
		if k := len(st.segs); k > 0 && st.segs[k-1].w < len(st.segs[k-1].buf) {
			t = st.segs[k-1]
		} else {
			t = newSegment(rem)
			st.segs = append(st.segs, t)
		}
		w := t.w
		k := min(rem, len(t.buf)-w)
		st.filling = true
		st.mu.Unlock()
		_, err := io.ReadFull(s.conn, t.buf[w:w+k])
		st.mu.Lock()
		st.filling = false
		if err != nil {
			st.dropSegsLocked()
			st.mu.Unlock()
			return err
		}
		t.w += k
		st.buffered += k
		rem -= k
		if st.discarding() {
			st.dropSegsLocked()
			st.mu.Unlock()
			return s.discard(uint32(rem))
		}
	}
	st.mu.Unlock()
	notify(st.readCh)
	return nil
}

// overrunLocked resets the stream whose data would take the session past
// its receive budget and discards the rest of the body, rem bytes; mu held
// on entry, not on return.
func (st *Stream) overrunLocked(rem uint32) error {
	s := st.sess
	st.resetLocked(errOverrun)
	st.mu.Unlock()
	st.sendReset()
	s.cfg.Counters.Overruns.Add(1)
	if ok, k := s.overrunLog.Allow(); ok {
		s.log.Warn("reset a stream whose data overran the receive budget", zap.Uint32("stream", st.id),
			zap.Int64("buffered", s.held.Load()), zap.Int("budget", s.cfg.ReceiveBudget),
			zap.String("raise", s.cfg.ReceiveBudgetName), zap.Uint64("overruns_not_logged", k))
	}
	return s.discard(rem)
}

// receiveLent takes a Data body of rem bytes from a connection that lends
// its frames (segment.go): piece by piece as the connection lends them,
// each kept as it is or copied (keepLocked). mu held on entry, not on
// return.
func (st *Stream) receiveLent(rem int) error {
	s := st.sess
	for rem > 0 {
		st.mu.Unlock()
		b, lease, err := s.lend.ReadLent(rem)
		st.mu.Lock()
		if err != nil {
			st.dropSegsLocked()
			st.mu.Unlock()
			return err
		}
		rem -= len(b)
		if st.discarding() {
			lease.Release()
			st.dropSegsLocked()
			st.mu.Unlock()
			return s.discard(uint32(rem))
		}
		if !st.keepLocked(b, lease) {
			return st.overrunLocked(uint32(rem))
		}
	}
	st.mu.Unlock()
	notify(st.readCh)
	return nil
}

// keepLocked appends a lent piece to the stream's segments: by reference
// if it is big enough to pin its buffer (lendable), else copied into the
// tail segment or new ones, and its lease released at once. It reports
// false if a segment the copy needs would take the session past its
// budget (the caller resets the stream).
func (st *Stream) keepLocked(b []byte, lease Lease) bool {
	s := st.sess
	if slack, ok := s.lendable(len(b), lease.Size()); ok {
		s.held.Add(int64(len(b)))
		s.pinned.Add(int64(slack))
		st.held += len(b) + slack
		st.segs = append(st.segs, &segment{buf: b, w: len(b), lease: lease, slack: slack})
		st.buffered += len(b)
		return true
	}
	defer lease.Release()
	for len(b) > 0 {
		var t *segment
		if k := len(st.segs); k > 0 && st.segs[k-1].w < len(st.segs[k-1].buf) {
			t = st.segs[k-1]
		} else {
			z := segmentSize(len(b))
			if s.held.Load()+int64(z) > int64(s.cfg.ReceiveBudget) {
				return false
			}
			s.held.Add(int64(z))
			st.held += z
			t = newSegment(len(b))
			st.segs = append(st.segs, t)
		}
		k := copy(t.buf[t.w:], b)
		t.w += k
		st.buffered += k
		b = b[k:]
	}
	return true
}

func (st *Stream) acknowledged(h header) {
	st.mu.Lock()
	ok := st.synSent && !st.acked
	st.acked = true
	if st.openTimer != nil {
		st.openTimer.Stop()
	}
	st.mu.Unlock()
	if !ok {
		st.sess.stray("yamux: ACK for a stream without inflight SYN", h)
	}
}

func (st *Stream) addSendWindow(delta uint32) {
	st.mu.Lock()
	st.sendWindow = uint32(min(uint64(st.sendWindow)+uint64(delta), 1<<32-1))
	st.mu.Unlock()
	notify(st.writeCh)
}

func (st *Stream) remoteClose() {
	st.mu.Lock()
	if st.finRecv {
		st.mu.Unlock()
		return
	}
	st.finRecv = true
	done := st.finSent
	st.mu.Unlock()
	notify(st.readCh)
	if done {
		st.finish()
	}
}

func (st *Stream) remoteReset() {
	st.mu.Lock()
	switch {
	case st.resetErr != nil:
	case st.finRecv && !st.closed:
		// The peer had sent all it had (FIN), then reset: what it sent
		// is still read (a refusal's reason, for one); only writes fail.
		st.writeErr = errPeerReset
		st.stopTimersLocked()
		st.forgetLocked()
		notify(st.writeCh)
	default:
		st.resetLocked(errPeerReset)
	}
	st.mu.Unlock()
}

// resetLocked ends the stream at once for why: buffers freed, waiters
// woken, forgotten by the session.
func (st *Stream) resetLocked(why error) {
	if st.resetErr == nil {
		st.resetErr = why
	}
	st.dropSegsLocked()
	st.stopTimersLocked()
	notify(st.readCh)
	notify(st.writeCh)
	st.forgetLocked()
}

func (st *Stream) sendReset() {
	st.sess.queueStream(st, flagRST, 0)
}

func (st *Stream) sessionClosed() {
	st.mu.Lock()
	st.sessDone = true
	st.dropSegsLocked()
	st.stopTimersLocked()
	st.mu.Unlock()
	notify(st.readCh)
	notify(st.writeCh)
}

func (st *Stream) stopTimersLocked() {
	if st.openTimer != nil {
		st.openTimer.Stop()
	}
	if st.closeTimer != nil {
		st.closeTimer.Stop()
	}
}

// forgetLocked removes the stream from the session and gives its credit
// share back.
func (st *Stream) forgetLocked() {
	if st.removed.Swap(true) {
		return
	}
	st.sess.extra.Add(-st.ext)
	st.ext = 0
	st.sess.removeStream(st)
}

// finish forgets a stream both ends closed.
func (st *Stream) finish() {
	st.mu.Lock()
	st.stopTimersLocked()
	st.forgetLocked()
	st.mu.Unlock()
}

// dropSegsLocked frees the segments nobody is using; the one recvLoop
// fills or WriteTo writes out is freed when that ends. Unread bytes are
// gone.
func (st *Stream) dropSegsLocked() {
	kept := st.segs[:0]
	for i, g := range st.segs {
		if (st.filling && i == len(st.segs)-1) || i < st.reading {
			kept = append(kept, g)
			continue
		}
		st.freeSeg(g)
	}
	clear(st.segs[len(kept):])
	st.segs = kept
	st.buffered = 0
	for _, g := range kept {
		st.buffered += g.w - g.r
	}
	if st.discarding() {
		st.buffered = 0
		for _, g := range kept {
			g.r = g.w
		}
	}
	if len(st.segs) == 0 {
		st.segs = nil
	}
	st.updateExtLocked()
}

// freeSeg gives back a segment and the memory it counted. mu held.
func (st *Stream) freeSeg(g *segment) {
	st.held -= len(g.buf) + g.slack
	st.sess.held.Add(-int64(len(g.buf)))
	st.sess.pinned.Add(-int64(g.slack))
	g.release()
}

// consumedLocked accounts k bytes read from the head segment, frees the
// segments read to the end, and returns the credit to grant.
func (st *Stream) consumedLocked(k int) uint32 {
	st.buffered -= k
	for len(st.segs) > 0 {
		g := st.segs[0]
		// The tail recvLoop fills stays; any other segment read to its
		// end goes back to the pool.
		if g.r < g.w || (len(st.segs) == 1 && st.filling) {
			break
		}
		st.freeSeg(g)
		st.segs[0] = nil
		st.segs = st.segs[1:]
	}
	if len(st.segs) == 0 {
		st.segs = nil
	}
	if st.discarding() {
		st.dropSegsLocked()
		return 0
	}
	st.updateExtLocked()
	return st.creditLocked()
}

// updateExtLocked keeps Session.extra = Σ streams' exposure (unread +
// credit) beyond their initial window.
func (st *Stream) updateExtLocked() {
	if st.removed.Load() {
		return
	}
	e := max(0, int64(st.recvWindow)+int64(st.buffered)-InitialWindow)
	st.sess.extra.Add(e - st.ext)
	st.ext = e
}

// creditLocked is the window update to send after a read (0: none yet):
// back up to the initial window always, beyond it up to MaxStreamWindow
// while the session's extra exposure stays within half its budget.
func (st *Stream) creditLocked() uint32 {
	if st.finRecv || st.discarding() {
		return 0
	}
	s := st.sess
	exp := int64(st.recvWindow) + int64(st.buffered)
	top := int64(s.cfg.MaxStreamWindow)
	if exp >= top {
		return 0
	}
	want := top - exp
	base := min(want, max(0, InitialWindow-exp))
	var extra int64
	if w := want - base; w > 0 {
		limit := int64(s.cfg.ReceiveBudget / 2)
		for {
			cur := s.extra.Load()
			g := min(w, limit-cur)
			if g <= 0 {
				break
			}
			if s.extra.CompareAndSwap(cur, cur+g) {
				extra = g
				break
			}
		}
	}
	grant := base + extra
	// Updates in steps of half the window, as hashicorp/yamux sends
	// them (fewer frames); a smaller one only once the peer is close to
	// running out, so a stream held to its initial window never stalls.
	if grant == 0 || (grant < top/2 && st.recvWindow >= InitialWindow/2) {
		s.extra.Add(-extra)
		return 0
	}
	st.recvWindow += uint32(grant)
	st.ext += extra
	return uint32(grant)
}

// --- reading ---

// waitDataLocked waits, with mu held on entry and return, until the
// stream has bytes to read or will never have more.
func (st *Stream) waitDataLocked() error {
	for st.buffered == 0 {
		switch {
		case st.resetErr != nil:
			return fmt.Errorf("%w %w", ErrStreamReset, st.resetErr)
		case st.closed:
			return ErrStreamClosed
		case st.finRecv:
			return io.EOF
		case st.sessDone || st.sess.isClosed():
			// Closed, whether or not shutdown got to this stream yet.
			return st.sess.closeErr()
		}
		rd := st.rd.wait()
		if rd != nil && isClosed(rd) {
			return ErrTimeout
		}
		st.mu.Unlock()
		select {
		case <-st.readCh:
		case <-rd:
		case <-st.sess.closed:
		}
		st.mu.Lock()
	}
	return nil
}

// Read implements net.Conn.
func (st *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	st.mu.Lock()
	if err := st.waitDataLocked(); err != nil {
		st.mu.Unlock()
		return 0, err
	}
	n := 0
	for _, g := range st.segs {
		if n == len(p) {
			break
		}
		k := copy(p[n:], g.buf[g.r:g.w])
		g.r += k
		n += k
	}
	credit := st.consumedLocked(n)
	st.mu.Unlock()
	st.grant(credit)
	return n, nil
}

func (st *Stream) grant(credit uint32) {
	if credit > 0 {
		st.sess.queueStream(st, 0, credit)
	}
}

// WriteTo writes what the stream receives to w, from the stream's own
// segments (no copy of ours), until the peer's FIN (nil) or an error.
func (st *Stream) WriteTo(w io.Writer) (int64, error) {
	n, err := st.copyTo(w, -1)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// CopyTo writes exactly n received bytes to w as WriteTo does; a stream
// that ends before is io.ErrUnexpectedEOF.
func (st *Stream) CopyTo(w io.Writer, n int64) (int64, error) {
	k, err := st.copyTo(w, n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

func (st *Stream) copyTo(w io.Writer, n int64) (int64, error) {
	bw, gather := w.(BuffersWriter)
	var done int64
	for n != 0 {
		st.mu.Lock()
		if err := st.waitDataLocked(); err != nil {
			st.mu.Unlock()
			return done, err
		}
		// What is buffered, up to n, from as many segments as it spans
		// (one writev for a chunk that crosses a segment's end, where a
		// Write per segment would make two system calls), or the head
		// segment alone for a plain Writer.
		out, want := st.out[:0], 0
		for _, g := range st.segs {
			b := g.buf[g.r:g.w]
			if n > 0 && int64(want+len(b)) > n {
				b = b[:n-int64(want)]
			}
			if len(b) == 0 {
				continue // a head segment read to its end, not yet freed
			}
			out = append(out, b)
			want += len(b)
			if !gather || len(out) == maxGather || int64(want) == n {
				break
			}
		}
		st.reading = len(out)
		st.mu.Unlock()
		var k int
		var werr error
		if len(out) == 1 {
			k, werr = w.Write(out[0])
		} else {
			st.out = out
			var k64 int64
			k64, werr = bw.WriteBuffers(&st.out)
			k = int(k64)
		}
		st.mu.Lock()
		st.reading = 0
		var credit uint32
		if st.discarding() {
			st.dropSegsLocked()
		} else {
			for i, left := 0, k; left > 0; i++ {
				g := st.segs[i]
				d := min(left, g.w-g.r)
				g.r += d
				left -= d
			}
			credit = st.consumedLocked(k)
		}
		clear(out) // no segment stays reachable from st.out once released
		st.out = out[:0]
		st.mu.Unlock()
		st.grant(credit)
		done += int64(k)
		if n > 0 {
			n -= int64(k)
		}
		if werr != nil {
			return done, werr
		}
		if k < want {
			return done, io.ErrShortWrite
		}
	}
	return done, nil
}

// BuffersWriter is an io.Writer that also writes several buffers in one
// call (a writev: net.Buffers.WriteTo on a *net.TCPConn). CopyTo and
// WriteTo use it when the bytes they write out span segments.
type BuffersWriter interface {
	io.Writer
	// WriteBuffers writes all of *v (consuming it, as net.Buffers.WriteTo
	// does) and returns how many bytes it wrote.
	WriteBuffers(v *net.Buffers) (int64, error)
}

// maxGather bounds the segments one WriteBuffers call writes out.
const maxGather = 16

// --- writing ---

// Write implements net.Conn: each frame goes on the connection from this
// goroutine, the body copied once (into the connection's buffer).
func (st *Stream) Write(p []byte) (int, error) {
	s := st.sess
	var hdr [HeaderSize]byte
	done := 0
	for done < len(p) {
		st.mu.Lock()
		if err := st.writableLocked(); err != nil {
			st.mu.Unlock()
			return done, err
		}
		wd := st.wd.wait()
		if wd != nil && isClosed(wd) {
			st.mu.Unlock()
			return done, ErrTimeout
		}
		if st.sendWindow == 0 {
			st.mu.Unlock()
			select {
			case <-st.writeCh:
			case <-wd:
			case <-s.closed:
			}
			continue
		}
		k := min(len(p)-done, int(st.sendWindow), s.cfg.MaxFrameBody)
		st.sendWindow -= uint32(k)
		st.mu.Unlock()
		header{typ: typeData, stream: st.id, length: uint32(k)}.encode(hdr[:])
		if err := s.writeFrame(hdr[:], p[done:done+k], wd); err != nil {
			st.mu.Lock()
			st.sendWindow += uint32(k)
			st.mu.Unlock()
			return done, err
		}
		done += k
	}
	return done, nil
}

// CanFill reports whether Fill writes in place: the session's connection
// has a buffer to lend (the record layer's).
func (st *Stream) CanFill() bool { return st.sess.place != nil }

// Fill sends one Data frame whose body fill writes straight into the
// connection's buffer, behind room for the frame header, so the bytes are
// copied once (fill's socket read) rather than into the caller's buffer
// and again into the connection's. fill gets room for need to most bytes
// (less where the window or the connection's frame ends), must not block
// (every stream's writes wait for it), and returns how many it wrote; 0
// sends nothing. Fill waits for window and for the connection as Write
// does, so fill runs only once a frame could go out; the window it did not
// use goes back. Fill returns the body's length, and an error only if fill
// was not called. It needs CanFill.
func (st *Stream) Fill(need, most int, fill Filler) (int, error) {
	s := st.sess
	if s.place == nil {
		return 0, errors.New("mux: Fill on a connection that can not be written in place")
	}
	if need < 1 || most < need || need > s.cfg.MaxFrameBody {
		return 0, fmt.Errorf("mux: Fill of %d..%d bytes: want 1 ≤ need ≤ most, need ≤ %d", need, most, s.cfg.MaxFrameBody)
	}
	if st.filler.body != fill {
		st.filler = dataFiller{id: st.id, body: fill}
	}
	for {
		st.mu.Lock()
		if err := st.writableLocked(); err != nil {
			st.mu.Unlock()
			return 0, err
		}
		wd := st.wd.wait()
		if wd != nil && isClosed(wd) {
			st.mu.Unlock()
			return 0, ErrTimeout
		}
		if int(st.sendWindow) < need {
			st.mu.Unlock()
			select {
			case <-st.writeCh:
			case <-wd:
			case <-s.closed:
			}
			continue
		}
		k := min(most, int(st.sendWindow), s.cfg.MaxFrameBody)
		st.sendWindow -= uint32(k)
		st.mu.Unlock()
		n, err := s.fillFrame(&st.filler, need, k, wd)
		if n < k {
			st.mu.Lock()
			st.sendWindow += uint32(k - n)
			st.mu.Unlock()
		}
		return n, err
	}
}

// writableLocked is why the stream takes no more writes, if it does not.
func (st *Stream) writableLocked() error {
	s := st.sess
	switch {
	case st.resetErr != nil:
		return fmt.Errorf("%w %w", ErrStreamReset, st.resetErr)
	case st.writeErr != nil:
		return fmt.Errorf("%w %w", ErrStreamReset, st.writeErr)
	case st.finSent:
		return ErrStreamClosed
	case st.sessDone || s.isClosed():
		return s.closeErr()
	}
	return nil
}

// CloseWrite half-closes the stream: a FIN after what was written.
func (st *Stream) CloseWrite() error {
	st.mu.Lock()
	if st.finSent || st.dead() {
		st.mu.Unlock()
		return nil
	}
	st.finSent = true
	done := st.finRecv
	if !done && st.sess.cfg.StreamCloseTimeout > 0 {
		st.closeTimer = time.AfterFunc(st.sess.cfg.StreamCloseTimeout, st.closeTimedOut)
	}
	st.mu.Unlock()
	notify(st.writeCh)
	st.sess.queueStream(st, flagFIN, 0)
	if done {
		st.finish()
	}
	return nil
}

// Close half-closes the stream (CloseWrite) and stops receiving: what is
// buffered or still arrives is discarded, and reads fail. The stream is
// gone once the peer closes too.
func (st *Stream) Close() error {
	st.mu.Lock()
	st.closed = true
	st.dropSegsLocked()
	st.mu.Unlock()
	notify(st.readCh)
	return st.CloseWrite()
}

// Reset ends the stream at once at both ends (RST).
func (st *Stream) Reset() error {
	st.mu.Lock()
	if st.dead() {
		st.mu.Unlock()
		return nil
	}
	st.resetLocked(errLocalReset)
	st.mu.Unlock()
	st.sendReset()
	return nil
}

func (st *Stream) openTimedOut() {
	st.mu.Lock()
	if st.acked || st.dead() {
		st.mu.Unlock()
		return
	}
	st.resetLocked(errOpenTimeout)
	st.mu.Unlock()
	st.sendReset()
	st.sess.log.Warn("reset a stream the peer did not acknowledge", zap.Uint32("stream", st.id),
		zap.Duration("stream_open_timeout", st.sess.cfg.StreamOpenTimeout))
}

func (st *Stream) closeTimedOut() {
	st.mu.Lock()
	if st.finRecv || st.dead() {
		st.mu.Unlock()
		return
	}
	st.resetLocked(errCloseTimeout)
	st.mu.Unlock()
	st.sendReset()
}

// SetDeadline implements net.Conn.
func (st *Stream) SetDeadline(t time.Time) error {
	_ = st.SetReadDeadline(t)
	return st.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (st *Stream) SetReadDeadline(t time.Time) error {
	st.rd.set(t)
	notify(st.readCh)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (st *Stream) SetWriteDeadline(t time.Time) error {
	st.wd.set(t)
	notify(st.writeCh)
	return nil
}

// LocalAddr implements net.Conn.
func (st *Stream) LocalAddr() net.Addr { return st.addr(true) }

// RemoteAddr implements net.Conn.
func (st *Stream) RemoteAddr() net.Addr { return st.addr(false) }

func (st *Stream) addr(local bool) net.Addr {
	c, ok := st.sess.conn.(net.Conn)
	switch {
	case !ok:
		return streamAddr(st.id)
	case local:
		return c.LocalAddr()
	default:
		return c.RemoteAddr()
	}
}

type streamAddr uint32

func (streamAddr) Network() string  { return "mux" }
func (a streamAddr) String() string { return fmt.Sprintf("stream %d", uint32(a)) }

var _ net.Conn = (*Stream)(nil)
