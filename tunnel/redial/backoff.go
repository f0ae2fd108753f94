// Package redial is when and where the tunnel's client dials next: the
// backoff between dials (backoff.go), the ring of servers it fails over
// along (ring.go), the schedule a connection finding no link may bring
// the next dial forward on (schedule.go), and how loudly a failure repeated at every dial is
// logged. The client's link loop drives them; they know no link.
package redial

import (
	"math/rand/v2"
	"time"

	"go.uber.org/zap/zapcore"
)

// Backoff is the client's redial delay: exponential from Min, with
// jitter, never more than Max; two rules keep a client quick to come back
// after an outage of any length (issue 26):
//
//   - every completed handshake resets it: a link that was up, however
//     briefly, is followed by a min delay, not by the doubling it ended
//     (a server restarted twice in a row does not earn a 25 s wait);
//   - once a link has ever come up, no delay exceeds UpMax (and max, if
//     lower): the server worked, so it is likely back soon, and a client
//     that waits longer than that after its return fails every connection
//     meanwhile. Before the first link (a wrong key, a suite mismatch, a
//     server not yet installed) the full doubling up to max applies.
//
// A local connection that finds no link brings the next dial forward
// (Schedule), so even a client with a long Max serves again as
// soon as someone asks.
//
// The n-th delay since a reset (from 0) is uniform in [max(min, d/2), d]
// with d = min·2^n capped, so a fleet of clients that lost the same server
// spread out instead of redialling in lockstep.
type Backoff struct {
	Min, Max time.Duration
	attempt  int
	linked   bool                // a handshake has completed: the cap is UpMax
	rand     func(n int64) int64 // [0, n); nil means math/rand/v2
}

// UpMax caps the redial delay once a link has come up.
const UpMax = time.Second

// Next is the delay before the next dial.
func (b *Backoff) Next() time.Duration {
	ceil := b.Max
	if b.linked {
		ceil = min(ceil, max(UpMax, b.Min))
	}
	d := ceil
	if b.attempt < 62 && b.Min<<b.attempt > 0 && b.Min<<b.attempt < ceil {
		d = b.Min << b.attempt
	}
	b.attempt++
	lo := max(b.Min, d/2)
	if d <= lo {
		return lo
	}
	r := b.rand
	if r == nil {
		r = rand.Int64N
	}
	return lo + time.Duration(r(int64(d-lo)+1))
}

// LinkedUp records a completed handshake: the next delay is min again,
// and none is more than UpMax from now on.
func (b *Backoff) LinkedUp() { b.attempt, b.linked = 0, true }

// RepeatLog keeps a client that redials a dead server every UpMax from
// filling a router's log ring: a failure is logged at Warn when its
// message differs from the last one's, and a repeat at most once per
// repeatEvery (Debug otherwise), with the count of repeats not logged.
// Only the link loop uses it; a link that comes up starts it afresh.
type RepeatLog struct {
	last       string
	logged     time.Time
	suppressed uint64
}

const repeatEvery = time.Minute

// Level is the level to log failure msg at, and the repeats not logged
// since the last Warn (when it is Warn).
func (r *RepeatLog) Level(msg string) (zapcore.Level, uint64) {
	now := time.Now()
	if msg == r.last && now.Sub(r.logged) < repeatEvery {
		r.suppressed++
		return zapcore.DebugLevel, 0
	}
	n := r.suppressed
	r.last, r.logged, r.suppressed = msg, now, 0
	return zapcore.WarnLevel, n
}
