package slots

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/suite"

	"github.com/offload-dev/offload/internal/testutil"
)

// dialFrom dials addr from the loopback address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// accepted returns the server end of a connection dialled from src, after
// the client sent what.
func accepted(t *testing.T, ln net.Listener, src string, what []byte) net.Conn {
	t.Helper()
	c, err := dialFrom(src, ln.Addr().String())
	if err != nil {
		t.Skipf("can't dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	if len(what) > 0 {
		if _, err := c.Write(what); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if len(what) > 0 {
		// Wait for the bytes to reach the server's socket buffer.
		deadline := time.Now().Add(2 * time.Second)
		for netguard.Peek(s, make([]byte, len(what))) < len(what) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	return s
}

// The eviction rules of Table, one by one, on real sockets: the
// per-source cap takes the source's own oldest incomplete connection, the
// global cap takes from the source with the most, and a connection whose
// complete first flight waits in its socket buffer is never taken.
func TestSlotsPolicy(t *testing.T) {
	ln := testutil.Listen(t)
	defer ln.Close()
	prefix, size := handshake.FlightHeader(suite.Default)
	flight := append(append([]byte(nil), prefix...), make([]byte, size-len(prefix))...)
	partial := prefix[:10]
	s := New(4, 2, suite.Default)
	take := func(c net.Conn) *Slot {
		t.Helper()
		return s.Acquire(c)
	}

	a1 := take(accepted(t, ln, "127.0.0.2", flight)) // complete: never evicted
	a2 := take(accepted(t, ln, "127.0.0.2", partial))
	a3 := take(accepted(t, ln, "127.0.0.2", nil)) // source at its cap: takes a2, not a1
	if a1.Evicted || !a2.Evicted || a3 == nil {
		t.Fatalf("per source: a1 evicted %v, a2 evicted %v, a3 %v", a1.Evicted, a2.Evicted, a3)
	}
	a4 := take(accepted(t, ln, "127.0.0.2", nil))
	if !a3.Evicted || a4 == nil {
		t.Fatal("per source: a4 did not take a3's slot")
	}
	s.FlightRead(a4) // the handshake read a4's flight: complete too
	if a5 := take(accepted(t, ln, "127.0.0.2", nil)); a5 != nil || a1.Evicted || a4.Evicted {
		t.Fatal("a source with only complete flights pending lost one, or took a slot")
	}

	for _, sl := range []*Slot{a1, a4} {
		if s.Release(sl) {
			t.Fatal("a kept slot says evicted")
		}
	}

	// Global cap 4: x1 from .3 is the oldest, but .4 has two pending, so
	// a new connection from .6 takes .4's oldest, y1.
	x1 := take(accepted(t, ln, "127.0.0.3", partial))
	y1 := take(accepted(t, ln, "127.0.0.4", nil))
	y2 := take(accepted(t, ln, "127.0.0.4", partial))
	z1 := take(accepted(t, ln, "127.0.0.5", flight))
	w1 := take(accepted(t, ln, "127.0.0.6", nil))
	if w1 == nil || !y1.Evicted || x1.Evicted || y2.Evicted || z1.Evicted {
		t.Fatalf("global: w1 %v; evicted x1 %v, y1 %v (want), y2 %v, z1 %v", w1, x1.Evicted, y1.Evicted, y2.Evicted, z1.Evicted)
	}
	// Now every source has one: the oldest incomplete goes (x1), never the
	// complete z1.
	v1 := take(accepted(t, ln, "127.0.0.7", nil))
	if v1 == nil || !x1.Evicted || z1.Evicted {
		t.Fatalf("global: v1 %v; evicted x1 %v (want), z1 %v", v1, x1.Evicted, z1.Evicted)
	}
	for _, sl := range []*Slot{y2, z1, w1, v1} {
		if s.Release(sl) {
			t.Fatal("a kept slot says evicted")
		}
	}
	if s.Len() != 0 || s.pending.Sources() != 0 {
		t.Fatalf("after release: %d pending, %d sources", s.Len(), s.pending.Sources())
	}
}

// TestSlotsWaitForFreedSlot: when every slot holds a flight the handshake
// is already trying, a connection from a fresh source waits, and the next
// slot freed goes to the oldest waiting one; a failed source's connection
// is refused; at most max wait; one that gives up leaves the queue. (A
// genuine client beside a wrong-key flood was refused when its turn came
// while the CPU was trying every flight: TestAttackWrongKeyFloodManyKeys, 1 of
// 20 under -race beside a busy core.)
func TestSlotsWaitForFreedSlot(t *testing.T) {
	ln := testutil.Listen(t)
	defer ln.Close()
	prefix, size := handshake.FlightHeader(suite.Default)
	flight := append(append([]byte(nil), prefix...), make([]byte, size-len(prefix))...)
	s := New(2, 2, suite.Default)
	f1 := s.Acquire(accepted(t, ln, "127.0.0.2", flight))
	f2 := s.Acquire(accepted(t, ln, "127.0.0.3", flight))
	s.FlightRead(f1) // both being tried
	s.FlightRead(f2)
	s.FailedTrial(f1) // .2 sent a bad flight before

	if r := s.Acquire(accepted(t, ln, "127.0.0.2", nil)); r != nil {
		t.Fatal("a failed source's connection got a slot or a place in the queue")
	}
	w1 := s.Acquire(accepted(t, ln, "127.0.0.4", flight))
	w2 := s.Acquire(accepted(t, ln, "127.0.0.5", flight))
	if w1 == nil || w1.ready == nil || w2 == nil || w2.ready == nil {
		t.Fatalf("fresh sources: %v, %v; want both queued", w1, w2)
	}
	if w3 := s.Acquire(accepted(t, ln, "127.0.0.6", flight)); w3 != nil {
		t.Fatal("a third connection queued beside max 2 waiting")
	}
	if f1.Evicted || f2.Evicted {
		t.Fatal("a flight being tried was evicted")
	}

	s.Release(f1)
	select {
	case <-w1.ready:
	default:
		t.Fatal("the freed slot did not go to the oldest waiting connection")
	}
	select {
	case <-w2.ready:
		t.Fatal("one freed slot went to two waiting connections")
	default:
	}
	if s.Len() != 2 || s.Waiters() != 1 {
		t.Fatalf("%d pending, %d waiting; want 2, 1", s.Len(), s.Waiters())
	}
	if !s.Await(context.Background(), w1, time.Minute) {
		t.Fatal("await of a slot passed on: false")
	}
	if s.Await(context.Background(), w2, time.Millisecond) {
		t.Fatal("await with no slot freed: true")
	}
	if s.Waiters() != 0 {
		t.Fatal("a connection that gave up is still queued")
	}

	// The queue full of connections from sources that have failed since
	// they queued: a fresh one takes the place of the oldest, and a freed
	// slot goes to a fresh source's connection first.
	q1 := s.Acquire(accepted(t, ln, "127.0.0.7", flight))
	q2 := s.Acquire(accepted(t, ln, "127.0.0.8", flight))
	s.FailedTrial(q1)
	s.FailedTrial(q2)
	q3 := s.Acquire(accepted(t, ln, "127.0.0.9", flight))
	if q1 == nil || q2 == nil || q3 == nil || q3.ready == nil {
		t.Fatalf("queue: %v %v %v", q1, q2, q3)
	}
	if s.Await(context.Background(), q1, time.Minute) {
		t.Fatal("the oldest failed source's waiting connection kept its place")
	}
	if s.Waiters() != 2 {
		t.Fatalf("%d waiting; want q2 and q3", s.Waiters())
	}
	s.Release(f2)
	select {
	case <-q3.ready:
	default:
		t.Fatal("the freed slot did not go to the fresh source's connection first")
	}
	if !s.Await(context.Background(), q3, time.Minute) || s.Await(context.Background(), q2, time.Millisecond) {
		t.Fatal("q3 should hold the slot and q2 give up")
	}
	s.Release(w1)
	s.Release(q3)
	if s.Len() != 0 || s.Waiters() != 0 {
		t.Fatalf("%d pending, %d waiting after release", s.Len(), s.Waiters())
	}
}

// A complete first flight of every version the server answers counts as
// complete: a version 2 client's, waiting in its socket buffer, is not
// taken for a newer connection from its source.
func TestSlotsEveryVersionsFlight(t *testing.T) {
	ln := testutil.Listen(t)
	defer ln.Close()
	flights := handshake.Flights(suite.Default)
	if len(flights) != int(handshake.Version-handshake.MinVersion+1) {
		t.Fatalf("%d flights, want one per version from %d to %d", len(flights), handshake.MinVersion, handshake.Version)
	}
	for i, f := range flights {
		s := New(4, 1, suite.Default)
		flight := append(append([]byte(nil), f.Prefix...), make([]byte, f.Size-len(f.Prefix))...)
		a := s.Acquire(accepted(t, ln, "127.0.0.2", flight))
		if b := s.Acquire(accepted(t, ln, "127.0.0.2", nil)); b != nil || a.Evicted {
			t.Errorf("flight %d (version %d): a complete flight was taken for a new connection", i, f.Prefix[4])
		}
		s.Release(a)
	}
}
