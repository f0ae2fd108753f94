package selector

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
)

// Specs Setup accepts.
const (
	SpecAuto   = "auto"
	SpecHybrid = "hybrid"
)

// DefaultSetupDuration is the time per run when Setup measures at
// start-up: short, so that a router starts within seconds.
const DefaultSetupDuration = 30 * time.Millisecond

// SetupOptions configure Setup.
type SetupOptions struct {
	// Logger gets why a profile is measured, the progress, the bands in
	// use and, when software serves every size, each engine's reason.
	Logger *zap.Logger
	// MaxFrame is the links' max_frame (tunnel.Options.MaxFrame); 0
	// means record.DefaultMaxFrame (frameSize). A profile measured up to
	// less is measured again.
	MaxFrame int
	// Duration is the time per run when measuring; 0 means
	// DefaultSetupDuration.
	Duration time.Duration
	// Stats and FailThreshold: see PolicyOptions. Give the same Stats to
	// record.Options.Stats.
	Stats         *record.Stats
	FailThreshold uint64
	// Progress, if set, gets every calibration run (a console); the
	// logger gets a line per tenth in any case.
	Progress func(Progress)

	engines func(engine.Cipher) []engine.Engine // tests
	machine *machine                            // tests
	measure measureFunc                         // tests
	push    pushFunc                            // tests
}

// Setup is the selector for the tunnel's `engine: auto|hybrid`. It loads
// the profile at path ("" means DefaultPath), checks that it still
// describes this machine (Check), measures c in both directions when the
// profile is missing, unreadable, stale, measured for smaller frames or
// without c (a short calibration, progress to the logger), saves it
// (a failure to save is logged, not fatal: the policy works from memory),
// and returns the engines for record.Options.Engines and the Policy.
func Setup(ctx context.Context, spec string, c engine.Cipher, path string, o SetupOptions) ([]engine.Engine, record.Policy, error) {
	if spec != SpecAuto && spec != SpecHybrid {
		return nil, nil, fmt.Errorf("selector: %w %q (want %s or %s)", engine.ErrUnknownEngine, spec, SpecAuto, SpecHybrid)
	}
	if !c.Valid() {
		return nil, nil, fmt.Errorf("%w: %v", ErrNoCipher, c)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("selector")
	if path == "" {
		path = DefaultPath()
	}
	o.MaxFrame = frameSize(o.MaxFrame)
	if o.Duration <= 0 {
		o.Duration = DefaultSetupDuration
	}
	m := thisMachine(engine.Options{Logger: log})
	if o.machine != nil {
		m = *o.machine
	}
	engines := o.engines
	if engines == nil {
		engines = m.Discover
	}

	if note := engine.KernelAFALGNote(); note != "" {
		// The profile's afalg rows are then CPU code, whatever the
		// devices /proc/crypto lists; say so once per start.
		log.Info(note)
	}
	p, reason := loadFresh(path, c, o.MaxFrame, m)
	if reason != "" {
		log.Info("measuring engines", zap.String("profile", path), zap.String("why", reason),
			zap.Stringer("cipher", c), zap.Duration("per_run", o.Duration))
		start := time.Now()
		tenth := -1
		cfg := Config{
			Ciphers: []engine.Cipher{c}, Engines: engines, MaxFrame: o.MaxFrame, Duration: o.Duration,
			Logger: log, machine: &m, measure: o.measure, push: o.push,
			Progress: func(pr Progress) {
				if o.Progress != nil {
					o.Progress(pr)
				}
				if t := 10 * pr.Done / max(pr.Total, 1); t != tenth {
					tenth = t
					log.Info("measuring", zap.Int("percent", 10*t), zap.String("table", pr.Cipher.String()+" "+pr.Direction.String()),
						zap.String("engine", pr.Engine), zap.Int("size", pr.Size))
				}
			},
		}
		fresh, err := Calibrate(ctx, cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("selector: measuring engines: %w", err)
		}
		if p == nil {
			p = fresh
		} else {
			for _, t := range fresh.Tables {
				p.put(t)
			}
		}
		log.Info("measured", zap.Duration("took", time.Since(start).Round(time.Millisecond)))
		if err := Save(path, p); err != nil {
			log.Warn("profile not saved; it will be measured again at the next start", zap.Error(err))
		}
	}
	pol, err := NewPolicy(p, c, PolicyOptions{
		Hybrid: spec == SpecHybrid, Stats: o.Stats, FailThreshold: o.FailThreshold, Logger: o.Logger,
	})
	if err != nil {
		return nil, nil, err
	}
	explain(log, spec, p, c)
	return pol.Engines(), pol, nil
}

// loadFresh loads the profile at path and returns it with "" when it can
// serve c for frames up to maxFrame; otherwise why it must be measured,
// and the profile to add c to (nil: start a new one).
func loadFresh(path string, c engine.Cipher, maxFrame int, m machine) (*Profile, string) {
	p, err := Load(path)
	switch {
	case isNotExist(err):
		return nil, "no profile yet"
	case err != nil:
		return nil, err.Error()
	}
	if err := check(p, m); err != nil {
		return nil, err.Error()
	}
	if p.MaxFrame < maxFrame {
		return nil, fmt.Sprintf("profile measured frames up to %d bytes, frames go up to %d", p.MaxFrame, maxFrame)
	}
	for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		if _, err := p.Table(c, d); err != nil {
			return p, err.Error()
		}
	}
	return p, ""
}

// explain logs the bands in use and, when software serves every size in
// both directions, why each other engine is not used.
func explain(log *zap.Logger, spec string, p *Profile, c engine.Cipher) {
	allSoftware := true
	for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		t, err := p.Table(c, d)
		if err != nil {
			continue
		}
		log.Info("engine "+spec, zap.Stringer("cipher", c), zap.Stringer("direction", d), zap.String("bands", FormatBands(t.Bands)))
		for _, b := range t.Bands {
			allSoftware = allSoftware && b.Engine == engine.SoftwareName
		}
	}
	if !allSoftware {
		return
	}
	var why []string
	t, _ := p.Table(c, engine.Encrypt)
	if t != nil {
		for _, e := range t.Engines {
			if e.Name != engine.SoftwareName {
				why = append(why, e.Name+": "+engineReason(t, e))
			}
		}
	}
	log.Info("engine "+spec+": software serves every frame size", zap.Stringer("cipher", c), zap.Strings("why_not", why))
}

// engineReason says why e wins no band of t.
func engineReason(t *Table, e EngineInfo) string {
	switch {
	case e.Unavailable != "":
		return "unavailable: " + e.Unavailable
	case e.Failed != "":
		return "failed: " + e.Failed
	}
	best, at := 0.0, 0
	for _, pt := range t.Points {
		sw, x := pt.BPS[engine.SoftwareName], pt.BPS[e.Name]
		if sw > 0 && x/sw > best {
			best, at = x/sw, pt.Size
		}
	}
	return fmt.Sprintf("slower than software at every size (best %.2fx at %d bytes, %s)", best, at, driverName(e))
}

func driverName(e EngineInfo) string {
	if e.Driver == nil {
		return "no driver"
	}
	return strings.TrimSpace(e.Driver.String())
}
