package resume

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// tcpPair is a connected pair of loopback TCP connections.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// session is two Conns on one link, with their detach events.
type session struct {
	a, b       *Conn
	aDet, bDet chan error
	la, lb     net.Conn // the links as the cuts close them
	wrap       func(net.Conn) net.Conn
}

func newSession(t *testing.T, bound int) *session {
	t.Helper()
	return newWrappedSession(t, bound, nil)
}

// newWrappedSession is newSession with each link as wrap makes it (nil:
// as it is) on its way to the Conns.
func newWrappedSession(t *testing.T, bound int, wrap func(net.Conn) net.Conn) *session {
	t.Helper()
	if wrap == nil {
		wrap = func(c net.Conn) net.Conn { return c }
	}
	s := &session{aDet: make(chan error, 64), bDet: make(chan error, 64), wrap: wrap}
	s.la, s.lb = tcpPair(t)
	var err error
	s.a, err = New(wrap(s.la), Config{Bound: bound, PeerBound: bound, OnDetach: func(e error) { s.aDet <- e }})
	if err != nil {
		t.Fatal(err)
	}
	s.b, err = New(wrap(s.lb), Config{Bound: bound, PeerBound: bound, OnDetach: func(e error) { s.bDet <- e }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.a.Close(); s.b.Close() })
	return s
}

// cut drops the link as a dying path does (both sockets closed under the
// Conns), waits until both noticed, and attaches a new link the way the
// tunnel does: each end says what it received, the other resends the rest.
func (s *session) cut(t *testing.T) {
	t.Helper()
	_ = s.la.Close()
	_ = s.lb.Close()
	// A Conn notices when it next touches the link; a Conn whose
	// reader is waiting notices at once (the close fails its Read).
	for _, ch := range []chan error{s.aDet, s.bDet} {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatal("a cut link was not noticed")
		}
	}
	s.reattach(t)
}

// resumeUnnoticed is a resumption that reaches an end whose old link has
// not failed there (a server that has not noticed the client's path
// died): that end cuts the old link with Detach, and only then says what
// it received, while bytes keep arriving on it; the other end attaches.
func (s *session) resumeUnnoticed(t *testing.T) {
	t.Helper()
	s.a.Detach(errors.New("resumed on a new link"))
	s.b.Detach(errors.New("resumed on a new link"))
	// The old sockets are closed by Detach; their events, if any,
	// belong to no link now.
	for _, ch := range []chan error{s.aDet, s.bDet} {
		select {
		case <-ch:
		default:
		}
	}
	s.reattach(t)
}

func (s *session) reattach(t *testing.T) {
	t.Helper()
	s.la, s.lb = tcpPair(t)
	ra, rb := s.a.Received(), s.b.Received()
	if err := s.a.Attach(s.wrap(s.la), rb); err != nil {
		t.Fatal(err)
	}
	if err := s.b.Attach(s.wrap(s.lb), ra); err != nil {
		t.Fatal(err)
	}
}

// pump writes n random bytes to w in writes of varied sizes and returns
// their sha256.
func pump(w io.Writer, n int, seed byte) ([32]byte, error) {
	h := sha256.New()
	buf := make([]byte, 100<<10)
	size := 1
	for n > 0 {
		m := min(n, size)
		_, _ = rand.Read(buf[:m])
		buf[0] = seed
		h.Write(buf[:m])
		if _, err := w.Write(buf[:m]); err != nil {
			return [32]byte{}, err
		}
		n -= m
		size = size*7%len(buf) + 1
	}
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out, nil
}

// drain reads n bytes from r, calling at(k) after each read with the
// total so far, and sends their sha256 on sum; then it goes on reading, as
// a session's reader does, so that this end notices cuts, and reports any
// byte past n (a repeated byte, or a marker) on extra until r fails.
func drain(r io.Reader, n int, at func(int), sum chan<- [32]byte, extra chan<- []byte) {
	h := sha256.New()
	buf := make([]byte, 37<<10)
	got := 0
	for {
		m, err := r.Read(buf)
		if got < n {
			h.Write(buf[:min(m, n-got)])
		}
		if got+m > n {
			extra <- append([]byte(nil), buf[max(0, n-got):m]...)
		}
		before := got
		got += m
		if m > 0 && at != nil {
			at(got)
		}
		if before < n && got >= n {
			var out [32]byte
			copy(out[:], h.Sum(nil))
			sum <- out
		}
		if err != nil {
			if got < n {
				sum <- [32]byte{}
			}
			return
		}
	}
}

// TestCutsKeepEveryByte sends 8 MiB each way while the link is cut 20
// times, each cut triggered by the receiver's progress (no timing): both
// directions arrive whole, no byte lost or repeated (sha256).
func TestCutsKeepEveryByte(t *testing.T) {
	testCutsKeepEveryByte(t, newSession(t, 256<<10), func(c *Conn) io.Writer { return c }, nil)
}

// TestLentCutsKeepEveryByte is TestCutsKeepEveryByte on links that lend
// what they read (testutil.LendConn, as record.Conn does), read with
// ReadLent: the pieces that arrive make up the stream whole across the
// cuts (a piece of a link detached meanwhile is released and comes again
// on the next), and every lease comes back.
func TestLentCutsKeepEveryByte(t *testing.T) {
	var mu sync.Mutex
	var links []*testutil.LendConn
	s := newWrappedSession(t, 256<<10, func(c net.Conn) net.Conn {
		l := &testutil.LendConn{Conn: c}
		mu.Lock()
		links = append(links, l)
		mu.Unlock()
		return l
	})
	testCutsKeepEveryByte(t, s, func(c *Conn) io.Writer { return c }, func(c *Conn) io.Reader { return lentReader{c} })
	s.a.Close()
	s.b.Close()
	mu.Lock()
	defer mu.Unlock()
	var lent int64
	for _, l := range links {
		lent += l.LentBytes.Load()
		waitFor(t, func() bool { return l.Outstanding() == 0 })
	}
	if lent < 2*8<<20 {
		t.Errorf("%d bytes lent, want at least the 16 MiB sent: the links' lending was not used", lent)
	}
}

// lentReader reads through ReadLent, copying each piece out and releasing
// it at once.
type lentReader struct{ c *Conn }

func (r lentReader) Read(p []byte) (int, error) {
	b, l, err := r.c.ReadLent(len(p))
	n := copy(p, b)
	if l != nil {
		l.Release()
	}
	return n, err
}

// TestInPlaceCutsKeepEveryByte is TestCutsKeepEveryByte with the bytes
// written in place (WriteInPlace, as the mux's Stream.Fill does), in
// fills of varied sizes, some of nothing, mixed with Writes: chunks end
// part-filled and the last one is filled while acks and flushes run.
func TestInPlaceCutsKeepEveryByte(t *testing.T) {
	testCutsKeepEveryByte(t, newSession(t, 256<<10), func(c *Conn) io.Writer { return &inPlace{c: c} }, nil)
}

// inPlace writes through WriteInPlace: each fill copies up to a size that
// varies (0 now and then, which adds nothing), and every fifth write goes
// through Write.
type inPlace struct {
	c     *Conn
	p     []byte
	size  int
	calls int
}

func (w *inPlace) Fill(b []byte) int {
	w.size = w.size*5%9000 + 1
	if w.size%11 == 0 {
		return 0
	}
	return copy(b, w.p[:min(len(w.p), w.size)])
}

func (w *inPlace) Write(p []byte) (int, error) {
	if w.calls++; w.calls%5 == 0 {
		return w.c.Write(p)
	}
	total := 0
	for len(p) > 0 {
		w.p = p
		n, err := w.c.WriteInPlace(1, len(p), w)
		total += n
		if err != nil {
			return total, err
		}
		p = p[n:]
	}
	return total, nil
}

// testCutsKeepEveryByte runs the transfer on s, written through writer
// and read through reader (nil: Read).
func testCutsKeepEveryByte(t *testing.T, s *session, writer func(*Conn) io.Writer, reader func(*Conn) io.Reader) {
	const size, cuts = 8 << 20, 20
	if reader == nil {
		reader = func(c *Conn) io.Reader { return c }
	}
	progress := make(chan int, 1024)
	var wg sync.WaitGroup
	var sumAB, sumBA [32]byte
	var errs [2]error
	gotAB, gotBA := make(chan [32]byte, 2), make(chan [32]byte, 2)
	extraAB, extraBA := make(chan []byte, 64), make(chan []byte, 64)
	wg.Add(2)
	go func() { defer wg.Done(); sumAB, errs[0] = pump(writer(s.a), size, 'a') }()
	go func() { defer wg.Done(); sumBA, errs[1] = pump(writer(s.b), size, 'b') }()
	next := size / (cuts + 1)
	go drain(reader(s.b), size, func(k int) {
		if k >= next {
			next += size / (cuts + 1)
			progress <- k
		}
	}, gotAB, extraAB)
	go drain(reader(s.a), size, nil, gotBA, extraBA)
	for i := range cuts {
		select {
		case <-progress:
		case <-time.After(time.Minute):
			t.Fatalf("cut %d: no progress", i)
		}
		if i%2 == 0 {
			s.cut(t)
		} else {
			s.resumeUnnoticed(t)
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
	}
	ab, ba := <-gotAB, <-gotBA
	// One more cut, then a marker each way: a repeated tail would come
	// before it, so the bytes past the transfer must be the marker alone.
	s.cut(t)
	for _, x := range []struct {
		w     io.Writer
		extra chan []byte
	}{{s.a, extraAB}, {s.b, extraBA}} {
		if _, err := x.w.Write([]byte("END")); err != nil {
			t.Fatal(err)
		}
		var past []byte
		for len(past) < 3 {
			past = append(past, <-x.extra...)
		}
		if string(past) != "END" {
			t.Fatalf("past the transfer: %q, want the marker alone (bytes repeated)", past)
		}
	}
	if sumAB != ab || sumBA != ba {
		t.Fatal("bytes lost or repeated across the cuts")
	}
}

// TestCutWhileDetachedWrites: bytes written while no link is attached are
// kept and go out on the next link, and Write does not fail.
func TestCutWhileDetachedWrites(t *testing.T) {
	s := newSession(t, 128<<10)
	// No reader runs here to notice a cut: the owner cuts (Detach).
	s.a.Detach(errors.New("cut"))
	s.b.Detach(errors.New("cut"))
	msg := bytes.Repeat([]byte("kept while detached "), 1000)
	if n, err := s.a.Write(msg); err != nil || n != len(msg) {
		t.Fatalf("Write while detached: %d, %v", n, err)
	}
	if k := s.a.State().Kept; k != len(msg) {
		t.Fatalf("kept %d bytes, want %d", k, len(msg))
	}
	s.reattach(t)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s.b, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("after reattach: %v, equal %v", err, bytes.Equal(got, msg))
	}
}

// TestBoundRespected: a peer that does not read never lets a writer keep
// more than Bound bytes; Write blocks there until the peer reads.
func TestBoundRespected(t *testing.T) {
	testBoundRespected(t, func(c *Conn) io.Writer { return c })
}

// TestInPlaceBoundRespected: WriteInPlace lends no room past Bound and
// waits at it until the peer reads.
func TestInPlaceBoundRespected(t *testing.T) {
	testBoundRespected(t, func(c *Conn) io.Writer { return &inPlace{c: c} })
}

func testBoundRespected(t *testing.T, writer func(*Conn) io.Writer) {
	const bound = 128 << 10
	s := newSession(t, bound)
	go io.Copy(io.Discard, s.a) // acks arrive through Read, as yamux's reader calls it
	done := make(chan error, 1)
	go func() {
		_, err := writer(s.a).Write(make([]byte, 3*bound))
		done <- err
	}()
	waitFor(t, func() bool { return s.a.State().Sent == bound })
	select {
	case err := <-done:
		t.Fatalf("Write of 3 bounds returned (%v) with the peer not reading", err)
	default:
	}
	if k := s.a.State().Kept; k != bound {
		t.Fatalf("kept %d, want the bound %d", k, bound)
	}
	// The peer reads: acks free the kept bytes and the write completes.
	if _, err := io.ReadFull(s.b, make([]byte, 3*bound)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The reader acks at a share of the bound (1/ackShare, less than a
	// quarter): at most a quarter is kept now that all was read.
	waitFor(t, func() bool { return s.a.State().Kept <= bound/4 })
	if k := s.a.State().Kept; k > bound {
		t.Fatalf("kept %d past the bound %d", k, bound)
	}
}

// TestKeepaliveAcksEverything: an idle end acks what it received at each
// keepalive, so nothing stays kept.
func TestKeepaliveAcksEverything(t *testing.T) {
	la, lb := tcpPair(t)
	a, _ := New(la, Config{Bound: MinBound, PeerBound: MinBound, Keepalive: 20 * time.Millisecond, Timeout: time.Hour})
	b, _ := New(lb, Config{Bound: MinBound, PeerBound: MinBound, Keepalive: 20 * time.Millisecond, Timeout: time.Hour})
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, a)
	if _, err := a.Write([]byte("small")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(b, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return a.State().Kept == 0 })
}

// TestSilentLinkDetaches: a peer that sends nothing (not even acks) for
// Timeout is a dead link: OnDetach, not the end of the session.
func TestSilentLinkDetaches(t *testing.T) {
	la, lb := tcpPair(t)
	defer lb.Close()
	det := make(chan error, 1)
	a, _ := New(la, Config{Bound: MinBound, PeerBound: MinBound, Keepalive: 10 * time.Millisecond, Timeout: 50 * time.Millisecond,
		OnDetach: func(err error) { det <- err }})
	defer a.Close()
	if err := <-det; !errors.Is(err, ErrSilent) {
		t.Fatalf("detached with %v, want ErrSilent", err)
	}
	if a.Err() != nil || a.State().Attached {
		t.Fatalf("session ended (%v) or still attached", a.Err())
	}
}

// TestHeardOnTheMonotonicClock: silence is judged on the monotonic clock,
// so a wall clock stepped forward (a router's first NTP answer after boot)
// is not taken for a silent peer. time.Time carries a monotonic reading
// only when it came from time.Now (its String shows "m="); a heard time
// rebuilt from Unix nanoseconds has none, and time.Since would measure
// the step.
func TestHeardOnTheMonotonicClock(t *testing.T) {
	la, lb := tcpPair(t)
	defer lb.Close()
	a, _ := New(la, Config{Bound: MinBound, PeerBound: MinBound, Keepalive: time.Hour, Timeout: time.Hour})
	defer a.Close()
	if at := a.heardAt(); !strings.Contains(at.String(), " m=") {
		t.Fatalf("heard at %v: no monotonic reading", at)
	}
}

// TestAttachLost: a peer that claims to have received bytes this end
// never sent, or to lack bytes it acknowledged, ends the session.
func TestAttachLost(t *testing.T) {
	s := newSession(t, 128<<10)
	if _, err := s.a.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(s.b, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	s.a.Detach(errors.New("test"))
	l1, l2 := tcpPair(t)
	defer l2.Close()
	if err := s.a.Attach(l1, 11); !errors.Is(err, ErrLost) {
		t.Fatalf("attach past what was sent: %v, want ErrLost", err)
	}
	if _, err := s.a.Write([]byte("x")); !errors.Is(err, ErrLost) {
		t.Fatalf("write after a lost session: %v", err)
	}
}

// TestBadAckEndsSession: an ack beyond what was sent is a protocol error.
func TestBadAckEndsSession(t *testing.T) {
	la, lb := tcpPair(t)
	defer lb.Close()
	a, _ := New(la, Config{Bound: MinBound, PeerBound: MinBound})
	var f [9]byte
	f[0] = typeAck
	binary.BigEndian.PutUint64(f[1:], 1)
	if _, err := lb.Write(f[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("read after a bad ack: %v, want ErrProtocol", err)
	}
	for _, frame := range [][]byte{{typeData, 0, 0, 0, 0}, {typeData, 0, 1, 0, 1}, {0x7f}} {
		la, lb := tcpPair(t)
		a, _ := New(la, Config{Bound: MinBound, PeerBound: MinBound})
		_, _ = lb.Write(frame)
		if _, err := a.Read(make([]byte, 1)); !errors.Is(err, ErrProtocol) {
			t.Fatalf("frame %x: %v, want ErrProtocol", frame, err)
		}
		lb.Close()
	}
}

// TestCloseFreesAndEnds: CloseWithError frees what is kept and every
// blocked call returns the error.
func TestCloseFreesAndEnds(t *testing.T) {
	s := newSession(t, MinBound)
	done := make(chan error, 2)
	go func() { _, err := s.a.Write(make([]byte, 2*MinBound)); done <- err }()
	go func() { _, err := s.a.Read(make([]byte, 1)); done <- err }()
	waitFor(t, func() bool { return s.a.State().Kept == MinBound })
	why := errors.New("resume window over")
	s.a.CloseWithError(why)
	for range 2 {
		if err := <-done; !errors.Is(err, why) {
			t.Fatalf("blocked call returned %v, want the close reason", err)
		}
	}
	if k := s.a.State().Kept; k != 0 {
		t.Fatalf("kept %d after close", k)
	}
}

func TestChunksSlice(t *testing.T) {
	var k chunks
	data := make([]byte, 200<<10)
	_, _ = rand.Read(data)
	k.add(data[:70<<10])
	k.add(data[70<<10:])
	k.drop(1000)
	for _, r := range [][2]int{{0, 10}, {0, len(data) - 1000}, {65000, 140000}, {64<<10 - 1000, 64<<10 - 999}} {
		var got []byte
		for _, s := range k.slice(r[0], r[1]) {
			got = append(got, s...)
		}
		if !bytes.Equal(got, data[1000+r[0]:1000+r[1]]) {
			t.Fatalf("slice %v wrong", r)
		}
	}
}

// TestChunksRecycled: chunks an ack frees go back to the pool whether or
// not they were full, and the last chunk, partly filled and wholly
// acknowledged, stays to be written on.
func TestChunksRecycled(t *testing.T) {
	var k chunks
	k.add(make([]byte, 1000))
	k.room(100, 1<<20) // more than the tail: a new chunk, the first left part-filled
	k.commit(500)
	k.drop(1200)
	if len(k.free) != 1 || len(k.bufs) != 1 || k.off != 200 {
		t.Fatalf("after an ack past a part-filled chunk: %d freed, %d kept, off %d; want 1, 1, 200", len(k.free), len(k.bufs), k.off)
	}
	k.drop(300)
	if len(k.free) != 1 || len(k.bufs) != 1 || k.off != 500 {
		t.Fatalf("after acking all: %d freed, %d kept, off %d; want the last chunk kept at 500", len(k.free), len(k.bufs), k.off)
	}
	room := k.room(1, 1)
	if len(room) != chunkSize-500 {
		t.Fatalf("room %d after the kept chunk's 500 bytes, want %d", len(room), chunkSize-500)
	}
	k.commit(10)
	if s := k.slice(0, 10); len(s) != 1 || len(s[0]) != 10 {
		t.Fatalf("slice of the 10 committed bytes: %d parts", len(s))
	}
}

// waitFor polls cond (state that moves only forward) with a bound far
// beyond any machine's need; it synchronises on the state, not on time.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in a minute")
		}
		time.Sleep(time.Millisecond)
	}
}
