package selector

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
)

// Where a device wins the largest frames, calibration tries hybrid
// against auto with several frames in flight, in turns, and keeps it only
// if it handed frames over and won by more than the margin (at least 5%).
func TestCalibrateHybridTrial(t *testing.T) {
	sw, hw := flat(20), saturating(100, 8192)
	for _, tc := range []struct {
		gain float64
		keep bool
	}{{1.3, true}, {1.04, false}, {0.7, false}} {
		s := newSynth(0, map[string]curve{swEngine.name: sw, hwEngine.name: hw})
		s.hybridGain = tc.gain
		tbl := calibrateSynth(t, s, 16384, 3, swEngine, hwEngine)
		h := tbl.Hybrid
		if h == nil {
			t.Fatalf("gain %v: no hybrid trial; bands %s", tc.gain, FormatBands(tbl.Bands))
		}
		devBPS := hw(16384)
		if h.Device != hwEngine.name || h.CPU != swEngine.name || h.Size != 16384 || h.Workers != DefaultTrialWorkers || h.Runs != 3 {
			t.Errorf("gain %v: trial %+v", tc.gain, *h)
		}
		// 80 MB/s against 20: the CPU is sooner from 4 frames queued.
		if h.Queue != int(devBPS/sw(16384)) {
			t.Errorf("gain %v: queue %d, want %d", tc.gain, h.Queue, int(devBPS/sw(16384)))
		}
		if h.AutoBPS != devBPS || h.HybridBPS != devBPS*tc.gain || h.Handed != 30 || h.Keep != tc.keep || h.Failed != "" {
			t.Errorf("gain %v: trial %+v; want auto %v, hybrid %v, 30 handed, keep %v", tc.gain, *h, devBPS, devBPS*tc.gain, tc.keep)
		}
		if s.pushes != 6 {
			t.Errorf("gain %v: %d trial runs, want 3 of each", tc.gain, s.pushes)
		}
	}
	// No device wins the largest frames: no trial.
	s := newSynth(0, map[string]curve{swEngine.name: flat(200), hwEngine.name: saturating(100, 8192)})
	if tbl := calibrateSynth(t, s, 16384, 3, swEngine, hwEngine); tbl.Hybrid != nil || s.pushes != 0 {
		t.Errorf("software wins everywhere, yet a hybrid trial %+v (%d runs)", tbl.Hybrid, s.pushes)
	}
}

// A trial whose runs fail is recorded as failed; calibration goes on and
// hybrid stays auto.
func TestCalibrateHybridTrialFails(t *testing.T) {
	s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: saturating(100, 8192)})
	m := fakeMachine("test 1.0", false, swEngine, hwEngine)
	p, err := Calibrate(context.Background(), Config{
		Ciphers: []engine.Cipher{cbc256}, Engines: m.Discover, MaxFrame: 16384, machine: m, measure: s.measure,
		push: func(context.Context, *Policy, int, engine.Direction, int, time.Duration) (float64, error) {
			return 0, errFell
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range p.Tables {
		if h := tbl.Hybrid; h == nil || h.Keep || h.Failed != errFell.Error() {
			t.Fatalf("%s: trial %+v, want failed with %q", tbl.Direction, tbl.Hybrid, errFell)
		}
	}
	pol, err := NewPolicy(p, cbc256, PolicyOptions{Open: openFake, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, q := pol.Threshold(16384, engine.Encrypt); q != 0 {
		t.Errorf("hybrid after a failed trial hands frames over from %d queued", q)
	}
	// Without trial workers there is no trial at all.
	p, err = Calibrate(context.Background(), Config{
		Ciphers: []engine.Cipher{cbc256}, Engines: m.Discover, MaxFrame: 16384, machine: m, measure: s.measure,
		TrialWorkers: -1, push: func(context.Context, *Policy, int, engine.Direction, int, time.Duration) (float64, error) {
			return 0, errors.New("trial run without trial workers")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tables[0].Hybrid != nil {
		t.Errorf("TrialWorkers -1, yet a trial %+v", p.Tables[0].Hybrid)
	}
}

// Hybrid hands frames over only in tables whose trial kept it; the
// trial's speed with several frames in flight sets the queue threshold.
func TestPolicyHybridFollowsTrial(t *testing.T) {
	p := testProfile()
	p.Tables[0].Hybrid.Keep = false
	pol, err := NewPolicy(p, cbc256, PolicyOptions{Open: openFake, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, q := pol.Threshold(16384, engine.Encrypt); q != 0 {
		t.Errorf("trial not kept, yet a threshold %d", q)
	}
	for range 10 {
		pol.Begin(1, 16384, engine.Encrypt)
	}
	if got := pol.Pick(16384, engine.Encrypt); got != 1 {
		t.Errorf("trial not kept, device queued: Pick = %d, want the device", got)
	}
	// Kept, with the device twice as fast with 4 frames in flight (160
	// MB/s against software's 20): the CPU is sooner from 8 queued.
	p = testProfile()
	p.Tables[0].Hybrid.AutoBPS = 160e6
	pol, err = NewPolicy(p, cbc256, PolicyOptions{Open: openFake, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, q := pol.Threshold(16384, engine.Encrypt); q != 8 {
		t.Errorf("threshold %d, want 8", q)
	}
}

// pushFrames through a policy: every worker's frames go through the
// engines it picks, and hybrid on a one-queue device hands some over.
func TestPushFrames(t *testing.T) {
	dev := &queueDevice{lat: 100 * time.Microsecond}
	devBPS := calibrateQueue(t, dev)
	open := func(spec string) (engine.Engine, error) {
		if spec == dev.Name() {
			return dev, nil
		}
		return engine.Open(spec, engine.Options{})
	}
	for _, hybrid := range []bool{false, true} {
		pol, err := NewPolicy(queueProfile(dev, devBPS), cbc256, PolicyOptions{Open: open, Hybrid: hybrid})
		if err != nil {
			t.Fatal(err)
		}
		calls := dev.calls.Load()
		var bps float64
		// Frames queue at the device only while the workers run at
		// once; on a loaded machine the scheduler can serialize them
		// for a whole push, so hybrid gets up to three pushes to hand
		// one over.
		for try := 0; try < 3; try++ {
			bps, err = pushFrames(context.Background(), pol, 16384, engine.Encrypt, 6, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if !hybrid || pol.HandedToCPU() > 0 {
				break
			}
		}
		n := dev.calls.Load() - calls
		t.Logf("hybrid %v: %.1f MB/s, %d device frames, %d handed to the CPU", hybrid, bps/1e6, n, pol.HandedToCPU())
		if bps <= 0 || n == 0 {
			t.Errorf("hybrid %v: %.0f B/s, %d device frames", hybrid, bps, n)
		}
		if hybrid != (pol.HandedToCPU() > 0) {
			t.Errorf("hybrid %v: %d frames handed to the CPU", hybrid, pol.HandedToCPU())
		}
		if pol.queues[1].n.Load() != 0 {
			t.Errorf("hybrid %v: %d frames left at the device", hybrid, pol.queues[1].n.Load())
		}
	}
}

// A hybrid that handed nothing over is not kept, whatever its figure.
func TestCalibrateHybridTrialNothingHanded(t *testing.T) {
	s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: saturating(100, 8192)})
	m := fakeMachine("test 1.0", false, swEngine, hwEngine)
	p, err := Calibrate(context.Background(), Config{
		Ciphers: []engine.Cipher{cbc256}, Directions: []engine.Direction{engine.Encrypt}, Engines: m.Discover,
		MaxFrame: 16384, machine: m, measure: s.measure,
		push: func(_ context.Context, pol *Policy, _ int, _ engine.Direction, _ int, _ time.Duration) (float64, error) {
			if pol.hybrid {
				return 90e6, nil // noise: 1.12x auto, with nothing handed over
			}
			return 80e6, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if h := p.Tables[0].Hybrid; h == nil || h.Keep || h.Handed != 0 || h.HybridBPS != 90e6 {
		t.Errorf("trial %+v: want not kept, nothing handed, hybrid 90 MB/s", h)
	}
}

// Hybrid must beat auto in every round: a median gain carried by two good
// rounds and one lost is not kept.
func TestCalibrateHybridTrialEveryRound(t *testing.T) {
	for _, tc := range []struct {
		gains []float64
		keep  bool
	}{{[]float64{1.2, 1.3, 0.95}, false}, {[]float64{1.2, 1.3, 1.02}, true}} {
		s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: saturating(100, 8192)})
		m := fakeMachine("test 1.0", false, swEngine, hwEngine)
		var hybridRuns int
		p, err := Calibrate(context.Background(), Config{
			Ciphers: []engine.Cipher{cbc256}, Directions: []engine.Direction{engine.Encrypt}, Engines: m.Discover,
			MaxFrame: 16384, machine: m, measure: s.measure,
			push: func(_ context.Context, pol *Policy, _ int, _ engine.Direction, _ int, _ time.Duration) (float64, error) {
				if pol.hybrid {
					pol.handed.Add(5)
					hybridRuns++
					return 80e6 * tc.gains[hybridRuns-1], nil
				}
				return 80e6, nil
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		h := p.Tables[0].Hybrid
		if h == nil || h.Keep != tc.keep || len(h.Gains) != 3 || h.Gains[2] != tc.gains[2] {
			t.Errorf("gains %v: trial %+v, want keep %v", tc.gains, h, tc.keep)
		}
	}
}
