package tunnel

import (
	"math/rand/v2"
	"time"

	"go.uber.org/zap/zapcore"
)

// Reconnect. The client's redial delay is exponential from min, with
// jitter, never more than max; two rules keep a client quick to come back
// after an outage of any length (issue 26):
//
//   - every completed handshake resets it: a link that was up, however
//     briefly, is followed by a min delay, not by the doubling it ended
//     (a server restarted twice in a row does not earn a 25 s wait);
//   - once a link has ever come up, no delay exceeds upMax (and max, if
//     lower): the server worked, so it is likely back soon, and a client
//     that waits longer than that after its return fails every connection
//     meanwhile. Before the first link (a wrong key, a suite mismatch, a
//     server not yet installed) the full doubling up to max applies.
//
// A local connection that finds no link brings the next dial forward
// (linkwait.go), so even a client with a long max serves again as soon as
// someone asks.
//
// The n-th delay since a reset (from 0) is uniform in [max(min, d/2), d]
// with d = min·2^n capped, so a fleet of clients that lost the same server
// spread out instead of redialling in lockstep.
type backoff struct {
	min, max time.Duration
	attempt  int
	linked   bool                // a handshake has completed: the cap is upMax
	rand     func(n int64) int64 // [0, n); nil means math/rand/v2
}

// upMax caps the redial delay once a link has come up.
const upMax = time.Second

func (b *backoff) next() time.Duration {
	ceil := b.max
	if b.linked {
		ceil = min(ceil, max(upMax, b.min))
	}
	d := ceil
	if b.attempt < 62 && b.min<<b.attempt > 0 && b.min<<b.attempt < ceil {
		d = b.min << b.attempt
	}
	b.attempt++
	lo := max(b.min, d/2)
	if d <= lo {
		return lo
	}
	r := b.rand
	if r == nil {
		r = rand.Int64N
	}
	return lo + time.Duration(r(int64(d-lo)+1))
}

// linkedUp records a completed handshake: the next delay is min again,
// and none is more than upMax from now on.
func (b *backoff) linkedUp() { b.attempt, b.linked = 0, true }

// repeatLog keeps a client that redials a dead server every upMax from
// filling a router's log ring: a failure is logged at Warn when its
// message differs from the last one's, and a repeat at most once per
// repeatEvery (Debug otherwise), with the count of repeats not logged.
// Only linkLoop uses it; a link that comes up starts it afresh.
type repeatLog struct {
	last       string
	logged     time.Time
	suppressed uint64
}

const repeatEvery = time.Minute

// level is the level to log failure msg at, and the repeats not logged
// since the last Warn (when it is Warn).
func (r *repeatLog) level(msg string) (zapcore.Level, uint64) {
	now := time.Now()
	if msg == r.last && now.Sub(r.logged) < repeatEvery {
		r.suppressed++
		return zapcore.DebugLevel, 0
	}
	n := r.suppressed
	r.last, r.logged, r.suppressed = msg, now, 0
	return zapcore.WarnLevel, n
}
