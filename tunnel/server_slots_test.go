package tunnel

import (
	"context"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"

	"github.com/offload-dev/offload/internal/testutil"
)

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

// The eviction rules of hsSlots, one by one, on real sockets: the
// per-source cap takes the source's own oldest incomplete connection, the
// global cap takes from the source with the most, and a connection whose
// complete first flight waits in its socket buffer is never taken.
func TestSlotsPolicy(t *testing.T) {
	ln := testutil.Listen(t)
	defer ln.Close()
	prefix, size := handshake.FlightHeader(suite.Default)
	flight := append(append([]byte(nil), prefix...), make([]byte, size-len(prefix))...)
	partial := prefix[:10]
	s := newHSSlots(4, 2, suite.Default)
	take := func(c net.Conn) *hsSlot {
		t.Helper()
		return s.acquire(c)
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
	s.flightRead(a4) // the handshake read a4's flight: complete too
	if a5 := take(accepted(t, ln, "127.0.0.2", nil)); a5 != nil || a1.Evicted || a4.Evicted {
		t.Fatal("a source with only complete flights pending lost one, or took a slot")
	}

	for _, sl := range []*hsSlot{a1, a4} {
		if s.release(sl) {
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
	for _, sl := range []*hsSlot{y2, z1, w1, v1} {
		if s.release(sl) {
			t.Fatal("a kept slot says evicted")
		}
	}
	if s.len() != 0 || s.pending.Sources() != 0 {
		t.Fatalf("after release: %d pending, %d sources", s.len(), s.pending.Sources())
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
	s := newHSSlots(2, 2, suite.Default)
	f1 := s.acquire(accepted(t, ln, "127.0.0.2", flight))
	f2 := s.acquire(accepted(t, ln, "127.0.0.3", flight))
	s.flightRead(f1) // both being tried
	s.flightRead(f2)
	s.failedTrial(f1) // .2 sent a bad flight before

	if r := s.acquire(accepted(t, ln, "127.0.0.2", nil)); r != nil {
		t.Fatal("a failed source's connection got a slot or a place in the queue")
	}
	w1 := s.acquire(accepted(t, ln, "127.0.0.4", flight))
	w2 := s.acquire(accepted(t, ln, "127.0.0.5", flight))
	if w1 == nil || w1.ready == nil || w2 == nil || w2.ready == nil {
		t.Fatalf("fresh sources: %v, %v; want both queued", w1, w2)
	}
	if w3 := s.acquire(accepted(t, ln, "127.0.0.6", flight)); w3 != nil {
		t.Fatal("a third connection queued beside max 2 waiting")
	}
	if f1.Evicted || f2.Evicted {
		t.Fatal("a flight being tried was evicted")
	}

	s.release(f1)
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
	if s.len() != 2 || s.waiters() != 1 {
		t.Fatalf("%d pending, %d waiting; want 2, 1", s.len(), s.waiters())
	}
	if !s.await(context.Background(), w1, time.Minute) {
		t.Fatal("await of a slot passed on: false")
	}
	if s.await(context.Background(), w2, time.Millisecond) {
		t.Fatal("await with no slot freed: true")
	}
	if s.waiters() != 0 {
		t.Fatal("a connection that gave up is still queued")
	}

	// The queue full of connections from sources that have failed since
	// they queued: a fresh one takes the place of the oldest, and a freed
	// slot goes to a fresh source's connection first.
	q1 := s.acquire(accepted(t, ln, "127.0.0.7", flight))
	q2 := s.acquire(accepted(t, ln, "127.0.0.8", flight))
	s.failedTrial(q1)
	s.failedTrial(q2)
	q3 := s.acquire(accepted(t, ln, "127.0.0.9", flight))
	if q1 == nil || q2 == nil || q3 == nil || q3.ready == nil {
		t.Fatalf("queue: %v %v %v", q1, q2, q3)
	}
	if s.await(context.Background(), q1, time.Minute) {
		t.Fatal("the oldest failed source's waiting connection kept its place")
	}
	if s.waiters() != 2 {
		t.Fatalf("%d waiting; want q2 and q3", s.waiters())
	}
	s.release(f2)
	select {
	case <-q3.ready:
	default:
		t.Fatal("the freed slot did not go to the fresh source's connection first")
	}
	if !s.await(context.Background(), q3, time.Minute) || s.await(context.Background(), q2, time.Millisecond) {
		t.Fatal("q3 should hold the slot and q2 give up")
	}
	s.release(w1)
	s.release(q3)
	if s.len() != 0 || s.waiters() != 0 {
		t.Fatalf("%d pending, %d waiting after release", s.len(), s.waiters())
	}
}

// TestLinkDownDuringDrain: a link whose write met a client that had
// already closed (EPIPE, ECONNRESET) is a hang-up once the drain has begun
// (bench stops both ends together, and the drain's GoAway found the
// client gone: TestBenchJSONSoftwareAndUnavailable saw a "link failed"
// warning); before the drain it stays a failure.
func TestLinkDownDuringDrain(t *testing.T) {
	for _, tc := range []struct {
		drain bool
		err   error
		warn  bool
	}{
		{false, fmt.Errorf("record: writev: %w", syscall.EPIPE), true},
		{true, fmt.Errorf("record: writev: %w", syscall.EPIPE), false},
		{true, fmt.Errorf("record: read: %w", syscall.ECONNRESET), false},
		{true, record.ErrAuth, true},
	} {
		log, logs := testutil.ObservedLogger(t)
		srv, err := NewServer(ServerConfig{Options: testOptions(log), Services: map[string]string{"x": "127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		if tc.drain {
			close(srv.stopping)
		}
		l := &link{log: log, ctr: srv.clientCounters("default")}
		srv.linkDown(l, tc.err, time.Second)
		warned := logs.FilterMessage("link failed").Len() == 1
		if warned != tc.warn || (srv.ctr.linkErrors.Load() == 1) != tc.warn {
			t.Errorf("drain %v, %v: warned %v, link errors %d; want a warning and a count: %v",
				tc.drain, tc.err, warned, srv.ctr.linkErrors.Load(), tc.warn)
		}
	}
}
