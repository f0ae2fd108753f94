package redial

import (
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	var prevCeil time.Duration
	for i := range 12 {
		d := b.Next()
		ceil := min(b.Max, b.Min<<i)
		if d < b.Min || d > b.Max || d > ceil || d < ceil/2 {
			t.Fatalf("delay %d = %v, want in [%v, %v] within [min, max]", i, d, max(b.Min, ceil/2), ceil)
		}
		if ceil < prevCeil {
			t.Fatalf("ceiling shrank")
		}
		prevCeil = ceil
	}
	b.LinkedUp()
	if d := b.Next(); d != b.Min {
		t.Fatalf("after a link came up: %v, want %v", d, b.Min)
	}
	// Jitter: the delays are not all the same.
	seen := map[time.Duration]bool{}
	for range 20 {
		b.attempt = 5
		seen[b.Next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("no jitter")
	}
	// A huge attempt count does not overflow.
	b.attempt = 1000
	if d := b.Next(); d < UpMax/2 || d > UpMax {
		t.Fatalf("attempt 1000 after a link: %v", d)
	}
}

// Before any link the delay doubles up to max; once a handshake has
// completed, no delay exceeds UpMax however many dials fail after it, and
// the first after it is min (issue 26: a client serves again soon after
// its server returns from an outage of any length).
func TestBackoffAfterLink(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	var d time.Duration
	for range 12 {
		d = b.Next()
	}
	if d < b.Max/2 {
		t.Fatalf("never linked: delay %v after 12 failures, want up to max %v", d, b.Max)
	}
	b.LinkedUp()
	if d := b.Next(); d != b.Min {
		t.Fatalf("first delay after a link: %v, want %v", d, b.Min)
	}
	for i := range 100 {
		if d := b.Next(); d > UpMax || d < b.Min {
			t.Fatalf("delay %d after a link: %v, want in [%v, %v]", i, d, b.Min, UpMax)
		}
	}
	// A max below UpMax still rules; a min above it is the floor.
	low := Backoff{Min: 10 * time.Millisecond, Max: 200 * time.Millisecond, linked: true, attempt: 50}
	if d := low.Next(); d > low.Max {
		t.Fatalf("max %v: delay %v", low.Max, d)
	}
	high := Backoff{Min: 5 * time.Second, Max: time.Minute, linked: true, attempt: 50}
	if d := high.Next(); d != high.Min {
		t.Fatalf("min %v: delay %v", high.Min, d)
	}
}

// A failure repeated is logged at Warn once per repeatEvery, with the
// count of repeats not logged; a new message is logged at once.
func TestRepeatLog(t *testing.T) {
	var r RepeatLog
	if lvl, n := r.Level("a: refused"); lvl != zapcore.WarnLevel || n != 0 {
		t.Fatalf("first: %v %d", lvl, n)
	}
	for range 3 {
		if lvl, _ := r.Level("a: refused"); lvl != zapcore.DebugLevel {
			t.Fatalf("repeat logged at %v", lvl)
		}
	}
	if lvl, n := r.Level("a: timeout"); lvl != zapcore.WarnLevel || n != 3 {
		t.Fatalf("new message: %v, %d not logged; want warn, 3", lvl, n)
	}
	r.logged = r.logged.Add(-repeatEvery)
	if lvl, _ := r.Level("a: timeout"); lvl != zapcore.WarnLevel {
		t.Fatalf("repeat after repeatEvery: %v", lvl)
	}
}
