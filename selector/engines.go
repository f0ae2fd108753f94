package selector

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
)

// Pinned is the Policy for a single chosen engine: every frame goes to
// Engines[Index]; the record layer redoes a frame it failed in software
// (Engines[0]) and counts it. Once the tunnel's engine checks exclude it,
// every frame goes to software.
type Pinned struct {
	Index int
	out   atomic.Bool
}

var _ record.Excluder = (*Pinned)(nil)

// Pick implements record.Policy.
func (p *Pinned) Pick(int, engine.Direction) int {
	if p.out.Load() {
		return 0
	}
	return p.Index
}

// Exclude implements record.Excluder.
func (p *Pinned) Exclude(idx int, _ error) {
	if idx == p.Index && idx != 0 {
		p.out.Store(true)
	}
}

// EngineOptions are what Engines needs beyond the spec and cipher.
type EngineOptions struct {
	Logger *zap.Logger
	// MaxFrame is the largest frame the selector must cover (auto,
	// hybrid): the links' max_frame; 0 means the record layer's default
	// (frameSize).
	MaxFrame int
	// Profile is the selector's calibration profile path; "" means
	// DefaultPath().
	Profile string
	// Stats must be the record.Stats the links count into (Options.Stats),
	// so the selector can take out an engine whose frames keep failing.
	Stats *record.Stats
}

// Engines maps an engine spec (a config's engine:, bench's -policy) to the
// record layer's Engines and Policy, the one place that builds them. The
// spec is checked by CheckSpec, as config validation checks it. "software"
// is software alone; every other engine of the registry (engine.Specs:
// afalg[:DRIVER], afalg-aead[:DRIVER], cryptodev[:hw]) is [software, that
// engine] with every frame sent to the engine; "auto" and "hybrid" are the selector's
// per-frame-size choice from a calibration profile (measured now if it is
// missing or stale). A named engine must serve s's cipher now: if it
// can't, Engines returns the engine's reason (wrapping
// engine.ErrUnavailable) and the caller must not start; there is no silent
// fallback.
func Engines(ctx context.Context, spec string, c engine.Cipher, o EngineOptions) ([]engine.Engine, record.Policy, error) {
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	// The same check config validation makes, so a spec that validated
	// never fails here for its syntax, and one that did not never runs.
	if err := CheckSpec(spec); err != nil {
		return nil, nil, err
	}
	if IsPolicy(spec) {
		return Setup(ctx, spec, c, o.Profile, SetupOptions{Logger: log, MaxFrame: o.MaxFrame, Stats: o.Stats})
	}
	opts := engine.Options{Logger: log}
	e, err := engine.Open(spec, opts)
	if err != nil {
		return nil, nil, err
	}
	if e.Name() == engine.SoftwareName {
		return []engine.Engine{engine.Software{}}, record.SoftwareOnly{}, nil
	}
	drv, err := e.Driver(c)
	if err != nil {
		return nil, nil, fmt.Errorf("engine %s can not serve %v: %w", spec, c, err)
	}
	// Driver says the algorithm is there; make sure a keyed Crypter gives
	// the known answers too before the first frame depends on it. The
	// engine was asked for by name, so a wrong answer stops the start.
	if err := engine.SelfTest(e, c); err != nil {
		return nil, nil, fmt.Errorf("engine %s (%v) fails %v: %w", spec, drv, c, err)
	}
	log.Info("engine", zap.String("spec", spec), zap.Stringer("cipher", c), zap.Stringer("driver", drv))
	return []engine.Engine{engine.Software{}, e}, &Pinned{Index: 1}, nil
}
