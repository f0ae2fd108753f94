package selector

import (
	"sync"
	"sync/atomic"
	"time"
)

// Hybrid's view of a device. A queue alone is no reason to give the CPU a
// device's frame: the record layer's workers hand frames over in bursts,
// so even a device that idles most of the time holds two or three frames
// now and then. Then the CPU is the bottleneck (in the tunnel it also runs
// the MAC, yamux and the traffic), and every frame it takes from the
// device slows the link down. Hybrid therefore passes frames over only
// while the device is also busy nearly all the time: the device, not the
// CPU, limits the link.
const (
	// busyWindow is the span over which a device's busy share is measured.
	busyWindow = 50 * time.Millisecond
	// busyShare is the share of busyWindow a device must have held at
	// least one frame for hybrid to pass frames to the CPU.
	busyShare = 0.9
)

// devQueue counts the frames an engine holds and the time it held any.
type devQueue struct {
	n atomic.Int32 // frames held now: read by Pick without the lock

	mu       sync.Mutex
	held     int32         // = n, under mu
	busy     time.Duration // time with held > 0, up to busyFrom
	busyFrom time.Duration // clock when held went 0 → 1
	winStart time.Duration // clock at the start of the window
	winBusy  time.Duration // busy at the start of the window
	share    float64       // busy share of the last full window
	_        [24]byte      // own cache lines: workers of both directions count at once
}

func (q *devQueue) begin(now time.Duration) {
	q.mu.Lock()
	if q.held == 0 {
		q.busyFrom = now
	}
	q.held++
	q.n.Store(q.held)
	q.mu.Unlock()
}

func (q *devQueue) end(now time.Duration) {
	q.mu.Lock()
	if q.held > 0 {
		q.held--
		if q.held == 0 {
			q.busy += now - q.busyFrom
		}
	}
	q.n.Store(q.held)
	q.mu.Unlock()
}

// saturated reports whether the device held a frame for at least
// busyShare of the last window. A window ends at the first call after
// busyWindow has passed since it started; the figure of the last ended
// window counts until the next one ends.
func (q *devQueue) saturated(now time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if span := now - q.winStart; span >= busyWindow {
		busy := q.busy
		if q.held > 0 {
			busy += now - q.busyFrom
		}
		q.share = float64(busy-q.winBusy) / float64(span)
		q.winStart, q.winBusy = now, busy
	}
	return q.share >= busyShare
}
