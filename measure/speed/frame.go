package speed

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// FrameSizes are the frame sizes FrameCost measures by default: a small
// interactive frame, an Ethernet-MTU-ish one, and the sizes up to the
// default maximum frame (16 KiB), where a device is meant to win.
var FrameSizes = []int{64, 256, 1024, 4096, 8192, 16384}

// Part kinds: what one measured piece of a frame's work is.
const (
	PartCopy   = "copy"   // one memmove of the frame in user space
	PartCipher = "cipher" // the cipher on one engine (Crypter.Encrypt/Decrypt)
	PartMAC    = "mac"    // the tag of one frame (record.MAC.Sum)
	PartFrame  = "frame"  // a whole frame on a frame engine: cipher and HMAC-SHA256 in one request (FrameSealer)
)

// FrameConfig configures FrameCost.
type FrameConfig struct {
	Cipher    engine.Cipher
	Direction engine.Direction
	Sizes     []int           // default FrameSizes
	Duration  time.Duration   // per part and size; default 500ms
	Engines   []engine.Engine // default software only
	MACs      []suite.MAC     // default suite.MACs
	// Start, if set, is called before each part is measured.
	Start func(kind, name string, size int)
}

// Part is one piece of a frame's work measured at one frame size: as many
// operations as fit in the configured time, one goroutine.
type Part struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`             // engine spec, MAC name, or "memmove"
	Driver string `json:"driver,omitempty"` // the driver that served a cipher
	Size   int    `json:"size"`
	Ops    int64  `json:"ops"`
	// Elapsed is wall-clock time; UserCPU and SysCPU are the process's CPU
	// time in user space and in the kernel over the run (zero where the
	// platform cannot tell). For a kernel engine, SysCPU is the system
	// calls and whatever the kernel computes on the CPU; elapsed time that
	// is neither is spent waiting (for a device, or for the scheduler).
	Elapsed time.Duration `json:"elapsed_ns"`
	UserCPU time.Duration `json:"user_cpu_ns"`
	SysCPU  time.Duration `json:"sys_cpu_ns"`
	// Switches counts context switches over the run: an asynchronous
	// device shows one or more per request.
	Switches int64 `json:"context_switches"`
	// Syscalls counts the system calls the implementation made, where it
	// counts them (engines implementing SyscallCounter); -1 where unknown.
	Syscalls int64  `json:"syscalls"`
	Error    string `json:"error,omitempty"`
}

// SyscallCounter is implemented by Crypters (and frame sealers) that count
// the system calls they make; FrameCost reports them per frame.
type SyscallCounter interface {
	Syscalls() uint64
}

// NsPerFrame is the wall-clock time of one operation.
func (p Part) NsPerFrame() float64 { return perOp(p.Elapsed, p.Ops) }

// SysNsPerFrame is the kernel CPU time per operation.
func (p Part) SysNsPerFrame() float64 { return perOp(p.SysCPU, p.Ops) }

// SyscallsPerFrame is the system calls per operation, or -1 if unknown.
func (p Part) SyscallsPerFrame() float64 {
	if p.Syscalls < 0 || p.Ops == 0 {
		return -1
	}
	return float64(p.Syscalls) / float64(p.Ops)
}

// SwitchesPerFrame is the context switches per operation.
func (p Part) SwitchesPerFrame() float64 {
	if p.Ops == 0 {
		return 0
	}
	return float64(p.Switches) / float64(p.Ops)
}

// BytesPerSecond is the part's throughput over elapsed time.
func (p Part) BytesPerSecond() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Ops) * float64(p.Size) / p.Elapsed.Seconds()
}

func perOp(d time.Duration, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / float64(ops)
}

// Copies is how many user-space copies of a frame the record layer makes
// besides the cipher and the MAC: sealing copies the written bytes into the
// frame buffer; opening copies from the read buffer into the frame buffer
// and out to the reader. Engines other than software also write out of
// place, but that copy is part of their system calls.
func Copies(d engine.Direction) int {
	if d == engine.Decrypt {
		return 2
	}
	return 1
}

// FrameCost measures, for each frame size, the parts of a frame's work:
// one memmove of the frame, the cipher on each engine, the whole frame on
// each frame engine (engine.FrameEngine, when hmac-sha256 is among the
// MACs: the only MAC it computes), the tag with each MAC. Engines that cannot serve the cipher, and frame engines (see
// engine.WhyNoCipherFigures), get a Part with Error set and no operations; so does an engine that fails during its run. It returns
// early, with the parts so far, when ctx ends.
func FrameCost(ctx context.Context, cfg FrameConfig) ([]Part, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 500 * time.Millisecond
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = FrameSizes
	}
	if len(cfg.Engines) == 0 {
		cfg.Engines = []engine.Engine{engine.Software{}}
	}
	if cfg.MACs == nil {
		cfg.MACs = suite.MACs
	}
	if !cfg.Cipher.Valid() {
		return nil, fmt.Errorf("speed: %w: %v", engine.ErrUnknownCipher, cfg.Cipher)
	}
	maxSize := 0
	for _, s := range cfg.Sizes {
		if s <= 0 || s > record.HardMaxFrame || (cfg.Cipher.Mode == engine.CBC && s%engine.BlockSize != 0) {
			return nil, fmt.Errorf("speed: frame size %d: want 1..%d (a multiple of 16 for CBC): %w", s, record.HardMaxFrame, engine.ErrBlockSize)
		}
		maxSize = max(maxSize, s)
	}
	key := make([]byte, cfg.Cipher.KeySize()+record.MACKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	encKey, macKey := key[:cfg.Cipher.KeySize()], key[cfg.Cipher.KeySize():]
	// The frame as the record layer holds it: header | body | tag.
	buf := make([]byte, record.HeaderSize+maxSize+record.TagSize)
	src := make([]byte, maxSize)
	iv := make([]byte, engine.BlockSize)

	crypters := make([]engine.Crypter, len(cfg.Engines))
	cerrs := make([]error, len(cfg.Engines))
	// Frame engines seal whole frames with HMAC-SHA256 (the record's
	// tag for *-hmac-sha256 suites), which is the figure they add.
	sealers := make([]engine.FrameSealer, len(cfg.Engines))
	serrs := make([]error, len(cfg.Engines))
	defer func() {
		for i := range cfg.Engines {
			if crypters[i] != nil {
				crypters[i].Close()
			}
			if sealers[i] != nil {
				sealers[i].Close()
			}
		}
	}()
	for i, e := range cfg.Engines {
		// A frame engine's cipher part would be another engine's figure
		// under its name; it gets a part that says why instead.
		if why := engine.WhyNoCipherFigures(e.Name()); why != "" {
			cerrs[i] = errors.New("not measured: " + why)
			continue
		}
		if _, err := e.Driver(cfg.Cipher); err != nil {
			cerrs[i] = err
			continue
		}
		crypters[i], cerrs[i] = e.NewCrypter(cfg.Cipher, encKey)
	}
	if slices.Contains(cfg.MACs, suite.HMACSHA256) {
		for i, e := range cfg.Engines {
			fe, ok := e.(engine.FrameEngine)
			if !ok {
				continue
			}
			if _, err := e.Driver(cfg.Cipher); err != nil {
				serrs[i] = err
				continue
			}
			if sealers[i], serrs[i] = fe.NewFrameSealer(cfg.Cipher, encKey, macKey); serrs[i] != nil {
				serrs[i] = fmt.Errorf("frame sealer: %w", serrs[i])
			}
		}
	}
	// Opening needs a sealed frame that stays intact (an in-place Open
	// would leave plaintext for the next run), so it opens out of place.
	sealed := make([]byte, maxSize+engine.FrameTagSize)
	opened := make([]byte, maxSize)
	var aad [12]byte // seq | len, as the record's

	macs := make([]record.MAC, len(cfg.MACs))
	for i, m := range cfg.MACs {
		var err error
		if macs[i], err = record.NewMAC(m, macKey); err != nil {
			return nil, fmt.Errorf("speed: %w", err)
		}
	}

	var out []Part
	for _, size := range cfg.Sizes {
		body := buf[record.HeaderSize : record.HeaderSize+size]
		frame := buf[:record.HeaderSize+size]
		run := func(kind, name string, op func(seq uint64) error, count SyscallCounter) (Part, error) {
			if cfg.Start != nil {
				cfg.Start(kind, name, size)
			}
			p, err := loop(ctx, cfg.Duration, op, count)
			p.Kind, p.Name, p.Size = kind, name, size
			return p, err
		}
		// runEngine is run for an engine's part: an engine that fails
		// gets the error in its part and the measurement goes on; only
		// the end of ctx stops it.
		runEngine := func(kind, name, driver string, op func(seq uint64) error, count SyscallCounter) (Part, error) {
			p, err := run(kind, name, op, count)
			p.Driver = driver
			if err != nil {
				if ctx.Err() != nil {
					return p, ctx.Err()
				}
				p.Error = err.Error()
			}
			return p, nil
		}
		p, err := run(PartCopy, "memmove", func(uint64) error { copy(body, src[:size]); return nil }, nil)
		if err != nil {
			return out, err
		}
		out = append(out, p)
		for i, e := range cfg.Engines {
			if cerrs[i] != nil {
				out = append(out, Part{Kind: PartCipher, Name: e.Name(), Size: size, Syscalls: -1, Error: cerrs[i].Error()})
				continue
			}
			cr := crypters[i]
			count, _ := cr.(SyscallCounter)
			p, err := runEngine(PartCipher, e.Name(), cr.Driver().Name, func(uint64) error {
				return engine.Crypt(cr, cfg.Direction, body, body, iv)
			}, count)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
		for i, e := range cfg.Engines {
			if sealers[i] == nil && serrs[i] == nil {
				continue
			}
			part := Part{Kind: PartFrame, Name: e.Name(), Size: size, Syscalls: -1}
			switch {
			case serrs[i] != nil:
				part.Error = serrs[i].Error()
			case size > engine.MaxFrameRequest:
				part.Error = fmt.Sprintf("not measured: frames over %d bytes go to its Crypters and the record's MAC", engine.MaxFrameRequest)
			}
			if part.Error != "" {
				out = append(out, part)
				continue
			}
			fs := sealers[i]
			count, _ := fs.(SyscallCounter)
			op := func(uint64) error {
				return fs.Seal(buf[record.HeaderSize:record.HeaderSize+size+engine.FrameTagSize], aad[:], body, iv)
			}
			if cfg.Direction == engine.Decrypt {
				if err := fs.Seal(sealed[:size+engine.FrameTagSize], aad[:], src[:size], iv); err != nil {
					out = append(out, Part{Kind: PartFrame, Name: e.Name(), Size: size, Syscalls: -1, Error: err.Error()})
					continue
				}
				op = func(uint64) error { return fs.Open(opened[:size], aad[:], sealed[:size+engine.FrameTagSize], iv) }
			}
			p, err := runEngine(PartFrame, e.Name(), fs.Driver().Name, op, count)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
		for i, m := range macs {
			var tag [record.TagSize]byte
			p, err := run(PartMAC, cfg.MACs[i].String(), func(seq uint64) error {
				m.Sum(&tag, seq, frame)
				return nil
			}, nil)
			if err != nil {
				return out, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// loop runs op for d (or until ctx ends, which is an error) and measures
// it. An error from op ends the run and is returned with the part so far.
func loop(ctx context.Context, d time.Duration, op func(seq uint64) error, count SyscallCounter) (Part, error) {
	var stop atomic.Bool
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	cancel := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer cancel()
	p := Part{Syscalls: -1}
	var sc0 uint64
	if count != nil {
		sc0 = count.Syscalls()
	}
	r0 := readUsage()
	begin := time.Now()
	var err error
	// At least one operation, whatever the clock says: a goroutine kept
	// off the CPU for all of d (a busy machine) would otherwise measure
	// nothing, and the part would be missing from the estimates.
	for {
		if err = op(uint64(p.Ops)); err != nil {
			break
		}
		p.Ops++
		if stop.Load() {
			break
		}
	}
	p.Elapsed = time.Since(begin)
	r1 := readUsage()
	p.UserCPU, p.SysCPU, p.Switches = r1.user-r0.user, r1.sys-r0.sys, r1.switches-r0.switches
	if count != nil {
		p.Syscalls = int64(count.Syscalls() - sc0)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return p, err
}

// Estimate is one way to build a frame out of measured parts: a cipher
// engine (or a frame sealer doing cipher and MAC at once), a MAC and the
// record layer's copies, at one size.
type Estimate struct {
	Size   int     `json:"size"`
	Engine string  `json:"engine"`
	MAC    string  `json:"mac"`
	Cipher float64 `json:"cipher_ns"` // a frame engine's: cipher and MAC together (Tag is 0)
	Tag    float64 `json:"mac_ns"`
	Copy   float64 `json:"copy_ns"`
	// Bottleneck is the part with the largest share: "cipher", "mac" or
	// "copy".
	Bottleneck string `json:"bottleneck"`
}

// Total is the estimated time of one frame, in nanoseconds, when its parts
// run one after the other on one core (as one record worker does).
func (e Estimate) Total() float64 { return e.Cipher + e.Tag + e.Copy }

// BytesPerSecond is the estimated throughput of one worker.
func (e Estimate) BytesPerSecond() float64 {
	if t := e.Total(); t > 0 {
		return float64(e.Size) / t * 1e9
	}
	return 0
}

// Share is the fraction of the frame's time that kind takes.
func (e Estimate) Share(kind string) float64 {
	t := e.Total()
	if t <= 0 {
		return 0
	}
	switch kind {
	case PartCipher:
		return e.Cipher / t
	case PartMAC:
		return e.Tag / t
	case PartCopy:
		return e.Copy / t
	}
	return 0
}

// withBottleneck sets Bottleneck to the part with the largest share.
func (e Estimate) withBottleneck() Estimate {
	e.Bottleneck = PartCipher
	if e.Tag > e.Cipher && e.Tag >= e.Copy {
		e.Bottleneck = PartMAC
	} else if e.Copy > e.Cipher && e.Copy > e.Tag {
		e.Bottleneck = PartCopy
	}
	return e
}

// ErrNoParts means Estimates found nothing to combine at a size.
var ErrNoParts = errors.New("speed: no measured parts to combine")

// Estimates combines the parts FrameCost measured into a per-frame cost
// for every engine × MAC at every size, each with its bottleneck.
func Estimates(parts []Part, d engine.Direction) ([]Estimate, error) {
	type key struct {
		kind, name string
		size       int
	}
	by := map[key]Part{}
	var sizes []int
	var engines, macs, frames []string
	seen := map[key]bool{}
	for _, p := range parts {
		if p.Error != "" || p.Ops == 0 {
			continue
		}
		by[key{p.Kind, p.Name, p.Size}] = p
		if !seen[key{"size", "", p.Size}] {
			seen[key{"size", "", p.Size}] = true
			sizes = append(sizes, p.Size)
		}
		if k := (key{p.Kind, p.Name, 0}); !seen[k] {
			seen[k] = true
			switch p.Kind {
			case PartCipher:
				engines = append(engines, p.Name)
			case PartMAC:
				macs = append(macs, p.Name)
			case PartFrame:
				frames = append(frames, p.Name)
			}
		}
	}
	if (len(engines) == 0 || len(macs) == 0) && len(frames) == 0 {
		return nil, ErrNoParts
	}
	var out []Estimate
	for _, s := range sizes {
		cp, ok := by[key{PartCopy, "memmove", s}]
		if !ok {
			return nil, fmt.Errorf("%w: no copy measured at %d bytes", ErrNoParts, s)
		}
		for _, en := range engines {
			c, ok := by[key{PartCipher, en, s}]
			if !ok {
				continue
			}
			for _, mn := range macs {
				m, ok := by[key{PartMAC, mn, s}]
				if !ok {
					continue
				}
				e := Estimate{Size: s, Engine: en, MAC: mn, Cipher: c.NsPerFrame(), Tag: m.NsPerFrame(),
					Copy: float64(Copies(d)) * cp.NsPerFrame()}
				out = append(out, e.withBottleneck())
			}
		}
		// A frame engine's frame is cipher and tag in one part.
		for _, fn := range frames {
			f, ok := by[key{PartFrame, fn, s}]
			if !ok {
				continue
			}
			e := Estimate{Size: s, Engine: fn, MAC: suite.HMACSHA256.String(), Cipher: f.NsPerFrame(),
				Copy: float64(Copies(d)) * cp.NsPerFrame()}
			out = append(out, e.withBottleneck())
		}
	}
	return out, nil
}
