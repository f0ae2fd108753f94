// Package netguard holds the small mechanisms that keep a misbehaving
// peer from costing the tunnel more than a bound, shared by tunnel,
// tunnel/mux, tunnel/proxyproto and tunnel/metricsserver: the rate limit
// of log lines about peers (ratelimit.go); for connections, the reset,
// the per-source key of the slot caps and the pause after a failed Accept
// (conn.go); the list of connections waiting for a slot, with its victim
// choice (slotlist.go); looking into a socket buffer without taking from
// it (Peek, WaitData) and the kernel holding silent connections before
// Accept (DeferAccept). The standard library only.
package netguard

import (
	"sync/atomic"
	"time"
)

// RateLimit allows one event per Every and counts the ones it suppressed
// in between, so that a peer sending bad frames as fast as it can costs
// one log line per interval, with the count of those not logged. The zero
// Every allows every event. Safe for concurrent use.
type RateLimit struct {
	Every      time.Duration
	last       atomic.Int64
	suppressed atomic.Uint64
}

// Allow reports whether to log now, and how many events were suppressed
// since the last one logged.
func (r *RateLimit) Allow() (bool, uint64) {
	now := int64(time.Since(limitStart)) + 1 // never 0, which is "none yet"
	last := r.last.Load()
	if (last != 0 && now-last < int64(r.Every)) || !r.last.CompareAndSwap(last, now) {
		r.suppressed.Add(1)
		return false, 0
	}
	return true, r.suppressed.Swap(0)
}

// limitStart anchors rate limits to the monotonic clock: a wall clock
// stepped back (a guest's clock corrected, a router's first NTP answer)
// would otherwise hold every log line back for the length of the step.
var limitStart = time.Now()
