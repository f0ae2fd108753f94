package tunnel

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// linkLoop reports to linkState (dialStart before each dial, retry when a
// dial failed or the link went down and the next dial is scheduled) and
// sleeps in linkState.sleep, which a brought-forward dial wakes; openStream
// asks awaitLink while c.sess is nil.

// ErrLinkDown means there was no link to the server, and none came up
// within the link wait, so a local connection was refused; the error says
// why the last dial failed.
var ErrLinkDown = errors.New("link to the server is down")

// linkState is what a connection waiting for the link needs to know
// about the link loop.
type linkState struct {
	pokeFloor time.Duration // the soonest a connection brings a dial after the last began
	poke      chan struct{} // wakes sleep: next moved forward

	mu       sync.Mutex
	dialing  bool          // a dial and handshake are under way (true before the first)
	lastDial time.Time     // when the last dial began
	next     time.Time     // when the next dial starts, while not dialing
	lastErr  error         // why the last dial failed or the last link went down
	failed   chan struct{} // closed, and replaced, by every retry
}

func newLinkState(pokeFloor time.Duration) *linkState {
	return &linkState{pokeFloor: pokeFloor, poke: make(chan struct{}, 1), dialing: true, failed: make(chan struct{})}
}

// dialStart: the link loop is about to dial.
func (s *linkState) dialStart() {
	s.mu.Lock()
	s.dialing, s.lastDial = true, time.Now()
	s.mu.Unlock()
}

// sleep waits until the next dial is due, as retry scheduled it or a
// waiting connection brought it forward since, or ctx ends (false).
func (s *linkState) sleep(ctx context.Context) bool {
	for {
		s.mu.Lock()
		t := time.NewTimer(time.Until(s.next))
		s.mu.Unlock()
		select {
		case <-t.C:
			return true
		case <-s.poke:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return false
		}
	}
}

// bringForward moves the next dial, if none is under way, to pokeFloor
// after the last began or now, whichever is later, unless that is after
// deadline; it reports when the next dial starts and whether that is by
// deadline.
func (s *linkState) bringForward(deadline time.Time) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dialing {
		return s.next, true
	}
	at := s.lastDial.Add(s.pokeFloor)
	if now := time.Now(); at.Before(now) {
		at = now
	}
	if at.After(deadline) {
		return s.next, false
	}
	if at.Before(s.next) {
		s.next = at
		select {
		case s.poke <- struct{}{}:
		default: // a wake-up is pending: sleep reads next then
		}
	}
	return s.next, true
}

// retry: there is no link because of err, and the next dial starts in d.
// Connections waiting for the dial that failed are refused now.
func (s *linkState) retry(err error, d time.Duration) {
	s.mu.Lock()
	s.dialing, s.next, s.lastErr = false, time.Now().Add(d), err
	close(s.failed)
	s.failed = make(chan struct{})
	s.mu.Unlock()
}

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
		s.mu.Lock()
		dialing, next, lastErr, failed := s.dialing, s.next, s.lastErr, s.failed
		s.mu.Unlock()
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
				next, ok = s.bringForward(deadline)
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

// nextDial is when the next dial starts, or whether one is under way.
func (s *linkState) nextDial() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next, s.dialing
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
