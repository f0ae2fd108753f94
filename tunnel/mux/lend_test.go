package mux

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"testing"

	"github.com/offload-dev/offload/internal/testutil"
)

// lendPair is a client session on a plain pipe and a server session on a
// lending one (testutil.LendConn, as record.Conn lends): on a pipe each of
// the client's writes (a frame's header, then its body) is one read, so
// each Data body of up to 64 KiB arrives as one lent frame, in a buffer
// of size bytes (0: record's 64 KiB + 64).
func lendPair(t *testing.T, scfg *Config, size int) (*Session, *Session, *testutil.LendConn) {
	t.Helper()
	a, b := net.Pipe()
	lc := &testutil.LendConn{Conn: b, Size: size}
	c, err := Client(a, &Config{MaxFrameBody: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Server(lc, scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s, lc
}

// ownsWriter writes what it is given to a hash and counts the bytes it
// got as references into lc's frames.
type ownsWriter struct {
	lc       *testutil.LendConn
	h        io.Writer
	n, owned int
}

func (w *ownsWriter) Write(p []byte) (int, error) {
	if w.lc.Owns(p) {
		w.owned += len(p)
	}
	w.n += len(p)
	return w.h.Write(p)
}

func (w *ownsWriter) WriteBuffers(v *net.Buffers) (int64, error) {
	var n int64
	for _, b := range *v {
		k, err := w.Write(b)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	*v = (*v)[:0]
	return n, nil
}

// Bulk data on a lending connection reaches WriteTo's writer as the
// connection's own buffers, not copies, intact; every lease comes back.
func TestLentBulkNotCopied(t *testing.T) {
	c, s, lc := lendPair(t, nil, 0)
	const size = 4 << 20
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i*31 + i>>11)
	}
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = st.Write(payload)
		_ = st.CloseWrite()
	}()
	peer, err := s.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	w := &ownsWriter{lc: lc, h: h}
	if _, err := peer.WriteTo(w); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(payload); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("the data changed on the way (a piece used after its release?)")
	}
	if w.owned < size*9/10 {
		t.Errorf("%d of %d bytes reached the writer as lent buffers, want nearly all: the bulk bytes were copied", w.owned, size)
	}
	if n := lc.Outstanding(); n != 0 {
		t.Errorf("%d leases not released after the stream was read to its end", n)
	}
	if got := s.Buffered(); got != 0 {
		t.Errorf("session holds %d bytes after everything was read", got)
	}
}

// Small bodies are copied: a few bytes never keep a frame's buffer.
func TestLentSmallCopied(t *testing.T) {
	c, s, lc := lendPair(t, nil, 0)
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, err := st.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	peer, err := s.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	waitBuffered(t, peer, 1000)
	if lc.Lent.Load() == 0 {
		t.Fatal("nothing was lent: the test does not exercise the lending path")
	}
	if n := lc.Outstanding(); n != 0 {
		t.Errorf("%d leases kept for 10-byte bodies, want them copied", n)
	}
	if got := s.Buffered(); got > smallSegment {
		t.Errorf("1000 bytes buffered in %d bytes, want one small segment", got)
	}
}

// heldStream opens a stream whose peer does not read and sends it n bytes
// in 64 KiB bodies; it returns the peer's end once they are all held.
func heldStream(t *testing.T, c, s *Session, n int) *Stream {
	t.Helper()
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = st.Write(make([]byte, n)) }()
	peer, err := s.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	waitBuffered(t, peer, n)
	return peer
}

// The leases a stream holds come back on every way it can end without
// being read: a reset, a Close, the session's close.
func TestLentReleasedWhenUnread(t *testing.T) {
	for _, end := range []struct {
		name string
		do   func(st *Stream, s *Session)
	}{
		{"reset", func(st *Stream, _ *Session) { _ = st.Reset() }},
		{"close", func(st *Stream, _ *Session) { _ = st.Close() }},
		{"session close", func(_ *Stream, s *Session) { _ = s.Close() }},
	} {
		t.Run(end.name, func(t *testing.T) {
			c, s, lc := lendPair(t, nil, 0)
			peer := heldStream(t, c, s, InitialWindow)
			if lc.Outstanding() == 0 {
				t.Fatal("no lease held: the test does not exercise the lending path")
			}
			end.do(peer, s)
			if n := lc.Outstanding(); n != 0 {
				t.Errorf("%d leases kept after the stream ended", n)
			}
			if got := s.Buffered(); got != 0 {
				t.Errorf("session holds %d bytes after the stream ended", got)
			}
		})
	}
}

// A connection that fails inside a Data body: the piece of it already
// lent comes back as the session closes.
func TestLentReleasedOnCutMidFrame(t *testing.T) {
	a, b := net.Pipe()
	lc := &testutil.LendConn{Conn: b}
	s, err := Server(lc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() { _, _ = io.Copy(io.Discard, a) }()
	var h [HeaderSize]byte
	header{typ: typeWindowUpdate, flags: flagSYN, stream: 1}.encode(h[:])
	if _, err := a.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	header{typ: typeData, stream: 1, length: 64 << 10}.encode(h[:])
	if _, err := a.Write(h[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write(make([]byte, 40<<10)); err != nil { // the rest never comes
		t.Fatal(err)
	}
	eventually(t, func() bool { return lc.Outstanding() == 1 })
	_ = a.Close()
	<-s.CloseChan()
	_ = s.Close()
	if n := lc.Outstanding(); n != 0 {
		t.Errorf("%d leases kept after the connection failed mid-frame", n)
	}
	if s.Err() == nil {
		t.Error("the session ended without an error")
	}
}

// A reader that stops consuming: what its stream holds stays within the
// window in bytes and within the budget in memory (held), and the
// buffers kept beyond the bytes (pinned) within a quarter of the budget;
// past that, bodies are copied, not lent.
func TestLentPinnedBounded(t *testing.T) {
	const budget = 2 << 20
	cfg := &Config{ReceiveBudget: budget, MaxStreamWindow: 1 << 20}
	c, s, lc := lendPair(t, cfg, 112<<10) // each 64 KiB body keeps 48 KiB more than its bytes
	var peers []*Stream
	for range 4 {
		peers = append(peers, heldStream(t, c, s, InitialWindow))
	}
	if s.held.Load() > budget {
		t.Errorf("held %d, budget %d", s.held.Load(), budget)
	}
	if p := s.pinned.Load(); p > budget/4 || p == 0 {
		t.Errorf("pinned %d, want 1..%d", p, budget/4)
	}
	if got := s.Buffered(); got > budget+budget/4 {
		t.Errorf("Buffered %d, want at most 1.25x the budget %d", got, budget)
	}
	// 16 bodies of 64 KiB would pin 16 × 48 KiB; a quarter of the budget
	// (512 KiB) holds 10 of them: the rest were copied.
	if n := lc.Outstanding(); n != 10 {
		t.Errorf("%d leases held, want 10: lending past the pinned bound, or not at all", n)
	}
	for _, p := range peers {
		if _, err := io.CopyN(io.Discard, p, InitialWindow); err != nil {
			t.Fatal(err)
		}
	}
	if n := lc.Outstanding(); n != 0 {
		t.Errorf("%d leases kept after everything was read", n)
	}
	if s.held.Load() != 0 || s.pinned.Load() != 0 {
		t.Errorf("held %d, pinned %d after everything was read", s.held.Load(), s.pinned.Load())
	}
}

// Frames for a stream this end closed or never had are discarded on a
// lending connection as on any other, with no lease kept.
func TestLentDiscarded(t *testing.T) {
	c, s, lc := lendPair(t, nil, 0)
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	peer, err := s.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	_ = peer.Close()
	_, _ = st.Write(make([]byte, 128<<10)) // answered with an RST
	if _, err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ping(); err != nil { // everything sent before was read
		t.Fatal(err)
	}
	if n := lc.Outstanding(); n != 0 {
		t.Errorf("%d leases kept for discarded data", n)
	}
	if got := s.Buffered(); got != 0 {
		t.Errorf("session holds %d bytes of discarded data", got)
	}
}
