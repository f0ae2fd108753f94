package redial

import (
	"context"
	"fmt"
	"net"
	"time"
)

// Overlap is the schedule of the client's dials while its session waits
// for a link (tunnel/resumable.go). The client cannot see the path come
// back: only a SYN sent after its return is answered, so how soon the
// client finds out is how often a SYN leaves. A dial in rounds: each
// round starts Attempts connects, one every Round/Attempts, that overlap
// (a SYN dropped on a dead path is retried by the kernel only after 1 s,
// then 3 s, 7 s: a lone dial would wait out that backoff); the first to
// connect ends the round and the others are cancelled, a connection that
// completes all the same is closed at once. So bytes move again within
// Round/Attempts (plus the handshake) of the path's return, where one dial
// a Round took up to Round.
//
// What an outage costs the server: during it, nothing reaches it; when the
// path returns, the SYN of one attempt, a second one only when the round
// trip exceeds Round/Attempts, and at most Attempts a round: at most that
// many half-open connections and handshake slots (slots.Table, 8 per
// source by default), of which all but one close before their first byte.
// A path whose round trip is longer than an attempt can live gets longer
// rounds: Round doubles every 32 rounds, up to Max.
type Overlap struct {
	Attempts int           // connects started a round, evenly spread (at least 1)
	Round    time.Duration // a round, and the longest an attempt lives, at first
	Max      time.Duration // the longest round (the client's dial_timeout)

	after func(time.Duration) <-chan time.Time // nil: time.After; tests: their own clock
}

// RoundLen is the n-th round's length (from 0).
func (o Overlap) RoundLen(n int) time.Duration {
	return min(o.Max, o.Round<<min(n/32, 8))
}

// Race runs round n of dial: it returns the first connection, or the
// last attempt's error once every attempt of the round has failed or the
// round, or ctx, has ended. The attempts' context ends with the round.
func (o Overlap) Race(ctx context.Context, n int, dial func(context.Context) (net.Conn, error)) (net.Conn, error) {
	after := o.after
	if after == nil {
		after = time.After
	}
	attempts := max(o.Attempts, 1)
	round := o.RoundLen(n)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		c   net.Conn
		err error
	}
	results := make(chan result, attempts) // never blocks an attempt
	started, pending := 0, 0
	start := func() {
		started++
		pending++
		go func() {
			c, err := dial(ctx)
			results <- result{c, err}
		}()
	}
	// losers closes what the attempts still under way return.
	losers := func() {
		go func(n int) {
			for range n {
				if r := <-results; r.err == nil {
					_ = r.c.Close()
				}
			}
		}(pending)
	}
	end := after(round)
	var next <-chan time.Time
	start()
	if attempts > 1 {
		next = after(round / time.Duration(attempts))
	}
	err := fmt.Errorf("no answer within %v", round)
	for {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				cancel()
				losers()
				return r.c, nil
			}
			err = r.err
			if pending == 0 && started == attempts {
				return nil, err
			}
		case <-next:
			start()
			next = nil
			if started < attempts {
				next = after(round / time.Duration(attempts))
			}
		case <-end:
			cancel()
			losers()
			return nil, err
		case <-ctx.Done():
			losers()
			return nil, ctx.Err()
		}
	}
}
