package tunnel

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Engine checks: trust, but verify. The tag covers whatever an engine
// produced, so an engine that silently computes wrong answers would
// corrupt data under valid tags. Two checks catch one:
//
//   - the known-answer test (engine.SelfTest, the SP 800-38A vector of the
//     suite's cipher, both directions; for an engine that seals whole
//     frames of an hmac-sha256 suite also engine.SelfTestFrame, the same
//     vector sealed, opened and forged as one frame) on every engine when
//     the server or client starts and every EngineCheckInterval after;
//   - with Verify N, one in N frames an engine other than software sealed
//     or opened is done again in software and compared before it is sent
//     or delivered (record.Verifier); a mismatch is redone in software.
//
// And one watch: a frame whose request to an engine has not come back
// after DefaultEngineStallTimeout (a device or driver that lost it) is
// taken over and redone in software (record.StallWatch); the link and its
// streams go on after that delay.
//
// An engine that does not answer its known-answer test within
// DefaultEngineCheckTimeout (a device whose driver hangs) fails it: the
// start and the periodic rounds go on without it. Its test goroutine
// stays blocked in the driver; nothing else waits for it.
//
// An engine that fails either is taken out: the policy stops picking it
// (record.Excluder; both the pinned policy and the selector's implement
// it), one error is logged, and the failures are counted in /metrics.
// It stays out until the process restarts. A failing software engine can
// not be taken out (it is every other engine's fallback); it is logged
// and counted.

// DefaultEngineCheckTimeout bounds one engine's known-answer test: the
// vector is 64 bytes, which the slowest device answers in milliseconds.
const DefaultEngineCheckTimeout = 10 * time.Second

// DefaultEngineStallTimeout is how long a frame may wait for an engine
// before record.StallWatch redoes it in software: far beyond a real
// request (a 1 MiB frame at 2 MB/s takes 0.5 s), and under yamux's 10 s
// write timeout, which would cut the link.
const DefaultEngineStallTimeout = 5 * time.Second

// Check kinds, the label of offload_engine_check_failures_total.
const (
	checkKAT    = "kat"
	checkVerify = "verify"
	checkStall  = "stall"
)

// engineGuard runs the checks for the engines of one server or client.
type engineGuard struct {
	cipher   engine.Cipher
	frames   bool // the suite's frames may go whole to a FrameEngine
	engines  []engine.Engine
	excluder record.Excluder // nil: the policy can't take engines out
	verifier *record.Verifier
	stall    *record.StallWatch // nil with software alone
	log      *zap.Logger
	timeout  time.Duration // one engine's known-answer test

	mu          sync.Mutex // one known-answer round at a time
	rounds      atomic.Uint64
	katFailures [record.MaxEngines]atomic.Uint64
	out         [record.MaxEngines]atomic.Bool
}

func newEngineGuard(o *Options, log *zap.Logger) *engineGuard {
	g := &engineGuard{cipher: o.Suite.Cipher, frames: o.Suite.MAC == suite.HMACSHA256, engines: o.Engines, log: log.Named("engine-check"),
		timeout: cmp.Or(o.engineCheckTimeout, DefaultEngineCheckTimeout)}
	g.excluder, _ = o.Policy.(record.Excluder)
	if o.Verify > 0 && len(o.Engines) > 1 {
		g.verifier = record.NewVerifier(o.Verify, func(idx int, err error) { g.takeOut(idx, checkVerify, err) })
	}
	if len(o.Engines) > 1 {
		g.stall = record.NewStallWatch(cmp.Or(o.engineStallTimeout, DefaultEngineStallTimeout),
			func(idx int, err error) { g.takeOut(idx, checkStall, err) })
	}
	return g
}

// check runs the known-answer test on every engine not already out. The
// round is counted when it is over, so rounds > 0 means every engine has
// had its check at start (a test that breaks an engine after it can not
// race the check).
func (g *engineGuard) check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer g.rounds.Add(1)
	for idx, e := range g.engines {
		if g.out[idx].Load() {
			continue
		}
		if err := g.selfTest(e); err != nil {
			g.katFailures[idx].Add(1)
			g.takeOut(idx, checkKAT, err)
		}
	}
}

// selfTest runs e's known-answer tests, giving up after g.timeout.
func (g *engineGuard) selfTest(e engine.Engine) error {
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

// loop runs check every interval until ctx ends; a negative interval
// means never.
func (g *engineGuard) loop(ctx context.Context, interval time.Duration) {
	every(ctx, interval, g.check)
}

// start runs the first check now and the periodic ones in a goroutine on
// wg until ctx ends.
func (g *engineGuard) start(ctx context.Context, interval time.Duration, wg *sync.WaitGroup) {
	g.check()
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.loop(ctx, interval)
	}()
}

// takeOut takes engine idx out of the policy after it failed check, and
// logs that once per engine (later failures are only counted, so a peer
// can't make it log per frame).
func (g *engineGuard) takeOut(idx int, check string, err error) {
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

// isOut reports whether engine idx was taken out.
func (g *engineGuard) isOut(idx int) bool { return g.out[idx].Load() }

// stalls returns how many of engine idx's frames were taken over.
func (g *engineGuard) stalls(idx int) uint64 {
	if g.stall == nil {
		return 0
	}
	return g.stall.Stalls[idx].Load()
}

// verifyCounts returns engine idx's verified frames and mismatches.
func (g *engineGuard) verifyCounts(idx int) (checked, mismatches uint64) {
	if g.verifier == nil {
		return 0, 0
	}
	return g.verifier.Checked[idx].Load(), g.verifier.Mismatches[idx].Load()
}
