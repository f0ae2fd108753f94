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
// while the device is also loaded: the work it was given in the last
// window, at its calibrated speed for each frame's size, fills at least
// busyShare of the window. The time a frame spends between Begin and End
// is no measure of that: on a busy CPU it includes the wait for the
// worker to be scheduled again after the device finished, so a device
// that idles looks busy exactly when the CPU is the bottleneck (seen in
// the VM: 90% "busy" at a third of the device's speed).
const (
	// busyWindow is the span over which a device's load is measured.
	busyWindow = 50 * time.Millisecond
	// busyShare is the share of busyWindow the device's work must fill
	// for hybrid to pass frames to the CPU.
	busyShare = 0.9
)

// devQueue counts the frames a device holds and the work it was given.
type devQueue struct {
	n    atomic.Int32 // frames held now
	work atomic.Int64 // calibrated device time of the frames it returned, ns

	mu       sync.Mutex
	winStart time.Duration // clock at the start of the window
	winWork  int64         // work at the start of the window
	loaded   bool          // the last ended window was loaded
	_        [24]byte      // own cache lines: workers of both directions count at once
}

// saturated reports whether the device's work filled at least busyShare
// of the last window. A window ends at the first call after busyWindow has
// passed since it started; the answer for the last ended window stands
// until the next one ends.
func (q *devQueue) saturated(now time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if span := now - q.winStart; span >= busyWindow {
		w := q.work.Load()
		q.loaded = float64(w-q.winWork) >= busyShare*float64(span)
		q.winStart, q.winWork = now, w
	}
	return q.loaded
}
