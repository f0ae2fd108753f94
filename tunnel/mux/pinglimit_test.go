package mux

import (
	"errors"
	"fmt"
	"io"
	"strings"
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

// TestPingBucketClockBack: a monotonic clock that goes back (an emulated
// router's guest clock went back 25 s, docs/lab/router-anchor.md) neither
// drains nor refills the bucket. Before, a step back of 25 s took 400
// tokens, and the peer's next keepalive ping closed a healthy link as a
// flood (the two-router anchor, 2026-12-07).
func TestPingBucketClockBack(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newPingBucket(t0)
	now := t0.Add(15 * time.Second)
	if !b.take(now) {
		t.Fatal("the first keepalive ping refused")
	}
	back := now.Add(-25 * time.Second)
	if !b.take(back) {
		t.Fatalf("the keepalive's ping after the clock went back 25 s refused: %v", b.flood(back))
	}
	for i := range PingBurst - 2 {
		if !b.take(back) {
			t.Fatalf("ping %d of the burst's rest after the step back refused", i+3)
		}
	}
	if b.take(back) {
		t.Fatal("the clock's step back refilled the bucket")
	}
	msg := b.flood(back).Error()
	for _, want := range []string{ErrPingFlood.Error(), "ping 65 of the session", "clock went back 25s"} {
		if !strings.Contains(msg, want) {
			t.Errorf("flood error %q does not say %q", msg, want)
		}
	}
	if !b.take(back.Add(time.Second / PingRate)) {
		t.Fatal("refilling from the clock's new reading: a ping one interval later refused")
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
	} else if want := fmt.Sprintf("ping %d of the session", PingBurst+1); !strings.Contains(ours.Err().Error(), want) {
		t.Errorf("flood error %q does not say %q", ours.Err(), want)
	}
}
