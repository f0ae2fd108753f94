package selector

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/ratio"
	"github.com/offload-dev/offload/tunnel/record"
)

// DefaultTrialWorkers is how many frames the hybrid trial keeps in flight:
// one link's sealing and opening workers (record.DefaultWorkers each).
const DefaultTrialWorkers = 2 * record.DefaultWorkers

// trialMargin is the least gain over auto for which a trial keeps hybrid,
// when the table's Margin is smaller: runs with several frames in flight
// vary more than one engine's runs.
const trialMargin = 0.05

// trialRuns: a trial run lasts this many calibration runs (Config.Duration),
// against the noise of runs with several frames in flight.
const trialRuns = 4

// pushFunc is the signature of pushFrames; tests put fakes here.
type pushFunc func(ctx context.Context, pol *Policy, size int, dir engine.Direction, workers int, d time.Duration) (bps float64, err error)

// pushFrames runs workers goroutines that, for d, each take a frame of
// size bytes through the engine pol picks for it, telling pol of the frame
// as the record layer does (Begin, End), and returns the bytes per second
// done by all of them.
func pushFrames(ctx context.Context, pol *Policy, size int, dir engine.Direction, workers int, d time.Duration) (float64, error) {
	c := pol.cipher
	key := make([]byte, c.KeySize())
	if _, err := rand.Read(key); err != nil {
		return 0, fmt.Errorf("selector: trial key: %w", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int64
		first error
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			crs := make([]engine.Crypter, len(pol.engines))
			defer func() {
				for _, cr := range crs {
					if cr != nil {
						_ = cr.Close()
					}
				}
			}()
			for i, e := range pol.engines {
				cr, err := e.NewCrypter(c, key)
				if err != nil {
					fail(fmt.Errorf("selector: trial: engine %s: %w", e.Name(), err))
					return
				}
				crs[i] = cr
			}
			in, out, iv := make([]byte, size), make([]byte, size), make([]byte, engine.BlockSize)
			var n int64
			for ctx.Err() == nil {
				idx := pol.Pick(size, dir)
				pol.Begin(idx, size, dir)
				err := engine.Crypt(crs[idx], dir, out, in, iv)
				pol.End(idx, size, dir)
				if err != nil {
					fail(fmt.Errorf("selector: trial: engine %s: %w", pol.names[idx], err))
					return
				}
				n += int64(size)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// hybridTrial measures, for table t whose largest frames a hardware
// engine wins, auto against hybrid with cfg's trial workers at the largest
// size, in turns (auto first: its figure is the device's speed with that
// many frames in flight, which the hybrid runs count the device's load
// against), and records the result in t.Hybrid. A trial that cannot be
// made is recorded as failed: hybrid then stays auto in this table.
func (cal *calibration) hybridTrial(ctx context.Context, t *Table, live []run) error {
	cfg := cal.cfg
	size := cfg.MaxFrame
	dev := t.BandAt(size).Engine
	if !t.hardware(dev) {
		return nil
	}
	h := &HybridTrial{Device: dev, Size: size, Workers: cfg.TrialWorkers, Runs: cfg.Repeats}
	t.Hybrid = h
	cpu, q := overflow(t, dev, size)
	if q == 0 {
		h.Failed = "no CPU engine measured at this size"
		return nil
	}
	h.CPU, h.Queue = cpu, q
	dir := engine.Encrypt
	if t.Direction == engine.Decrypt.String() {
		dir = engine.Decrypt
	}
	c, err := engine.ParseCipher(t.Cipher)
	if err != nil {
		return err
	}
	// A profile of this one table serves both directions of the policies.
	p := &Profile{MaxFrame: cfg.MaxFrame}
	for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		tt := *t
		tt.Direction = d.String()
		p.Tables = append(p.Tables, tt)
	}
	open := func(spec string) (engine.Engine, error) {
		for _, r := range live {
			if r.e.Name() == spec {
				return r.e, nil
			}
		}
		return engine.Open(spec, engine.Options{Logger: cfg.Logger})
	}
	log := cfg.Logger.With(zap.Stringer("cipher", c), zap.String("direction", t.Direction))
	var autos, hybrids []float64
	one := func(hybrid bool) error {
		pol, err := NewPolicy(p, c, PolicyOptions{Hybrid: hybrid, trial: hybrid, Open: open, Logger: cfg.Logger})
		if err != nil {
			return err
		}
		bps, err := cfg.push(ctx, pol, size, dir, h.Workers, trialRuns*cfg.Duration)
		if err != nil {
			return err
		}
		name := "auto"
		if hybrid {
			name = "hybrid"
			hybrids = append(hybrids, bps)
			h.Handed += pol.HandedToCPU()
		} else {
			autos = append(autos, bps)
		}
		cal.done++
		log.Debug("hybrid trial", zap.String("policy", name), zap.Int("size", size), zap.Float64("MB/s", bps/1e6))
		if cfg.Progress != nil {
			cfg.Progress(Progress{Cipher: c, Direction: dir, Phase: "hybrid", Engine: name, Size: size, BPS: bps,
				Done: cal.done, Total: max(cal.total, cal.done)})
		}
		return nil
	}
	cal.total += 2 * h.Runs
	for i := range h.Runs {
		// auto, hybrid, hybrid, auto, auto, hybrid, ...: each goes
		// first in every other pair.
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, hybrid := range order {
			if err := one(hybrid); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				h.Failed = err.Error()
				log.Warn("hybrid trial failed; hybrid stays auto here", zap.Error(err))
				return nil
			}
			if !hybrid && len(autos) == 1 {
				// The device's speed with Workers frames in flight.
				h.AutoBPS = autos[0]
				for i := range p.Tables {
					p.Tables[i].Hybrid = &HybridTrial{Device: dev, Size: size, AutoBPS: h.AutoBPS}
				}
			}
		}
	}
	h.AutoBPS, h.HybridBPS = ratio.Median(autos), ratio.Median(hybrids)
	for i := range autos {
		h.Gains = append(h.Gains, hybrids[i]/autos[i])
	}
	// Kept only if hybrid handed frames over (one that did not did what
	// auto does, and whatever it gained is noise: seen in the VM, 1.07x
	// and 1.22x auto with nothing handed over), beat auto in every round,
	// and by more than the margin in the median round.
	h.Keep = h.Handed > 0 && slices.Min(h.Gains) > 1 && ratio.Median(h.Gains) > 1+max(t.Margin, trialMargin)
	log.Info("hybrid trial", zap.String("device", dev), zap.String("cpu", cpu), zap.Int("size", size), zap.Int("workers", h.Workers),
		zap.Float64("auto MB/s", h.AutoBPS/1e6), zap.Float64("hybrid MB/s", h.HybridBPS/1e6), zap.Uint64("handed", h.Handed), zap.Bool("keep", h.Keep))
	return nil
}
