package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/mux"
)

// abortMarkerTimeout bounds how long an abort waits to put its marker on a
// stream whose window is full; then the stream is closed without it, which
// the peer reads as an abort too (no end marker).
const abortMarkerTimeout = time.Second

// closeWriter is a connection that can half-close (TCP).
type closeWriter interface {
	CloseWrite() error
}

// splicer copies between a local TCP connection and a stream (the chunk
// protocol of proto.go), in two goroutines: up (local → stream) and down
// (stream → local).
//
// Clean end: up read EOF from local and sent the end marker; down got the
// end marker and half-closed local (CloseWrite). When both happened, the
// stream and local are closed normally.
//
// Abort: anything else (local reset, stream ended early, peer's abort
// marker, link gone, protocol error). local is closed with a RST so its
// application sees an error; the peer gets an abort marker if the failure
// is on our side and the stream can still carry it, and the stream is
// closed. The marker is written by whichever goroutine owns the stream's
// write side at that moment, never in the middle of a chunk.
type splicer struct {
	local net.Conn
	st    *mux.Stream

	mu         sync.Mutex
	upRunning  bool // up may be writing to the stream
	upDone     bool // our end marker was sent
	downDone   bool // the peer's end marker arrived
	closed     bool // both done: closed cleanly
	endStarted bool // up is writing its end marker; endDone closes after
	endDone    chan struct{}
	aborted    bool
	wantMarker bool
	err        error

	up, down atomic.Int64 // payload bytes each way
	downW    localWriter  // down's writes to local

	// preDone is closed when pre has returned (at once without one): a
	// failed write to the stream waits for it (upWriteFailed).
	preDone chan struct{}
}

// localWriter writes to the local connection and keeps its error, so that
// a failed CopyTo tells a local failure from the stream's.
type localWriter struct {
	c   net.Conn
	err error
}

func (w *localWriter) Write(p []byte) (int, error) {
	n, err := w.c.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}

// WriteBuffers writes v with one writev where the connection has it
// (mux.BuffersWriter: a chunk that spans two receive segments goes out in
// one system call).
func (w *localWriter) WriteBuffers(v *net.Buffers) (int64, error) {
	n, err := v.WriteTo(w.c)
	if err != nil {
		w.err = err
	}
	return n, err
}

// Splice copies between local and st until both directions ended, and
// returns the payload bytes each way and nil for a clean end or the cause
// of the abort. pre, if not nil, runs first on the down side (the client
// reads the server's response there); its error aborts without a marker.
func Splice(local net.Conn, st *mux.Stream, pool *BufPool, pre func() error) (up, down int64, err error) {
	s := &splicer{local: local, st: st, upRunning: true, endDone: make(chan struct{}), preDone: make(chan struct{})}
	s.downW.c = local
	if pre == nil {
		close(s.preDone)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.copyUp(pool)
	}()
	s.copyDown(pre)
	<-done
	s.mu.Lock()
	err = s.err
	s.mu.Unlock()
	return s.up.Load(), s.down.Load(), err
}

func (s *splicer) copyUp(pool *BufPool) {
	var cb *copyBuf
	defer func() {
		if cb != nil {
			cb.release()
		}
	}()
	tc, bare := s.local.(*net.TCPConn)
	if bare && s.st.CanFill() {
		if pr, ok := newPlaceReader(tc); ok {
			s.copyUpInPlace(pr)
			return
		}
	}
	for {
		// A bare TCP connection is read so that an idle stream holds no
		// buffer (readIdle); a wrapper may hold bytes its socket no
		// longer has, so it is read as it is, with the buffer kept.
		var n int
		var rerr error
		if bare {
			n, rerr = readIdle(tc, &cb, pool)
		} else {
			if cb == nil {
				cb = pool.get()
			}
			n, rerr = s.local.Read(cb.data())
		}
		var buf []byte
		if cb != nil {
			buf = cb.b
		}
		if n > 0 {
			putChunkHeader(buf, uint32(n))
			w, werr := s.st.Write(buf[:ChunkHeader+n])
			if werr != nil {
				s.upWriteFailed("writing to the stream", werr, w > 0)
				return
			}
			s.up.Add(int64(n))
			cb.adapt(n)
		}
		if errors.Is(rerr, io.EOF) {
			s.sendEnd()
			return
		}
		if rerr != nil {
			s.abort(fmt.Errorf("%w: reading the local connection: %w", ErrAborted, rerr), true)
			s.upExit(false, false)
			return
		}
	}
}

// copyUpInPlace is copyUp for a bare TCP connection over the record
// layer: each chunk is read from the socket straight into the frame that
// will carry it (mux Stream.Fill), behind room for the frame's headers, so
// a byte is copied once on its way in and the stream holds no buffer of
// its own. The read inside Fill never waits (every stream's writes wait
// for it); when the socket has nothing, up waits outside, holding nothing.
func (s *splicer) copyUpInPlace(pr *placeReader) {
	for {
		n, werr := s.st.Fill(ChunkHeader+1, ChunkHeader+MaxChunk, pr)
		if werr != nil {
			// Fill failed before its read: nothing of a chunk was sent.
			s.upWriteFailed("writing to the stream", werr, false)
			return
		}
		if n > 0 {
			s.up.Add(int64(n - ChunkHeader))
			if !pr.short {
				continue // more is likely there: read it at once
			}
			// A read that did not fill its room most likely emptied the
			// socket: wait before the next one rather than pay for a
			// read that finds nothing (its system calls are the old
			// copy path's: one peek where that had a failed read).
		}
		switch {
		case n > 0 || errors.Is(pr.err, errNoData):
			if err := pr.wait(); err != nil {
				s.abort(fmt.Errorf("%w: reading the local connection: %w", ErrAborted, err), true)
				s.upExit(false, false)
				return
			}
		case errors.Is(pr.err, io.EOF):
			s.sendEnd()
			return
		default:
			s.abort(fmt.Errorf("%w: reading the local connection: %w", ErrAborted, pr.err), true)
			s.upExit(false, false)
			return
		}
	}
}

// upWriteFailed ends up after a failed write to the stream (partial:
// some of it was written). A peer that refuses a stream answers,
// closes, and resets the stream when our first bytes reach it (mux answers
// data for a closed stream so), and our write can fail before down has
// read that answer: down's pre goes first, so that the refusal with its
// reason, not our failed write, is the cause. pre does not wait long here:
// a reset reaches it at once, and the answer came before the reset.
func (s *splicer) upWriteFailed(what string, werr error, partial bool) {
	<-s.preDone
	s.abort(fmt.Errorf("%w: %s: %w", ErrAborted, what, werr), false)
	s.upExit(partial, false)
}

// sendEnd sends up's end marker after the local connection's EOF.
func (s *splicer) sendEnd() {
	s.mu.Lock()
	s.endStarted = true
	s.mu.Unlock()
	defer close(s.endDone)
	var end [ChunkHeader]byte
	putChunkHeader(end[:], chunkEnd)
	if w, werr := s.st.Write(end[:]); werr != nil {
		s.upWriteFailed("writing the end marker", werr, w > 0)
		return
	}
	s.upExit(false, true)
}

func (s *splicer) copyDown(pre func() error) {
	if pre != nil {
		err := pre()
		if err != nil {
			s.abort(err, false)
		}
		close(s.preDone)
		if err != nil {
			return
		}
	}
	var hdr [ChunkHeader]byte
	for {
		if _, err := io.ReadFull(s.st, hdr[:]); err != nil {
			s.streamEnded(err)
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		switch {
		case n == chunkAbort:
			s.abort(fmt.Errorf("%w by the other end", ErrAborted), false)
			return
		case s.isDownDone():
			s.abort(fmt.Errorf("%w: data after the end marker", ErrBadRequest), true)
			return
		case n == chunkEnd:
			if cw, ok := s.local.(closeWriter); ok {
				if err := cw.CloseWrite(); err != nil {
					s.abort(fmt.Errorf("%w: half-closing the local connection: %w", ErrAborted, err), true)
					return
				}
			}
			s.downExit()
			continue
		case n > MaxChunk:
			s.abort(fmt.Errorf("%w: chunk of %d bytes (max %d)", ErrBadRequest, n, MaxChunk), true)
			return
		}
		// The chunk goes from the stream's receive segments straight to
		// the local connection: no buffer of ours, no copy.
		k, err := s.st.CopyTo(&s.downW, int64(n))
		s.down.Add(k)
		if err != nil {
			if s.downW.err != nil {
				s.abort(fmt.Errorf("%w: writing the local connection: %w", ErrAborted, s.downW.err), true)
				return
			}
			s.streamEnded(err)
			return
		}
	}
}

func (s *splicer) isDownDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.downDone
}

// streamEnded handles a failed stream read: the end of a clean close, or
// a stream that stopped before it was complete.
func (s *splicer) streamEnded(err error) {
	s.mu.Lock()
	if s.closed || s.aborted {
		s.mu.Unlock()
		return
	}
	down := s.downDone
	if down && s.endStarted {
		// The peer may have closed because our end marker reached it
		// before up recorded that it was sent: wait for up's verdict.
		s.mu.Unlock()
		<-s.endDone
		s.mu.Lock()
		if s.closed || s.aborted {
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	cause := "the stream ended before its end marker"
	if down {
		cause = "the other end closed the stream before ours was complete"
	}
	if s.st.Session().IsClosed() {
		cause += " (link closed)"
	}
	s.abort(fmt.Errorf("%w: %s: %w", ErrAborted, cause, err), false)
}

// abort ends the splice with err (the first cause wins): local is reset,
// the stream closed, after an abort marker if marker is set.
func (s *splicer) abort(err error, marker bool) {
	s.mu.Lock()
	if s.closed || s.aborted {
		s.mu.Unlock()
		return
	}
	s.aborted = true
	s.err = err
	s.wantMarker = marker
	upRunning := s.upRunning
	s.mu.Unlock()

	netguard.Reset(s.local)
	_ = s.st.SetReadDeadline(aLongTimeAgo)
	if upRunning {
		// up owns the write side: bound a Write blocked on the window;
		// up sends the marker (or not) and closes the stream on exit.
		_ = s.st.SetWriteDeadline(time.Now().Add(abortMarkerTimeout))
		return
	}
	s.finishAbort(marker)
}

// finishAbort writes the abort marker if wanted and closes the stream. Only
// the owner of the stream's write side calls it.
func (s *splicer) finishAbort(marker bool) {
	if marker {
		_ = s.st.SetWriteDeadline(time.Now().Add(abortMarkerTimeout))
		var m [ChunkHeader]byte
		putChunkHeader(m[:], chunkAbort)
		_, _ = s.st.Write(m[:])
	}
	_ = s.st.Close()
}

// upExit is called once by up when it stops: after its end marker (ok) or
// not; partial says a chunk was cut short, so no marker may follow.
func (s *splicer) upExit(partial, ok bool) {
	s.mu.Lock()
	s.upRunning = false
	if s.aborted {
		marker := s.wantMarker && !partial
		s.mu.Unlock()
		s.finishAbort(marker)
		return
	}
	if !ok {
		// up failed: it called abort first, so this is not reached.
		s.mu.Unlock()
		return
	}
	s.doneLocked(&s.upDone)
}

// downExit records the peer's end marker.
func (s *splicer) downExit() {
	s.mu.Lock()
	if s.aborted {
		s.mu.Unlock()
		return
	}
	s.doneLocked(&s.downDone)
}

// doneLocked marks one direction complete (s.mu held; it unlocks) and
// closes both sides cleanly once the other is complete too.
func (s *splicer) doneLocked(dir *bool) {
	*dir = true
	both := s.upDone && s.downDone
	if both {
		s.closed = true
	}
	s.mu.Unlock()
	if both {
		s.closeClean()
	}
}

// closeClean closes both sides after both directions completed. down is
// still reading (for an abort marker or the FIN); the read deadline stops
// it.
func (s *splicer) closeClean() {
	_ = s.local.Close()
	_ = s.st.Close()
	_ = s.st.SetReadDeadline(aLongTimeAgo)
}

// AnswerSplice answers OK on st, the stream conn was just dialled for,
// and splices the two, counting the stream in active meanwhile.
func AnswerSplice(st *mux.Stream, conn net.Conn, pool *BufPool, active *atomic.Int64) (up, down int64, err error) {
	if _, err := st.Write(AppendResponse(nil, StatusOK, "")); err != nil {
		// The link died while we dialled: the target must see a reset, as
		// on every other cut, not a clean end after 0 bytes.
		netguard.Reset(conn)
		_ = st.Close()
		return 0, 0, fmt.Errorf("%w: answering the stream: %w", ErrAborted, err)
	}
	active.Add(1)
	defer active.Add(-1)
	return Splice(conn, st, pool, nil)
}

// aLongTimeAgo is a deadline in the past, to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)
