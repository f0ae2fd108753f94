package mux

import (
	"sync"
	"time"
)

// deadline is a read or write deadline: wait returns a channel closed once
// it passed, or nil (blocks forever in a select) while none is set, so a
// stream without deadlines allocates nothing for them.
type deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	c     chan struct{}
}

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		// The timer fired, or is firing, on the old channel.
		d.c = nil
	}
	d.timer = nil
	if t.IsZero() {
		if d.c != nil && isClosed(d.c) {
			d.c = nil
		}
		return
	}
	if d.c == nil || isClosed(d.c) {
		d.c = make(chan struct{})
	}
	dur := time.Until(t)
	if dur <= 0 {
		close(d.c)
		return
	}
	c := d.c
	d.timer = time.AfterFunc(dur, func() { close(c) })
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.c
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// notify wakes the one waiter of a one-slot channel, if any.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
