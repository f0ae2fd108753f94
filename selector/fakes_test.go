package selector

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/speed"
)

// fake is an engine that only describes itself; synthetic measurements
// (synth) stand in for running it. Its Crypters are the software engine's.
type fake struct {
	name   string
	driver string
	hw     bool
	err    error // Driver's error: unavailable
}

func (f fake) Name() string { return f.name }
func (f fake) Driver(c engine.Cipher) (engine.Driver, error) {
	if f.err != nil {
		return engine.Driver{}, f.err
	}
	return engine.Driver{Name: f.driver, Algorithm: c.KernelName(), Hardware: f.hw}, nil
}
func (f fake) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	if f.err != nil {
		return nil, f.err
	}
	return engine.Software{}.NewCrypter(c, key)
}

var (
	swEngine = fake{name: engine.SoftwareName, driver: "go/generic"}
	hwEngine = fake{name: "afalg:dev", driver: "dev_aes_cbc", hw: true}
	errGone  = fmt.Errorf("%w: module unloaded", engine.ErrNoAlgorithm)
	errFell  = errors.New("device fell over")
)

// curve is bytes per second by size.
type curve func(size int) float64

// synth measures engines by their synthetic curves, with multiplicative
// noise of ±noise (uniform, seeded: repeatable). An engine whose failAfter
// is n > 0 fails its n-th run.
type synth struct {
	// hybridGain is what the hybrid trial's hybrid runs do over its auto
	// runs (default 0.9: hybrid loses, and is not kept).
	hybridGain float64
	pushes     int

	mu        sync.Mutex
	curves    map[string]curve
	noise     float64
	rng       *rand.Rand
	failAfter map[string]int
	runs      map[string]int
	calls     int
}

func newSynth(noise float64, curves map[string]curve) *synth {
	return &synth{curves: curves, noise: noise, rng: rand.New(rand.NewPCG(1, 2)),
		failAfter: map[string]int{}, runs: map[string]int{}}
}

func (s *synth) measure(ctx context.Context, e engine.Engine, cfg speed.Config) ([]speed.Result, engine.Driver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	drv, err := e.Driver(cfg.Cipher)
	if err != nil {
		return nil, drv, err
	}
	var out []speed.Result
	for _, size := range cfg.Sizes {
		s.runs[e.Name()]++
		if n := s.failAfter[e.Name()]; n > 0 && s.runs[e.Name()] >= n {
			return out, drv, fmt.Errorf("speed: %s %d bytes: %w", e.Name(), size, errFell)
		}
		bps := s.curves[e.Name()](size) * (1 + s.noise*(2*s.rng.Float64()-1))
		d := time.Second
		r := speed.Result{Size: size, Ops: int64(bps * d.Seconds() / float64(size)), Elapsed: d}
		out = append(out, r)
		if cfg.Done != nil {
			cfg.Done(r)
		}
	}
	return out, drv, nil
}

func flat(mbps float64) curve { return func(int) float64 { return mbps * 1e6 } }

// saturating is a device: peak MB/s at large sizes, half of it at half.
func saturating(peak float64, half int) curve {
	return func(s int) float64 { return peak * 1e6 * float64(s) / float64(s+half) }
}

func fakeMachine(kernel string, aes bool, engines ...engine.Engine) *machine {
	return &machine{Kernel: kernel, CPUAES: aes, Discover: func(engine.Cipher) []engine.Engine { return engines }}
}

// push fakes the hybrid trial's runs: auto does the device's synthetic
// speed at size, hybrid hybridGain times that, and hands 10 frames over.
func (s *synth) push(_ context.Context, pol *Policy, size int, dir engine.Direction, workers int, d time.Duration) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushes++
	dev := pol.names[len(pol.names)-1]
	bps := s.curves[dev](size)
	if pol.hybrid {
		gain := s.hybridGain
		if gain == 0 {
			gain = 0.9
		}
		bps *= gain
		pol.handed.Add(10)
	}
	return bps, nil
}
