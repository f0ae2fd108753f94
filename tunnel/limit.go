package tunnel

import (
	"container/list"
	"net"
	"sync"
	"time"
)

// hsSlots caps the handshakes in progress on the server. An
// unauthenticated connection holds a slot from accept until its handshake
// ends; when all are taken, a new connection takes the slot of the oldest
// pending one, which is closed. A real client finishes its handshake in one
// round trip, so the oldest pending connection is the likeliest to be
// stalled (a flood, or a peer that sends nothing): a flood of connections
// that never finish can not keep a real client out, and it costs at most
// max pending connections of memory at any time.
type hsSlots struct {
	mu      sync.Mutex
	max     int
	pending list.List // of *hsSlot, oldest first
}

type hsSlot struct {
	conn    net.Conn
	start   time.Time
	elem    *list.Element
	evicted bool
}

// acquire takes a slot for conn, evicting (closing) the oldest pending
// connection if all are taken.
func (s *hsSlots) acquire(conn net.Conn) *hsSlot {
	sl := &hsSlot{conn: conn, start: time.Now()}
	s.mu.Lock()
	var victim *hsSlot
	if s.pending.Len() >= s.max {
		victim = s.pending.Remove(s.pending.Front()).(*hsSlot)
		victim.evicted = true
		victim.elem = nil
	}
	sl.elem = s.pending.PushBack(sl)
	s.mu.Unlock()
	if victim != nil {
		resetConn(victim.conn)
	}
	return sl
}

// release frees sl's slot and reports whether it was evicted.
func (s *hsSlots) release(sl *hsSlot) (evicted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.elem != nil {
		s.pending.Remove(sl.elem)
		sl.elem = nil
	}
	return sl.evicted
}

func (s *hsSlots) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Len()
}

// tracker counts open streams and lets a shutdown wait until none is left.
type tracker struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0
}

func newTracker() *tracker {
	t := &tracker{idle: make(chan struct{})}
	close(t.idle)
	return t
}

func (t *tracker) add() {
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
	t.mu.Unlock()
}

// wait waits up to d for the count to reach zero and reports whether it did.
func (t *tracker) wait(d time.Duration) bool {
	t.mu.Lock()
	idle := t.idle
	t.mu.Unlock()
	if d <= 0 {
		select {
		case <-idle:
			return true
		default:
			return false
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-idle:
		return true
	case <-timer.C:
		return false
	}
}

// acceptBackoff is the pause after a failed Accept (out of file
// descriptors, say), doubling from 5ms to 1s as net/http does.
func acceptBackoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return 5 * time.Millisecond
	}
	return min(2*prev, time.Second)
}
