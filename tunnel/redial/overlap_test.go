package redial

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// fakeClock is Overlap's clock in a test: every timer Race asks for
// comes out on timers, and fires when the test says.
type fakeClock struct{ timers chan fakeTimer }

type fakeTimer struct {
	d time.Duration
	c chan time.Time
}

func (f fakeClock) after(d time.Duration) <-chan time.Time {
	t := fakeTimer{d, make(chan time.Time, 1)}
	f.timers <- t
	return t.c
}

// fakeDials are the attempts Race starts: each comes out on calls and
// returns what the test sends it, whether or not its context has ended
// (a connect may complete as it is cancelled).
type fakeDials struct{ calls chan fakeDial }

type fakeDial struct {
	ctx   context.Context
	reply chan error // nil: connect
	conn  *fakeConn
}

type fakeConn struct {
	net.Conn
	closed chan struct{}
}

func (c *fakeConn) Close() error { close(c.closed); return nil }

func (f fakeDials) dial(ctx context.Context) (net.Conn, error) {
	d := fakeDial{ctx, make(chan error), &fakeConn{closed: make(chan struct{})}}
	f.calls <- d
	if err := <-d.reply; err != nil {
		return nil, err
	}
	return d.conn, nil
}

func newOverlap() (Overlap, fakeClock, fakeDials) {
	clk := fakeClock{make(chan fakeTimer, 8)}
	o := Overlap{Attempts: 4, Round: time.Second, Max: 10 * time.Second, after: clk.after}
	return o, clk, fakeDials{make(chan fakeDial, 8)}
}

type raced struct {
	c   net.Conn
	err error
}

func race(o Overlap, n int, d fakeDials) chan raced {
	out := make(chan raced, 1)
	go func() {
		c, err := o.Race(context.Background(), n, d.dial)
		out <- raced{c, err}
	}()
	return out
}

// A round on its own clock: the first attempt at once, the next one a
// quarter round later, whether the first is still under way or has
// failed; the first to connect wins, and the one still under way is
// cancelled and, if it connects all the same, closed.
func TestOverlapRace(t *testing.T) {
	o, clk, d := newOverlap()
	out := race(o, 0, d)
	a := <-d.calls
	if end := <-clk.timers; end.d != time.Second {
		t.Fatalf("round end after %v; want 1s", end.d)
	}
	tick := <-clk.timers
	if tick.d != 250*time.Millisecond {
		t.Fatalf("next attempt after %v; want 250ms", tick.d)
	}
	a.reply <- errors.New("network is unreachable")
	select {
	case c := <-d.calls:
		t.Fatalf("an attempt started before its time (%v)", c)
	case r := <-out:
		t.Fatalf("the round ended with its first failure: %v", r.err)
	case tick2 := <-clk.timers:
		t.Fatalf("a timer (%v) before the tick fired", tick2.d)
	default:
	}
	tick.c <- time.Time{}
	b := <-d.calls // under way (a SYN on a dead path)
	tick = <-clk.timers
	tick.c <- time.Time{}
	c := <-d.calls
	<-clk.timers // the fourth attempt's
	c.reply <- nil
	r := <-out
	if r.err != nil || r.c != c.conn {
		t.Fatalf("Race = %v, %v; want the third attempt's connection", r.c, r.err)
	}
	<-b.ctx.Done() // the loser is cancelled
	b.reply <- b.ctx.Err()
}

// A loser that connects as the winner does is closed at once, not leaked
// (it costs the server a slot until it sees the close).
func TestOverlapLoserClosed(t *testing.T) {
	o, clk, d := newOverlap()
	out := race(o, 0, d)
	a := <-d.calls
	<-clk.timers
	tick := <-clk.timers
	tick.c <- time.Time{}
	b := <-d.calls
	<-clk.timers
	// b answers first; a's connect completes all the same.
	b.reply <- nil
	if r := <-out; r.err != nil || r.c != b.conn {
		t.Fatalf("Race = %v, %v; want the second attempt's connection", r.c, r.err)
	}
	a.reply <- nil
	<-a.conn.closed
}

// At most Attempts a round, however fast they fail (a path without a
// route fails at once); the round ends when the last has failed, with
// its error. A round that nothing answers ends at its end, with the
// attempts' context.
func TestOverlapBounded(t *testing.T) {
	o, clk, d := newOverlap()
	out := race(o, 0, d)
	unreachable := errors.New("network is unreachable")
	<-clk.timers
	for i := range 4 {
		a := <-d.calls
		a.reply <- unreachable
		if i < 3 {
			tick := <-clk.timers
			tick.c <- time.Time{}
		}
	}
	if r := <-out; !errors.Is(r.err, unreachable) {
		t.Fatalf("a round of failures: %v; want the last one's error", r.err)
	}
	select {
	case c := <-d.calls:
		t.Fatalf("a fifth attempt in a round of four (%v)", c)
	default:
	}

	out = race(o, 0, d)
	a := <-d.calls
	end := <-clk.timers
	<-clk.timers
	end.c <- time.Time{}
	if r := <-out; r.err == nil || r.c != nil {
		t.Fatalf("a round nobody answered: %v, %v", r.c, r.err)
	}
	<-a.ctx.Done()
	a.reply <- a.ctx.Err()
}

// One attempt a round is a plain dial bounded by the round; rounds get
// longer every 32, up to Max, for a path slower than a round.
func TestOverlapRounds(t *testing.T) {
	o, clk, d := newOverlap()
	o.Attempts = 1
	out := race(o, 0, d)
	a := <-d.calls
	<-clk.timers
	select {
	case tm := <-clk.timers:
		t.Fatalf("a second timer (%v) with one attempt a round", tm.d)
	default:
	}
	refused := errors.New("connection refused")
	a.reply <- refused
	if r := <-out; !errors.Is(r.err, refused) {
		t.Fatalf("one attempt refused: %v", r.err)
	}
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{0, time.Second}, {31, time.Second}, {32, 2 * time.Second}, {64, 4 * time.Second}, {96, 8 * time.Second}, {128, 10 * time.Second}, {1 << 20, 10 * time.Second}} {
		if got := o.RoundLen(c.n); got != c.want {
			t.Errorf("RoundLen(%d) = %v; want %v", c.n, got, c.want)
		}
	}
}
