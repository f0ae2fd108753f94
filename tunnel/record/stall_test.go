package record

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
	"github.com/offload-dev/offload/tunnel/suite"
)

// excludable picks engine 1 for frames of direction dir until Exclude.
type excludable struct {
	dir engine.Direction
	out atomic.Bool
}

func (p *excludable) Pick(_ int, dir engine.Direction) int {
	if dir == p.dir && !p.out.Load() {
		return 1
	}
	return 0
}

func (p *excludable) Exclude(int, error) { p.out.Store(true) }

// An engine whose requests stop coming back, on the sealing end and on the
// opening end, through its Crypters and whole-frame sealers: each stalled
// frame is taken over after the StallWatch's timeout and redone in
// software, every byte arrives in order, the link stays up, the engine is
// reported (and, when the policy takes it out, used no more), and Close
// returns while the requests are still stuck in the "driver". Without
// the watchdog the first stuck frame holds every frame behind it and the
// round trip never ends.
func TestStallTakesOverFrames(t *testing.T) {
	type tc struct {
		name    string
		dp      DataPath
		s       suite.Suite
		dir     engine.Direction
		whole   bool // a FrameEngine (afalg-aead's path)
		exclude bool // onStall takes the engine out
		total   int
	}
	var cases []tc
	for _, dp := range []DataPath{DataPathPipeline, DataPathInline} {
		for _, dir := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
			for _, whole := range []bool{false, true} {
				s := ctr256
				if whole {
					s = cbc128
				}
				name := dp.String() + "/" + dir.String() + "/" + map[bool]string{false: "crypter", true: "whole"}[whole]
				cases = append(cases,
					tc{name + "/excluded", dp, s, dir, whole, true, 512 << 10},
					tc{name + "/kept", dp, s, dir, whole, false, 96 << 10})
			}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hang := make(chan struct{})
			var released sync.Once
			release := func() { released.Do(func() { close(hang) }) }
			t.Cleanup(release)
			var e engine.Engine
			var calls func() uint64
			if c.whole {
				fe := &enginetest.FaultyFrames{Bad: func(uint64) bool { return false }, Hang: hang, HangAfter: 3}
				e, calls = fe, fe.Ops
			} else {
				fe := &enginetest.Faulty{Bad: func(uint64) bool { return false }, Hang: hang, HangAfter: 3}
				e, calls = fe, fe.Calls
			}
			pol := &excludable{dir: c.dir}
			var mu sync.Mutex
			var stalls []error
			sw := NewStallWatch(100*time.Millisecond, func(idx int, err error) {
				mu.Lock()
				stalls = append(stalls, err)
				mu.Unlock()
				if idx != 1 {
					t.Errorf("stall reported for engine %d", idx)
				}
				if c.exclude {
					pol.Exclude(idx, err)
				}
			})
			oe := Options{Workers: 2, MaxFrame: 16 << 10, Engines: []engine.Engine{engine.Software{}, e}, Policy: pol, Stall: sw, DataPath: c.dp}
			oa, ob := oe, Options{Workers: 2, MaxFrame: 16 << 10, DataPath: c.dp}
			if c.dir == engine.Decrypt {
				oa, ob = ob, oe
			}
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, c.s, oa, ob)
			done := make(chan struct{})
			go func() {
				defer close(done)
				roundTrip(t, a, b, c.total, 16<<10)
			}()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				release()
				<-done
				t.Fatal("the round trip did not end with the engine hung")
			}
			if a.Err() != nil || b.Err() != nil {
				t.Fatalf("link went down: %v / %v", a.Err(), b.Err())
			}
			mu.Lock()
			n := len(stalls)
			first := error(nil)
			if n > 0 {
				first = stalls[0]
			}
			mu.Unlock()
			if n == 0 || !errors.Is(first, ErrStalled) {
				t.Fatalf("%d stalls reported (first %v), want at least one wrapping ErrStalled", n, first)
			}
			if got := sw.Stalls[1].Load(); got != uint64(n) {
				t.Errorf("Stalls[1] %d, reported %d", got, n)
			}
			ce := a
			if c.dir == engine.Decrypt {
				ce = b
			}
			if ce.DataPath() != c.dp {
				t.Fatalf("DataPath %v, want %v", ce.DataPath(), c.dp)
			}
			if got := ce.Stats().Fallbacks[1].Load(); got < uint64(n) {
				t.Errorf("%d fallbacks counted for %d stalls", got, n)
			}
			if c.exclude && n > 2 {
				// Up to one stuck request per worker before the first
				// stall took the engine out.
				t.Errorf("%d stalls with the engine taken out at the first", n)
			}
			if !c.exclude && n < 2 {
				t.Errorf("%d stalls with the engine kept in: every request after the third hangs", n)
			}
			if calls() < 3 {
				t.Errorf("the engine served %d requests", calls())
			}
			// Close must not wait for the workers stuck in the engine.
			start := time.Now()
			a.Close()
			b.Close()
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Close took %v beside stuck engine requests", d)
			}
			// The stuck requests come back late: their workers must let
			// the frames be (the race detector and goleak watch).
			release()
		})
	}
}

// Requests slower than usual but within the timeout, and workers idle
// after their last request, are not taken over.
func TestStallWatchSparesSlowRequests(t *testing.T) {
	e := &delayEngine{d: 30 * time.Millisecond}
	pol := &excludable{dir: engine.Encrypt}
	sw := NewStallWatch(300*time.Millisecond, func(int, error) { t.Error("a slow request was taken for a stall") })
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, ctr128, Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: pol, Stall: sw}, Options{})
	roundTrip(t, a, b, 256<<10, 32<<10)
	time.Sleep(time.Second) // idle workers, three timeouts long
	if e.calls.Load() == 0 {
		t.Fatal("the engine was not used")
	}
	if sw.Stalls[1].Load() != 0 || a.Stats().Fallbacks[1].Load() != 0 {
		t.Fatalf("stalls %d, fallbacks %d", sw.Stalls[1].Load(), a.Stats().Fallbacks[1].Load())
	}
}

// delayEngine is the software engine taking d per request.
type delayEngine struct {
	engine.Software
	d     time.Duration
	calls atomic.Uint64
}

func (e *delayEngine) Name() string { return "delay" }

func (e *delayEngine) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := e.Software.NewCrypter(c, key)
	return delayCrypter{cr, e}, err
}

type delayCrypter struct {
	engine.Crypter
	e *delayEngine
}

func (c delayCrypter) Encrypt(dst, src, iv []byte) error {
	c.e.calls.Add(1)
	time.Sleep(c.e.d)
	return c.Crypter.Encrypt(dst, src, iv)
}

func (c delayCrypter) Decrypt(dst, src, iv []byte) error {
	c.e.calls.Add(1)
	time.Sleep(c.e.d)
	return c.Crypter.Decrypt(dst, src, iv)
}

// A request is overdue once ticksPerTimeout whole ticks have passed since
// the tick it began in: never earlier (a request that began at the end of
// its tick has waited barely ticksPerTimeout), and idle or taken workers never.
func TestStallOverdue(t *testing.T) {
	for _, c := range []struct {
		now, v int64
		want   bool
	}{
		{5, 1, false}, // 3 whole ticks (2, 3, 4) and a part
		{6, 1, true},  // 4 whole ticks
		{6, 2, false},
		{1000, 1, true},
		{6, 0, false},         // idle
		{6, busyTaken, false}, // already taken over
		{1, 1, false},
	} {
		if got := overdue(c.now, c.v); got != c.want {
			t.Errorf("overdue(now %d, stamp %d) = %v, want %v", c.now, c.v, got, c.want)
		}
	}
}
