package mux

import (
	"fmt"
	"time"
)

/* Ping limit. The peer's keepalive pings once per interval, and each ping
   it sends costs this end an echo in the control queue. A peer that holds
   the link's keys could send pings as fast as it can seal them (12 bytes
   each, thousands per record frame) and never read the echoes: the queue
   would grow to maxCtrlQueue before the session noticed, and a yamux that
   answers each ping from a goroutine of its own (hashicorp/yamux) held one
   goroutine and its stack per ping for 10 s (TestAttackPingFlood, in
   tunnel). So the receive loop keeps a token bucket: PingBurst pings at
   once, PingRate a second after that, which is a keepalive every
   1/PingRate s or slower; one more closes the session with ErrPingFlood.
   The bucket is the receive loop's alone: no lock.

   The clock is this host's monotonic one, which an emulated router's
   guest has seen go back by 25 s (docs/lab/router-anchor.md, 2026-12-07):
   time that runs backwards refills nothing and takes nothing away. Before,
   it drained the bucket at PingRate a second, and the peer's next
   keepalive ping closed a healthy link as a flood. */

const (
	// PingBurst is how many pings a peer may send at once.
	PingBurst = 64
	// PingRate is how many pings a second a peer may send after a burst.
	PingRate = 16
)

// pingBucket holds the tokens a peer's ping spends, and what a flood's
// error tells: how many pings came since when, and how far back the
// clock went meanwhile.
type pingBucket struct {
	tokens float64
	last   time.Time
	start  time.Time
	pings  int
	back   time.Duration // the largest step back of the clock between two pings
}

func newPingBucket(now time.Time) pingBucket {
	return pingBucket{tokens: PingBurst, last: now, start: now}
}

// take spends a token at now, refilled at PingRate a second since the
// last take up to PingBurst; false: the bucket is empty.
func (b *pingBucket) take(now time.Time) bool {
	b.pings++
	d := now.Sub(b.last)
	if d < 0 {
		b.back = max(b.back, -d)
		d = 0
	}
	b.tokens = min(PingBurst, b.tokens+d.Seconds()*PingRate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// flood is the error for the ping take refused at now: the count and the
// span name a real flood (thousands in a moment) apart from a clock fault.
func (b *pingBucket) flood(now time.Time) error {
	err := fmt.Errorf("%w: ping %d of the session in %v (more than %d at once or %d a second)",
		ErrPingFlood, b.pings, now.Sub(b.start).Round(time.Millisecond), PingBurst, PingRate)
	if b.back > 0 {
		err = fmt.Errorf("%w; this host's clock went back %v meanwhile", err, b.back.Round(time.Millisecond))
	}
	return err
}
