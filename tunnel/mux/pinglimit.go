package mux

import "time"

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
   The bucket is the receive loop's alone: no lock. */

const (
	// PingBurst is how many pings a peer may send at once.
	PingBurst = 64
	// PingRate is how many pings a second a peer may send after a burst.
	PingRate = 16
)

// pingBucket holds the tokens a peer's ping spends.
type pingBucket struct {
	tokens float64
	last   time.Time
}

func newPingBucket(now time.Time) pingBucket { return pingBucket{tokens: PingBurst, last: now} }

// take spends a token at now, refilled at PingRate a second since the
// last take up to PingBurst; false: the bucket is empty.
func (b *pingBucket) take(now time.Time) bool {
	b.tokens = min(PingBurst, b.tokens+now.Sub(b.last).Seconds()*PingRate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
