package redial

import (
	"context"
	"sync"
	"time"
)

// Schedule is when the client's next dial starts, as a local connection
// that finds no link needs to know it (tunnel/linkwait.go): such a
// connection waits only while a dial is under way, or due, within its
// wait, and may bring the next dial forward once, to PokeFloor after the
// last dial began at the soonest, so that waiting connections cannot make
// the client dial in a tight loop. The link loop reports to it (DialStart
// before each dial, Retry when a dial failed or the link went down and
// the next dial is scheduled) and sleeps in Sleep, which a brought-forward
// dial wakes.
type Schedule struct {
	pokeFloor time.Duration // the soonest a connection brings a dial after the last began
	poke      chan struct{} // wakes Sleep: next moved forward

	mu       sync.Mutex
	dialing  bool          // a dial and handshake are under way (true before the first)
	lastDial time.Time     // when the last dial began
	next     time.Time     // when the next dial starts, while not dialing
	lastErr  error         // why the last dial failed or the last link went down
	failed   chan struct{} // closed, and replaced, by every Retry
}

// NewSchedule returns the schedule of a client about to dial for the
// first time, whose waiting connections bring a dial forward to no
// sooner than pokeFloor after the last began.
func NewSchedule(pokeFloor time.Duration) *Schedule {
	return &Schedule{pokeFloor: pokeFloor, poke: make(chan struct{}, 1), dialing: true, failed: make(chan struct{})}
}

// DialStart: the link loop is about to dial.
func (s *Schedule) DialStart() {
	s.mu.Lock()
	s.dialing, s.lastDial = true, time.Now()
	s.mu.Unlock()
}

// Sleep waits until the next dial is due, as Retry scheduled it or a
// waiting connection brought it forward since, or ctx ends (false).
func (s *Schedule) Sleep(ctx context.Context) bool {
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

// BringForward moves the next dial, if none is under way, to pokeFloor
// after the last began or now, whichever is later, unless that is after
// deadline; it reports when the next dial starts and whether that is by
// deadline.
func (s *Schedule) BringForward(deadline time.Time) (time.Time, bool) {
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
		default: // a wake-up is pending: Sleep reads next then
		}
	}
	return s.next, true
}

// Retry: there is no link because of err, and the next dial starts in d.
// Connections waiting for the dial that failed are woken now (Failed).
func (s *Schedule) Retry(err error, d time.Duration) {
	s.mu.Lock()
	s.dialing, s.next, s.lastErr = false, time.Now().Add(d), err
	close(s.failed)
	s.failed = make(chan struct{})
	s.mu.Unlock()
}

// State is what a waiting connection decides on, and the status shows:
// whether a dial is under way, when the next starts, a channel the next
// Retry closes, and why the last dial failed.
func (s *Schedule) State() (dialing bool, next time.Time, failed <-chan struct{}, lastErr error) {
	s.mu.Lock()
	dialing, next, failed, lastErr = s.dialing, s.next, s.failed, s.lastErr
	s.mu.Unlock()
	return dialing, next, failed, lastErr
}
