package tunnel

import (
	"sync"
	"time"
)

// tracker counts open streams and lets a shutdown wait until none is left:
// the server's and the client's drain (server.go, client.go).
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
