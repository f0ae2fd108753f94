package live

import (
	"testing"
	"time"
)

// The rate is over the samples kept, at most rateWindow old: a burst
// long ago no longer counts.
func TestRateWindow(t *testing.T) {
	var m rateMeter
	t0 := time.Unix(1000, 0)
	if s, r := m.rate(sample{t: t0, sent: 5}); s != 0 || r != 0 {
		t.Fatalf("no samples: %v %v", s, r)
	}
	m.add(sample{t: t0})
	if s, _ := m.rate(sample{t: t0.Add(2 * time.Second), sent: 4000}); s != 2000 {
		t.Fatalf("rate from the first sample: %v, want 2000", s)
	}
	// A burst of 1 MB in the first tick, then 1,000 bytes a tick.
	total := uint64(1 << 20)
	for i := 1; i <= rateSamples; i++ {
		m.add(sample{t: t0.Add(time.Duration(i) * RateTick), sent: total, recv: uint64(100 * i)})
		total += 1000
	}
	now := t0.Add(time.Duration(rateSamples+1) * RateTick)
	s, r := m.rate(sample{t: now, sent: total, recv: 100 * (rateSamples + 1)})
	want := float64(rateSamples*1000) / rateWindow.Seconds()
	if s != want || r != float64(100*rateSamples)/rateWindow.Seconds() {
		t.Errorf("rate %v/%v, want %v (the burst is older than the window)", s, r, want)
	}
}
