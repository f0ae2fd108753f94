package resume

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestWatchStep drives the stall detector with its own clock: a download
// that goes silent draws one probe; an answer ends it; an upload whose
// probe is not answered stalls once; an idle link is left alone; a slow
// answer stretches the next wait; a new link starts afresh.
func TestWatchStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := watch{limit: time.Second}
	unacked := false
	step := func(now, heard, moved int, wantProbe, wantStall bool) {
		t.Helper()
		p, s := w.step(at(now), at(heard), true, 1, uint64(moved), unacked)
		if p != wantProbe || s != wantStall {
			t.Fatalf("at %d ms (heard %d, moved %d): probe %v stall %v, want %v %v", now, heard, moved, p, s, wantProbe, wantStall)
		}
	}
	w.step(at(0), at(0), true, 1, 0, false) // attached: a fresh watch
	// Idle: nothing moved, silence for ever is fine.
	step(500, 0, 0, false, false)
	step(5000, 0, 0, false, false)
	// Download: bytes arrive (heard), then silence.
	step(5250, 5250, 100, false, false)
	step(5500, 5500, 200, false, false)
	step(6250, 5500, 200, false, false)
	step(6500, 5500, 200, true, false) // a second of silence after use: probe
	step(6750, 5500, 200, false, false)
	step(6800, 6550, 200, false, false) // answered after 50 ms
	step(9000, 6550, 200, false, false) // idle again: no second probe
	// Upload into a dead path: written, nothing heard.
	step(9250, 6550, 300, true, false) // written long after the last frame heard: probe
	step(10000, 6550, 300, false, false)
	step(10349, 6550, 300, false, false) // limit + 2 × 50 ms not yet over
	step(10350, 6550, 300, false, true)  // stall
	step(12000, 6550, 300, false, false) // reported once
	// The path answers again: the watch rearms.
	step(12250, 12250, 400, false, false)
	step(13250, 12250, 400, true, false)
	step(13300, 13290, 400, false, false)
	// A slow answer (800 ms) stretches the wait for the next one.
	step(13600, 13290, 500, false, false)
	step(14290, 13290, 500, true, false)
	step(15090, 15090, 500, false, false) // answered after 800 ms
	step(15100, 15090, 600, false, false)
	step(16100, 15090, 600, true, false)
	step(17100, 15090, 600, false, false)
	step(18699, 15090, 600, false, false)
	step(18700, 15090, 600, false, true) // 1 s + 2 × 800 ms after the probe
	// That stall was an outage: the first frame after it comes 27 s
	// later, which is the path's return, not a round trip.
	step(46000, 46000, 1100, false, false)
	step(47000, 46000, 1200, true, false)
	step(49599, 46000, 1200, false, false)
	step(49600, 46000, 1200, false, true) // still 1 s + 2 × 800 ms after the probe
	// Detached, then a new link: no stale probe or stall.
	if p, s := w.step(at(49800), at(46000), false, 2, 600, true); p || s {
		t.Fatal("a detached link probed or stalled")
	}
	if p, s := w.step(at(49500), at(48000), true, 3, 600, false); p || s {
		t.Fatal("a new link with nothing moved probed or stalled")
	}
	// Resent bytes wait for their ack on the new link: probe.
	if p, _ := w.step(at(49750), at(48000), true, 3, 600, true); !p {
		t.Fatal("unacknowledged bytes on a silent link drew no probe")
	}
}

// TestSilentPeerStalls: bytes written on a link from which nothing comes
// back (the path went away under an open socket) draw a probe and then
// OnStall; the link stays attached (the owner dials a new one alongside).
// Without the watch, nothing reports the silence (Keepalive is off).
func TestSilentPeerStalls(t *testing.T) {
	la, lb := tcpPair(t)
	defer lb.Close()
	stalled := make(chan struct{}, 8)
	a, err := New(la, Config{Bound: MinBound, PeerBound: MinBound, Probe: 20 * time.Millisecond,
		OnStall: func() { stalled <- struct{}{} }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Write([]byte("into the void")); err != nil {
		t.Fatal(err)
	}
	<-stalled
	if !a.State().Attached || a.Err() != nil {
		t.Fatalf("a stall detached (%v) or ended (%v) the session", a.State().Attached, a.Err())
	}
	// What reached the silent end: the data, then a probe.
	b := make([]byte, 5+13+1)
	if _, err := io.ReadFull(lb, b); err != nil {
		t.Fatal(err)
	}
	if b[0] != typeData || b[len(b)-1] != typeProbe {
		t.Fatalf("the peer got % x, want a data frame and a probe", b)
	}
}

// TestProbeAnswered: a probe is answered with an ack at once, without
// waiting for Keepalive or a share of the bound.
func TestProbeAnswered(t *testing.T) {
	la, lb := tcpPair(t)
	defer lb.Close()
	a, err := New(la, Config{Bound: MinBound, PeerBound: MinBound})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	go io.Copy(io.Discard, a)
	if _, err := lb.Write([]byte{typeData, 0, 0, 0, 3, 'a', 'b', 'c', typeProbe}); err != nil {
		t.Fatal(err)
	}
	ack := make([]byte, 9)
	if _, err := io.ReadFull(lb, ack); err != nil {
		t.Fatal(err)
	}
	if ack[0] != typeAck || ack[8] != 3 {
		t.Fatalf("answer % x, want an ack of 3 bytes", ack)
	}
}

// TestEndTellsPeer: End ends the peer's side at once with ErrEnded, not
// a detach waiting for a new link.
func TestEndTellsPeer(t *testing.T) {
	s := newSession(t, MinBound)
	go io.Copy(io.Discard, s.b)
	s.a.End()
	<-s.b.Done()
	if !errors.Is(s.b.Err(), ErrEnded) {
		t.Fatalf("peer ended with %v, want ErrEnded", s.b.Err())
	}
	select {
	case err := <-s.bDet:
		t.Fatalf("peer detached (%v) instead of ending", err)
	default:
	}
}

// gatedLink holds the first write after arm inside the link, as a flush
// or an ack on a busy link does (holding lmu), until release or until its
// deadline is put in the past (a cut link's).
type gatedLink struct {
	net.Conn
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	cutOnce sync.Once
	cut     chan struct{}
}

func newGatedLink(c net.Conn) *gatedLink {
	return &gatedLink{Conn: c, entered: make(chan struct{}), release: make(chan struct{}), cut: make(chan struct{})}
}

func (g *gatedLink) Write(p []byte) (int, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		select {
		case <-g.release:
		case <-g.cut:
			return 0, errors.New("gated link: cut")
		}
	}
	return g.Conn.Write(p)
}

func (g *gatedLink) SetDeadline(t time.Time) error {
	if !t.IsZero() && time.Until(t) <= 0 {
		g.cutOnce.Do(func() { close(g.cut) })
	}
	return g.Conn.SetDeadline(t)
}

// newGatedSession is newSession with a's link gated (the first link
// wrapped is a's).
func newGatedSession(t *testing.T) (*session, *gatedLink) {
	t.Helper()
	var g *gatedLink
	s := newWrappedSession(t, MinBound, func(c net.Conn) net.Conn {
		if g == nil {
			g = newGatedLink(c)
			return g
		}
		return c
	})
	return s, g
}

// TestEndWaitsForTheLink: End while a write holds the link (a flush, an
// ack) waits for it and still tells the peer, which ends with ErrEnded and
// gets the bytes written before. (End used to give up at once, and the
// peer kept the session for a resumption that would not come.)
func TestEndWaitsForTheLink(t *testing.T) {
	s, g := newGatedSession(t)
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(s.b); got <- b }()
	g.armed.Store(true)
	go func() { _, _ = s.a.Write([]byte("before the end")) }()
	<-g.entered // the flush holds the link
	waiting := make(chan struct{})
	endWaits = func() { close(waiting) }
	defer func() { endWaits = nil }()
	ended := make(chan struct{})
	go func() { s.a.End(); close(ended) }()
	<-waiting
	close(g.release)
	<-ended
	select {
	case <-s.b.Done():
	case err := <-s.bDet:
		t.Fatalf("peer detached (%v) instead of ending: it would wait for a resumption", err)
	}
	if !errors.Is(s.b.Err(), ErrEnded) {
		t.Fatalf("peer ended with %v, want ErrEnded", s.b.Err())
	}
	if b := <-got; string(b) != "before the end" {
		t.Fatalf("peer read %q", b)
	}
}

// TestEndGivesUpOnAStuckLink: a write stuck on a dead path does not hold
// End past endWait: the session ends here, the stuck write returns once
// the link is cut, and the link's lock is free again.
func TestEndGivesUpOnAStuckLink(t *testing.T) {
	s, g := newGatedSession(t)
	go io.Copy(io.Discard, s.b)
	g.armed.Store(true)
	wrote := make(chan struct{})
	go func() { _, _ = s.a.Write([]byte("stuck")); close(wrote) }()
	<-g.entered
	s.a.End()
	if !errors.Is(s.a.Err(), ErrClosed) {
		t.Fatalf("ended with %v, want ErrClosed", s.a.Err())
	}
	<-wrote
	waitFor(t, func() bool {
		if s.a.lmu.TryLock() {
			s.a.lmu.Unlock()
			return true
		}
		return false
	})
}
