package tunnel

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Fail fast. A local connection (forward, SOCKS, UDP flow) that finds no
// link waits only while a dial is under way, or due, within
// Options.LinkWait. When the next dial is further off, the connection
// brings it forward once (to pokeFloor after the last dial began, at the
// soonest: waiting connections cannot make the client dial in a tight
// loop) if that is within its wait; otherwise, and as soon as a failed
// dial's retry would come too late, it is refused with why the link is
// down (the last dial's error: refused, wrong key, suite mismatch). An
// application then sees its connection reset at once, as with "channel
// open failed" from ssh -L, instead of a connection held for DialTimeout
// while the server is down; and a client whose backoff has grown long
// during an outage serves the first connection after the server's return.
//
// linkLoop reports to a redial.Schedule (DialStart before each dial, Retry
// when a dial failed or the link went down and the next dial is
// scheduled) and sleeps in its Sleep, which a brought-forward dial wakes;
// openStream asks awaitLink while c.sess is nil.

// ErrLinkDown means there was no link to the server, and none came up
// within the link wait, so a local connection was refused; the error says
// why the last dial failed.
var ErrLinkDown = errors.New("link to the server is down")

// awaitLink waits until up is closed (a link is up) or the wait is over.
// It gives up, with an error wrapping ErrLinkDown and the last dial's
// error, as soon as no dial is under way or due by deadline: at once
// when the last dial failed and the next is further off, or when a dial
// fails and its retry would come too late; at deadline otherwise.
func (c *Client) awaitLink(ctx context.Context, up <-chan struct{}, deadline time.Time) error {
	s := c.link
	t := time.NewTimer(max(time.Until(deadline), 0))
	defer t.Stop()
	brought := false
	for {
		dialing, next, failed, lastErr := s.State()
		select {
		case <-up:
			return nil
		default:
		}
		if !time.Now().Before(deadline) {
			return linkDownError(lastErr, dialing, time.Until(next))
		}
		if !dialing && next.After(deadline) {
			// One dial brought forward per connection: if it fails
			// too, the connection is refused (fail fast).
			ok := false
			if !brought {
				brought = true
				next, ok = s.BringForward(deadline)
			}
			if !ok {
				return linkDownError(lastErr, dialing, time.Until(next))
			}
		}
		select {
		case <-up:
			return nil
		case <-failed:
			// A dial failed: wait on if its retry is due in time
			// (the next server of several, a short backoff).
		case <-t.C:
			if lastErr == nil {
				return fmt.Errorf("%w: none came up within link_wait %v (a dial is under way)", ErrLinkDown, c.opt.LinkWait)
			}
			return fmt.Errorf("%w: none came up within link_wait %v (last: %w)", ErrLinkDown, c.opt.LinkWait, lastErr)
		case <-ctx.Done():
			return fmt.Errorf("%w: shutting down", ErrLinkDown)
		}
	}
}

// linkDownError says why there is no link: the last dial's error and when
// the next one starts.
func linkDownError(lastErr error, dialing bool, next time.Duration) error {
	switch {
	case lastErr == nil && dialing:
		return fmt.Errorf("%w: the first dial to the server is under way", ErrLinkDown)
	case lastErr == nil:
		return ErrLinkDown
	case dialing:
		return fmt.Errorf("%w (redialling; last: %w)", ErrLinkDown, lastErr)
	}
	return fmt.Errorf("%w (next dial in %v; last: %w)", ErrLinkDown, max(next, 0).Round(time.Millisecond), lastErr)
}
