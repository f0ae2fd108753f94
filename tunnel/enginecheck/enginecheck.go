// Package enginecheck is trust, but verify, for the engines of one server
// or client: the known-answer tests at start and on a period, the frames
// done again in software, the stall watch, and taking a failing engine out
// of the policy. It knows engines and the record layer, never a Server, a
// Client or a link.
package enginecheck

import (
	"cmp"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Trust, but verify. The tag covers whatever an engine
// produced, so an engine that silently computes wrong answers would
// corrupt data under valid tags. Two checks catch one:
//
//   - the known-answer test (engine.SelfTest, the SP 800-38A vector of the
//     suite's cipher, both directions; for an engine that seals whole
//     frames of an hmac-sha256 suite also engine.SelfTestFrame, the same
//     vector sealed, opened and forged as one frame) on every engine when
//     the server or client starts (Guard.Check) and every
//     EngineCheckInterval after;
//   - with Verify N, one in N frames an engine other than software sealed
//     or opened is done again in software and compared before it is sent
//     or delivered (record.Verifier); a mismatch is redone in software.
//
// And one watch: a frame whose request to an engine has not come back
// after DefaultStallTimeout (a device or driver that lost it) is
// taken over and redone in software (record.StallWatch); the link and its
// streams go on after that delay.
//
// An engine that does not answer its known-answer test within
// DefaultTimeout (a device whose driver hangs) fails it: the
// start and the periodic rounds go on without it. Its test goroutine
// stays blocked in the driver; nothing else waits for it.
//
// An engine that fails either is taken out: the policy stops picking it
// (record.Excluder; both the pinned policy and the selector's implement
// it), one error is logged, and the failures are counted in /metrics.
// It stays out until the process restarts. A failing software engine can
// not be taken out (it is every other engine's fallback); it is logged
// and counted.

// DefaultTimeout bounds one engine's known-answer test: the
// vector is 64 bytes, which the slowest device answers in milliseconds.
const DefaultTimeout = 10 * time.Second

// DefaultStallTimeout is how long a frame may wait for an engine
// before record.StallWatch redoes it in software: far beyond a real
// request (a 1 MiB frame at 2 MB/s takes 0.5 s), and under yamux's 10 s
// write timeout, which would cut the link.
const DefaultStallTimeout = 5 * time.Second

// Check kinds, the label of offload_engine_check_failures_total.
const (
	KAT    = "kat"
	Verify = "verify"
	Stall  = "stall"
)

// Config is what a Guard checks: the options' suite, engines, policy
// and Verify.
type Config struct {
	Suite   suite.Suite
	Engines []engine.Engine
	Policy  record.Policy // taken out of if it is a record.Excluder
	Verify  int           // one in Verify frames redone in software; 0: none
	// Timeout and StallTimeout override DefaultTimeout and
	// DefaultStallTimeout when not 0 (tests).
	Timeout, StallTimeout time.Duration
}

// Guard runs the checks for the engines of one server or client.
type Guard struct {
	cipher   engine.Cipher
	frames   bool // the suite's frames may go whole to a FrameEngine
	engines  []engine.Engine
	excluder record.Excluder    // nil: the policy can't take engines out
	Verifier *record.Verifier   // nil without Verify or with software alone
	Stall    *record.StallWatch // nil with software alone
	log      *zap.Logger
	timeout  time.Duration // one engine's known-answer test

	mu          sync.Mutex    // one known-answer round at a time
	Rounds      atomic.Uint64 // known-answer rounds over
	KATFailures [record.MaxEngines]atomic.Uint64
	out         [record.MaxEngines]atomic.Bool
}

// New returns the guard of c's engines, logging to log.
func New(c Config, log *zap.Logger) *Guard {
	g := &Guard{cipher: c.Suite.Cipher, frames: c.Suite.MAC == suite.HMACSHA256, engines: c.Engines, log: log.Named("engine-check"),
		timeout: cmp.Or(c.Timeout, DefaultTimeout)}
	g.excluder, _ = c.Policy.(record.Excluder)
	if c.Verify > 0 && len(c.Engines) > 1 {
		g.Verifier = record.NewVerifier(c.Verify, func(idx int, err error) { g.takeOut(idx, Verify, err) })
	}
	if len(c.Engines) > 1 {
		g.Stall = record.NewStallWatch(cmp.Or(c.StallTimeout, DefaultStallTimeout),
			func(idx int, err error) { g.takeOut(idx, Stall, err) })
	}
	return g
}

// Check runs the known-answer test on every engine not already out. The
// round is counted when it is over, so Rounds > 0 means every engine has
// had its check at start (a test that breaks an engine after it can not
// race the check).
func (g *Guard) Check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.Rounds.Add(1)
	for idx, e := range g.engines {
		if g.out[idx].Load() {
			continue
		}
		if err := g.selfTest(e); err != nil {
			g.KATFailures[idx].Add(1)
			g.takeOut(idx, KAT, err)
		}
	}
}

// selfTest runs e's known-answer tests, giving up after g.timeout.
func (g *Guard) selfTest(e engine.Engine) error {
	done := make(chan error, 1) // the test may finish after we gave up
	go func() {
		err := engine.SelfTest(e, g.cipher)
		if fe, ok := e.(engine.FrameEngine); ok && err == nil && g.frames {
			// The record layer gives it whole frames too (wholeframe.go):
			// its sealer is checked as well as its Crypters.
			err = engine.SelfTestFrame(fe, g.cipher)
		}
		done <- err
	}()
	t := time.NewTimer(g.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w: no answer within %v (the device or its driver hangs)", engine.ErrSelfTest, g.timeout)
	}
}

// takeOut takes engine idx out of the policy after it failed check, and
// logs that once per engine (later failures are only counted, so a peer
// can't make it log per frame).
func (g *Guard) takeOut(idx int, check string, err error) {
	if idx < 0 || idx >= len(g.engines) || !g.out[idx].CompareAndSwap(false, true) {
		return
	}
	name := g.engines[idx].Name()
	switch {
	case idx == 0:
		// Software is the fallback of every other engine: keep it, but
		// say loudly that this machine's AES is broken. Clear the flag so
		// the next round checks it again.
		g.out[idx].Store(false)
		g.log.Error("the software engine failed its check; it stays in use as every engine's fallback",
			zap.String("check", check), zap.Error(err))
	case g.excluder == nil:
		g.log.Error("engine failed its check, but the policy can not take it out",
			zap.String("engine", name), zap.String("check", check), zap.Error(err))
	default:
		g.excluder.Exclude(idx, err)
		g.log.Error("engine failed its check and is taken out; its frames go to software until restart",
			zap.String("engine", name), zap.String("check", check), zap.Error(err))
	}
}

// IsOut reports whether engine idx was taken out.
func (g *Guard) IsOut(idx int) bool { return g.out[idx].Load() }

// Stalls returns how many of engine idx's frames were taken over.
func (g *Guard) Stalls(idx int) uint64 {
	if g.Stall == nil {
		return 0
	}
	return g.Stall.Stalls[idx].Load()
}

// VerifyCounts returns engine idx's verified frames and mismatches.
func (g *Guard) VerifyCounts(idx int) (checked, mismatches uint64) {
	if g.Verifier == nil {
		return 0, 0
	}
	return g.Verifier.Checked[idx].Load(), g.Verifier.Mismatches[idx].Load()
}
