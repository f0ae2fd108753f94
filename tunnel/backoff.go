package tunnel

import (
	"math/rand/v2"
	"time"
)

// backoff is the client's redial delay: exponential from min, with jitter,
// never more than max. The n-th delay (from 0) is uniform in
// [max(min, d/2), d] with d = min·2^n capped at max, so a fleet of clients
// that lost the same server spread out instead of redialling in lockstep.
type backoff struct {
	min, max time.Duration
	attempt  int
	rand     func(n int64) int64 // [0, n); nil means math/rand/v2
}

func (b *backoff) next() time.Duration {
	d := b.max
	if b.attempt < 62 && b.min<<b.attempt > 0 && b.min<<b.attempt < b.max {
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

func (b *backoff) reset() { b.attempt = 0 }
