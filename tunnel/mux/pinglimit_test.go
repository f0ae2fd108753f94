package mux

import (
	"errors"
	"io"
	"testing"
	"time"
)

// TestPingBucket: a burst of PingBurst pings and then one every 1/PingRate s
// pass forever; one more than that does not, and idle time refills no more
// than a burst.
func TestPingBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newPingBucket(t0)
	for i := range PingBurst {
		if !b.take(t0) {
			t.Fatalf("ping %d of a burst of %d refused", i+1, PingBurst)
		}
	}
	if b.take(t0) {
		t.Fatalf("ping %d at once let through", PingBurst+1)
	}
	now := t0
	for i := range 10 * PingBurst {
		now = now.Add(time.Second / PingRate)
		if !b.take(now) {
			t.Fatalf("ping %d at %d a second after the burst refused", i+1, PingRate)
		}
	}
	if b.take(now.Add(time.Second / PingRate / 2)) {
		t.Fatalf("a ping half an interval early let through")
	}
	now = now.Add(time.Hour)
	for i := range PingBurst {
		if !b.take(now) {
			t.Fatalf("after an hour idle: ping %d of a burst refused", i+1)
		}
	}
	if b.take(now) {
		t.Fatalf("after an hour idle: more than a burst let through")
	}
}

// TestPingFlood: a peer's burst of PingBurst pings is echoed in full and
// leaves the session open; a flood closes it with ErrPingFlood.
func TestPingFlood(t *testing.T) {
	pings := func(n int) []byte {
		var f []byte
		var h [HeaderSize]byte
		for i := range n {
			header{typ: typePing, flags: flagSYN, length: uint32(i)}.encode(h[:])
			f = append(f, h[:]...)
		}
		return f
	}

	a, b := tcpPair(t)
	ours, _ := Server(b, nil)
	if _, err := a.Write(pings(PingBurst)); err != nil {
		t.Fatal(err)
	}
	echoes := make([]byte, PingBurst*HeaderSize)
	_ = a.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(a, echoes); err != nil {
		t.Fatalf("echoes of a burst of %d pings: %v", PingBurst, err)
	}
	if ours.IsClosed() {
		t.Fatalf("a burst of %d pings closed the session: %v", PingBurst, ours.Err())
	}
	ours.Close()
	a.Close()

	// Ten thousand pings at once: they pass only if writing them takes
	// the ten minutes the bucket needs to refill that many.
	a, b = tcpPair(t)
	ours, _ = Server(b, nil)
	defer ours.Close()
	defer a.Close()
	go func() { _, _ = a.Write(pings(10000)) }()
	select {
	case <-ours.CloseChan():
	case <-time.After(20 * time.Second):
		t.Fatal("session still open after a ping flood")
	}
	if !errors.Is(ours.Err(), ErrPingFlood) {
		t.Errorf("session ended with %v, want ErrPingFlood", ours.Err())
	}
}
