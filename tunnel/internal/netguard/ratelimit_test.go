package netguard

import (
	"testing"
	"time"
)

func TestRateLimit(t *testing.T) {
	r := RateLimit{Every: time.Hour}
	if ok, n := r.Allow(); !ok || n != 0 {
		t.Fatalf("first event: %v, %d suppressed; want allowed, 0", ok, n)
	}
	for i := range 3 {
		if ok, _ := r.Allow(); ok {
			t.Fatalf("event %d within the interval allowed", i+2)
		}
	}
	// As if the interval had passed: the next one is allowed and reports
	// the three it suppressed.
	r.last.Add(-int64(2 * time.Hour))
	if ok, n := r.Allow(); !ok || n != 3 {
		t.Fatalf("after the interval: %v, %d suppressed; want allowed, 3", ok, n)
	}
	var every RateLimit
	for range 3 {
		if ok, _ := every.Allow(); !ok {
			t.Fatal("zero Every suppressed an event")
		}
	}
}
