package tunnel

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// pinned is the Policy for a single chosen engine: every frame goes to
// Engines[idx]; the record layer redoes a frame it failed in software
// (Engines[0]) and counts it. Once the engine checks (enginecheck.go)
// exclude it, every frame goes to software.
type pinned struct {
	idx int
	out atomic.Bool
}

var _ record.Excluder = (*pinned)(nil)

func (p *pinned) Pick(int, engine.Direction) int {
	if p.out.Load() {
		return 0
	}
	return p.idx
}

// Exclude implements record.Excluder.
func (p *pinned) Exclude(idx int, _ error) {
	if idx == p.idx && idx != 0 {
		p.out.Store(true)
	}
}

// EngineOptions are what EngineSetup needs beyond the spec and suite.
type EngineOptions struct {
	Logger *zap.Logger
	// MaxFrame is the largest frame the selector must cover (auto,
	// hybrid); 0 means the record layer's default.
	MaxFrame int
	// Profile is the selector's calibration profile path; "" means
	// selector.DefaultPath().
	Profile string
	// Stats must be the record.Stats the links count into (Options.Stats),
	// so the selector can take out an engine whose frames keep failing.
	Stats *record.Stats
}

// EngineSetup maps an engine spec from the config to the record layer's
// Engines and Policy: "software" is software alone; "afalg",
// "afalg:DRIVER" and "cryptodev" are [software, that engine] with every
// frame sent to the engine; "auto" and "hybrid" are the selector's
// per-frame-size choice from a calibration profile (measured now if it is
// missing or stale). A named engine must serve s's cipher now: if it
// can't, EngineSetup returns the engine's reason (wrapping
// engine.ErrUnavailable) and the caller must not start; there is no silent
// fallback.
func EngineSetup(ctx context.Context, spec string, s suite.Suite, o EngineOptions) ([]engine.Engine, record.Policy, error) {
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if spec == "auto" || spec == "hybrid" {
		maxFrame := o.MaxFrame
		if maxFrame == 0 {
			maxFrame = record.DefaultMaxFrame
		}
		return selector.Setup(ctx, spec, s.Cipher, o.Profile, selector.SetupOptions{Logger: log, MaxFrame: maxFrame, Stats: o.Stats})
	}
	opts := engine.Options{Logger: log}
	e, err := engine.Open(spec, opts)
	if err != nil {
		return nil, nil, err
	}
	if e.Name() == engine.SoftwareName {
		return []engine.Engine{engine.Software{}}, record.SoftwareOnly{}, nil
	}
	drv, err := e.Driver(s.Cipher)
	if err != nil {
		return nil, nil, fmt.Errorf("engine %s can not serve %v: %w", spec, s.Cipher, err)
	}
	// Driver says the algorithm is there; make sure a keyed Crypter gives
	// the known answers too before the first frame depends on it. The
	// engine was asked for by name, so a wrong answer stops the start.
	if err := engine.SelfTest(e, s.Cipher); err != nil {
		return nil, nil, fmt.Errorf("engine %s (%v) fails %v: %w", spec, drv, s.Cipher, err)
	}
	log.Info("engine", zap.String("spec", spec), zap.Stringer("cipher", s.Cipher), zap.Stringer("driver", drv))
	return []engine.Engine{engine.Software{}, e}, &pinned{idx: 1}, nil
}
