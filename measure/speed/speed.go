// Package speed measures engines the way `openssl speed -evp CIPHER
// -elapsed` does: for each block size, as many whole-buffer operations as
// fit in a fixed wall-clock time, on one key and one IV, in place. The
// `offload speed` command and the selector's calibration both use it, so the
// figures a user sees are the figures the selector routes by.
package speed

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/sysinfo"
)

// OpenSSLSizes are the block sizes of `openssl speed` (1.1 and later).
var OpenSSLSizes = []int{16, 64, 256, 1024, 8192, 16384}

// Config is one measurement of one engine.
type Config struct {
	Cipher    engine.Cipher
	Direction engine.Direction
	Sizes     []int         // default OpenSSLSizes
	Duration  time.Duration // per size; default 3s, like openssl
	Multi     int           // parallel workers, each with its own Crypter; default 1
	// Ready, if set, is called once the Crypters exist, with the driver
	// that serves them (tcrypt's header names it before the first line).
	Ready func(engine.Driver)
	// Start, if set, is called before each size is measured; Done after it,
	// with the result (openssl's "Doing ..." lines come from these).
	Start func(size int)
	Done  func(Result)
}

// Result is the measurement of one engine at one block size.
type Result struct {
	Size    int           `json:"size"`
	Ops     int64         `json:"ops"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// UserCPU is the user CPU time of the whole process during the run
	// (zero where the platform cannot tell), which is what openssl speed
	// divides by without -elapsed. Work done in the kernel or on a device
	// does not show in it, so only elapsed time compares engines fairly.
	UserCPU time.Duration `json:"user_cpu_ns"`
}

// BytesPerSecond is the throughput of r over elapsed time.
func (r Result) BytesPerSecond() float64 { return r.rate(r.Elapsed) }

// BytesPerUserSecond is the throughput of r over user CPU time, as
// `openssl speed` without -elapsed reports it.
func (r Result) BytesPerUserSecond() float64 { return r.rate(r.UserCPU) }

func (r Result) rate(d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(r.Ops) * float64(r.Size) / d.Seconds()
}

// Run measures e for every size in cfg and returns one Result per size, in
// order, and the driver that served the run as the Crypter reported it. It
// stops early, with the results so far, when ctx is cancelled. An engine
// error during the run is returned: a measurement never silently mixes
// engines.
func Run(ctx context.Context, e engine.Engine, cfg Config) ([]Result, engine.Driver, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Multi <= 0 {
		cfg.Multi = 1
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = OpenSSLSizes
	}
	for _, s := range cfg.Sizes {
		if s <= 0 || (cfg.Cipher.Blocks() && s%engine.BlockSize != 0) {
			return nil, engine.Driver{}, fmt.Errorf("speed: block size %d: %w", s, engine.ErrBlockSize)
		}
	}
	key := make([]byte, cfg.Cipher.KeySize())
	if _, err := rand.Read(key); err != nil {
		return nil, engine.Driver{}, err
	}
	workers := make([]engine.Crypter, cfg.Multi)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.Close()
			}
		}
	}()
	for i := range workers {
		c, err := e.NewCrypter(cfg.Cipher, key)
		if err != nil {
			return nil, engine.Driver{}, fmt.Errorf("speed: %s: %w", e.Name(), err)
		}
		workers[i] = c
	}
	drv := workers[0].Driver()
	if cfg.Ready != nil {
		cfg.Ready(drv)
	}
	maxSize := 0
	for _, s := range cfg.Sizes {
		maxSize = max(maxSize, s)
	}
	bufs := make([][]byte, cfg.Multi)
	for i := range bufs {
		bufs[i] = make([]byte, maxSize)
	}
	iv := make([]byte, engine.BlockSize)

	var out []Result
	for _, size := range cfg.Sizes {
		if ctx.Err() != nil {
			return out, drv, ctx.Err()
		}
		if cfg.Start != nil {
			cfg.Start(size)
		}
		r, err := measure(ctx, workers, bufs, iv, size, cfg)
		if err != nil {
			return out, drv, fmt.Errorf("speed: %s %v %d bytes: %w", e.Name(), cfg.Cipher, size, err)
		}
		out = append(out, r)
		if cfg.Done != nil {
			cfg.Done(r)
		}
	}
	return out, drv, nil
}

func measure(ctx context.Context, workers []engine.Crypter, bufs [][]byte, iv []byte, size int, cfg Config) (Result, error) {
	var stop atomic.Bool
	var total atomic.Int64
	errs := make([]error, len(workers))
	var wg sync.WaitGroup
	cpu0, _ := sysinfo.UserCPU()
	begin := time.Now()
	timer := time.AfterFunc(cfg.Duration, func() { stop.Store(true) })
	defer timer.Stop()
	cancel := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer cancel()
	for i, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := bufs[i][:size]
			var n int64
			// At least one operation per worker, as in loop (frame.go).
			for {
				if err := engine.Crypt(w, cfg.Direction, buf, buf, iv); err != nil {
					errs[i] = err
					stop.Store(true)
					break
				}
				n++
				if stop.Load() {
					break
				}
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	cpu1, _ := sysinfo.UserCPU()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	return Result{Size: size, Ops: total.Load(), Elapsed: elapsed, UserCPU: cpu1 - cpu0}, nil
}
