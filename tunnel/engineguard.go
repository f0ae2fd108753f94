package tunnel

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/enginecheck"
)

// newEngineGuard makes the engine checks (tunnel/enginecheck) of o's
// engines for a server or a client.
func newEngineGuard(o *Options, log *zap.Logger) *enginecheck.Guard {
	return enginecheck.New(enginecheck.Config{Suite: o.Suite, Engines: o.Engines, Policy: o.Policy, Verify: o.Verify,
		Timeout: o.engineCheckTimeout, StallTimeout: o.engineStallTimeout}, log)
}

// startEngineChecks runs g's first check now and the periodic ones every
// interval (a negative one: never) in a goroutine on wg until ctx ends.
func startEngineChecks(ctx context.Context, g *enginecheck.Guard, interval time.Duration, wg *sync.WaitGroup) {
	g.Check()
	wg.Add(1)
	go func() {
		defer wg.Done()
		every(ctx, interval, g.Check)
	}()
}
