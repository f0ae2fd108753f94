package selector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/ratio"
	"github.com/offload-dev/offload/measure/speed"
	"github.com/offload-dev/offload/tunnel/record"
)

// Defaults of Config.
const (
	DefaultDuration    = 100 * time.Millisecond
	DefaultRepeats     = 3
	DefaultRefineSteps = 5
	DefaultMargin      = 0.03
)

// ErrNoCipher means Calibrate was given an invalid cipher.
var ErrNoCipher = errors.New("selector: invalid cipher")

// Config is one calibration.
type Config struct {
	// Ciphers to measure; default every cipher of engine.Ciphers.
	Ciphers []engine.Cipher
	// Directions to measure; default both.
	Directions []engine.Direction
	// Engines lists the engines to measure for a cipher; default
	// engine.Discover. Engines that cannot serve the cipher are recorded
	// with their reason.
	Engines func(engine.Cipher) []engine.Engine
	// MaxFrame is the largest frame size measured: a max_frame a link can
	// have (record.CheckMaxFrame, whose floor config shares); 0 means
	// record.DefaultMaxFrame (frameSize).
	MaxFrame int
	// Duration is the time of one run at one size; default DefaultDuration.
	Duration time.Duration
	// Runs is how many runs each grid point gets (median); default 1.
	// Raise it on a machine whose load changes under the measurement.
	Runs int
	// Repeats is how many runs the points next to a change of winner (and
	// close calls) get; their median counts. Default DefaultRepeats.
	Repeats int
	// RefineSteps bounds the bisection between two grid points around a
	// change of winner; default DefaultRefineSteps. Negative: none.
	RefineSteps int
	// Margin is the hysteresis against software (see Profile); default
	// DefaultMargin.
	Margin float64
	// TrialWorkers is how many frames the hybrid trial keeps in flight
	// (see HybridTrial); default DefaultTrialWorkers. Negative: no trial,
	// hybrid stays auto.
	TrialWorkers int
	// Progress, if set, is called after every run.
	Progress func(Progress)
	// Logger gets a summary per table (info) and every run (debug).
	Logger *zap.Logger

	measure measureFunc // speed.Run; tests put synthetic curves here
	push    pushFunc    // pushFrames; tests fake the hybrid trial's runs
	machine *machine    // this machine; tests fake it
}

// measureFunc is the signature of speed.Run.
type measureFunc func(context.Context, engine.Engine, speed.Config) ([]speed.Result, engine.Driver, error)

// Progress reports one finished run.
type Progress struct {
	Cipher    engine.Cipher
	Direction engine.Direction
	Phase     string // "grid", "repeat", "refine" or "hybrid" (Engine: "auto" or "hybrid")
	Engine    string
	Size      int
	BPS       float64 // bytes per second of this run
	Err       error   // the engine failed this run
	// Done runs of about Total (Total grows when refinement is planned).
	Done, Total int
}

func (c *Config) defaults() {
	if len(c.Ciphers) == 0 {
		c.Ciphers = engine.Ciphers
	}
	if len(c.Directions) == 0 {
		c.Directions = []engine.Direction{engine.Encrypt, engine.Decrypt}
	}
	if c.Engines == nil {
		c.Engines = func(ci engine.Cipher) []engine.Engine {
			return engine.Discover(ci, engine.Options{Logger: c.Logger})
		}
	}
	c.MaxFrame = frameSize(c.MaxFrame)
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.Runs <= 0 {
		c.Runs = 1
	}
	if c.Repeats <= 0 {
		c.Repeats = DefaultRepeats
	}
	c.Repeats = max(c.Repeats, c.Runs)
	if c.RefineSteps == 0 {
		c.RefineSteps = DefaultRefineSteps
	}
	if c.Margin <= 0 {
		c.Margin = DefaultMargin
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.measure == nil {
		c.measure = speed.Run
	}
	if c.push == nil {
		c.push = pushFrames
	}
	if c.TrialWorkers == 0 {
		c.TrialWorkers = DefaultTrialWorkers
	}
}

// frameSize is a MaxFrame of Config, SetupOptions or EngineOptions: 0
// is the record layer's default, what tunnel.DefaultOptions has too; any
// other value is record.CheckMaxFrame's to judge.
func frameSize(n int) int {
	if n == 0 {
		return record.DefaultMaxFrame
	}
	return n
}

// Calibrate measures every engine for every cipher and direction of cfg
// with the code of `offload speed` (measure/speed) and returns the
// profile. For each table it measures a grid of sizes (see grid), measures
// the points next to a change of winner and close calls again (median of
// Repeats runs), then bisects between the two grid points around each
// change of winner, so a crossover is found to within a few blocks rather
// than a power of two. An engine that fails is recorded as failed with its
// error and wins nothing; the calibration goes on without it. Calibrate
// returns an error only for bad input or a cancelled ctx.
func Calibrate(ctx context.Context, cfg Config) (*Profile, error) {
	cfg.defaults()
	// The record layer's rule: a profile covers frames a link can have.
	if err := record.CheckMaxFrame(cfg.MaxFrame); err != nil {
		return nil, fmt.Errorf("selector: max frame %w", err)
	}
	for _, c := range cfg.Ciphers {
		if !c.Valid() {
			return nil, fmt.Errorf("%w: %v", ErrNoCipher, c)
		}
	}
	m := thisMachine(engine.Options{Logger: cfg.Logger})
	if cfg.machine != nil {
		m = *cfg.machine
	}
	p := newProfile(m, cfg.MaxFrame)
	g := grid(cfg.MaxFrame)
	cal := &calibration{cfg: &cfg}
	for _, c := range cfg.Ciphers {
		n := 0
		for _, e := range cfg.Engines(c) {
			if _, err := e.Driver(c); err == nil {
				n++
			}
		}
		cal.total += len(cfg.Directions) * n * len(g) * cfg.Runs
	}
	for _, c := range cfg.Ciphers {
		for _, d := range cfg.Directions {
			t, err := cal.table(ctx, c, d, g)
			if err != nil {
				return nil, err
			}
			p.Tables = append(p.Tables, t)
		}
	}
	return p, nil
}

type calibration struct {
	cfg         *Config
	done, total int
}

// run is one engine in one table.
type run struct {
	e    engine.Engine
	info *EngineInfo
}

func (cal *calibration) table(ctx context.Context, c engine.Cipher, d engine.Direction, g []int) (Table, error) {
	cfg := cal.cfg
	log := cfg.Logger.With(zap.Stringer("cipher", c), zap.Stringer("direction", d))
	t := Table{Cipher: c.String(), Direction: d.String(), Margin: cfg.Margin, Seconds: cfg.Duration.Seconds(),
		NotMeasured: notMeasured()}
	engines := cfg.Engines(c)
	t.Engines = make([]EngineInfo, len(engines))
	var live []run
	for i, e := range engines {
		t.Engines[i].Name = e.Name()
		drv, err := e.Driver(c)
		if err != nil {
			t.Engines[i].Unavailable = err.Error()
			log.Debug("engine unavailable", zap.String("engine", e.Name()), zap.Error(err))
			continue
		}
		t.Engines[i].Driver = &drv
		live = append(live, run{e, &t.Engines[i]})
	}
	samples := map[int]map[string][]float64{}
	var measureSize func(phase string, size int) error
	// measure runs every live engine at sizes, rounds times. The engines
	// take turns at each size, so that a change of machine load (other
	// processes, an emulator's host) hits all of them alike rather than
	// one engine's whole curve.
	measure := func(phase string, sizes []int, rounds int) error {
		for range rounds {
			for _, size := range sizes {
				if err := measureSize(phase, size); err != nil {
					return err
				}
			}
		}
		return nil
	}
	measureSize = func(phase string, size int) error {
		for _, r := range live {
			if r.info.Failed != "" {
				continue
			}
			_, drv, err := cfg.measure(ctx, r.e, speed.Config{
				Cipher: c, Direction: d, Sizes: []int{size}, Duration: cfg.Duration,
				Done: func(res speed.Result) {
					bps := res.BytesPerSecond()
					m := samples[res.Size]
					if m == nil {
						m = map[string][]float64{}
						samples[res.Size] = m
					}
					m[r.e.Name()] = append(m[r.e.Name()], bps)
					cal.done++
					log.Debug("measured", zap.String("phase", phase), zap.String("engine", r.e.Name()),
						zap.Int("size", res.Size), zap.Float64("MB/s", bps/1e6))
					if cfg.Progress != nil {
						cfg.Progress(Progress{Cipher: c, Direction: d, Phase: phase, Engine: r.e.Name(),
							Size: res.Size, BPS: bps, Done: cal.done, Total: max(cal.total, cal.done)})
					}
				},
			})
			if drv.Name != "" {
				r.info.Driver = &drv // what really served the run
			}
			if err != nil {
				if ctxErr := ctx.Err(); ctxErr != nil {
					return ctxErr
				}
				r.info.Failed = err.Error()
				log.Warn("engine failed during calibration; it is left out", zap.String("engine", r.e.Name()), zap.Error(err))
				if cfg.Progress != nil {
					cfg.Progress(Progress{Cipher: c, Direction: d, Phase: phase, Engine: r.e.Name(),
						Size: size, Err: err, Done: cal.done, Total: max(cal.total, cal.done)})
				}
			}
		}
		return nil
	}
	usable := func() []string {
		var u []string
		for _, r := range live {
			if r.info.Failed == "" {
				u = append(u, r.e.Name())
			}
		}
		return u
	}
	point := func(size int) Point {
		pt := Point{Size: size, BPS: map[string]float64{}}
		for name, xs := range samples[size] {
			pt.BPS[name] = ratio.Median(xs)
			pt.Samples = max(pt.Samples, len(xs))
		}
		return pt
	}

	// Warm up each engine (first sockets, page faults): one short run.
	if err := cal.warmUp(ctx, live, c, d); err != nil {
		return t, err
	}
	if err := measure("grid", g, cfg.Runs); err != nil {
		return t, err
	}
	// Points next to a change of winner, and close calls, again.
	var again []int
	for i, size := range g {
		u := usable()
		w := winner(point(size), u, cfg.Margin)
		next := i+1 < len(g) && winner(point(g[i+1]), u, cfg.Margin) != w
		prev := i > 0 && winner(point(g[i-1]), u, cfg.Margin) != w
		if next || prev || closeCall(point(size), u, cfg.Margin) {
			again = append(again, size)
		}
	}
	if len(again) > 0 && cfg.Repeats > cfg.Runs {
		cal.total += len(again) * (cfg.Repeats - cfg.Runs) * len(usable())
		if err := measure("repeat", again, cfg.Repeats-cfg.Runs); err != nil {
			return t, err
		}
	}
	// Bisect between grid points whose winners differ.
	for i := 0; i+1 < len(g) && cfg.RefineSteps > 0; i++ {
		u := usable()
		lo, hi := g[i], g[i+1]
		wlo := winner(point(lo), u, cfg.Margin)
		if winner(point(hi), u, cfg.Margin) == wlo {
			continue
		}
		cal.total += cfg.RefineSteps * cfg.Repeats * len(u)
		for step := 0; step < cfg.RefineSteps; step++ {
			mid := (lo + hi) / 2 &^ (engine.BlockSize - 1)
			if mid <= lo || mid >= hi {
				break
			}
			if err := measure("refine", []int{mid}, cfg.Repeats); err != nil {
				return t, err
			}
			if winner(point(mid), usable(), cfg.Margin) == wlo {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	sizes := make([]int, 0, len(samples))
	for s := range samples {
		sizes = append(sizes, s)
	}
	slices.Sort(sizes)
	for _, s := range sizes {
		if s > 0 && len(samples[s]) > 0 {
			t.Points = append(t.Points, point(s))
		}
	}
	t.Bands = bands(t.Points, usable(), cfg.Margin, cfg.MaxFrame)
	if cfg.TrialWorkers > 0 {
		if err := cal.hybridTrial(ctx, &t, live); err != nil {
			return t, err
		}
	}
	fields := []zap.Field{zap.String("bands", FormatBands(t.Bands))}
	for _, r := range live {
		if r.info.Failed != "" {
			fields = append(fields, zap.String("failed:"+r.e.Name(), r.info.Failed))
		}
	}
	log.Info("calibrated", fields...)
	return t, nil
}

// warmUp runs each engine briefly at the smallest size and discards the
// figure; an engine that fails here is marked failed.
func (cal *calibration) warmUp(ctx context.Context, live []run, c engine.Cipher, d engine.Direction) error {
	dur := min(cal.cfg.Duration/4, 20*time.Millisecond)
	for _, r := range live {
		_, _, err := cal.cfg.measure(ctx, r.e, speed.Config{Cipher: c, Direction: d, Sizes: []int{engine.BlockSize}, Duration: dur})
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			r.info.Failed = err.Error()
			cal.cfg.Logger.Warn("engine failed during calibration; it is left out",
				zap.Stringer("cipher", c), zap.Stringer("direction", d), zap.String("engine", r.e.Name()), zap.Error(err))
		}
	}
	return nil
}

// closeCall reports whether the best engine at pt other than the winner is
// within three margins of it: noise could swap them, so measure again.
func closeCall(pt Point, usable []string, margin float64) bool {
	w := winner(pt, usable, margin)
	for _, name := range usable {
		if name == w {
			continue
		}
		a, b := pt.BPS[name], pt.BPS[w]
		if a > 0 && b > 0 && a*(1+3*margin) >= b && b*(1+3*margin) >= a {
			return true
		}
	}
	return false
}

// FormatBands is a one-line description: "software 1..6143, afalg:x 6144..16384".
func FormatBands(bs []Band) string {
	s := ""
	for i, b := range bs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%s %d..%d", b.Engine, b.From, b.To)
	}
	return s
}
