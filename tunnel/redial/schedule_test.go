package redial

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The schedule a connection finding no link decides on, without a client:
// a dial under way is waited for; a failed dial wakes the waiting
// connections and schedules the next; a waiting connection brings that
// dial forward (Sleep wakes) unless pokeFloor after the last dial began
// is past its deadline.
func TestSchedule(t *testing.T) {
	s := NewSchedule(time.Hour)
	if _, ok := s.BringForward(time.Now()); !ok {
		t.Fatal("the first dial under way: a connection may not wait for it")
	}
	dialing, _, failed, lastErr := s.State()
	if !dialing || lastErr != nil {
		t.Fatalf("before the first dial's end: dialing %v, last error %v", dialing, lastErr)
	}

	refused := errors.New("connection refused")
	s.DialStart()
	s.Retry(refused, time.Hour)
	select {
	case <-failed:
	default:
		t.Fatal("Retry did not wake the connections waiting for the failed dial")
	}
	dialing, next, _, lastErr := s.State()
	if dialing || lastErr != refused || time.Until(next) < 59*time.Minute {
		t.Fatalf("after a failed dial: dialing %v, next in %v, last error %v", dialing, time.Until(next), lastErr)
	}
	// The last dial began just now: pokeFloor (an hour) after it is past
	// a minute's deadline, so the dial stays where it is.
	if at, ok := s.BringForward(time.Now().Add(time.Minute)); ok || !at.Equal(next) {
		t.Fatalf("brought forward to %v (ok %v) within pokeFloor of the last dial", at, ok)
	}

	// A schedule whose floor has passed: the dial comes now, and Sleep wakes.
	s = NewSchedule(0)
	s.Retry(refused, time.Hour)
	at, ok := s.BringForward(time.Now().Add(time.Minute))
	if !ok || time.Until(at) > time.Minute {
		t.Fatalf("brought forward to %v from now (ok %v); want now", time.Until(at), ok)
	}
	if dialing, n, _, _ := s.State(); !n.Equal(at) || dialing {
		t.Fatalf("State: next %v, dialing %v; want %v, false", n, dialing, at)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if !s.Sleep(ctx) {
		t.Fatal("Sleep did not wake for the dial brought forward")
	}
	s.Retry(refused, time.Hour)
	cancel()
	if s.Sleep(ctx) {
		t.Fatal("Sleep with its context over: true")
	}
}
