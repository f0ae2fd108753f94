package selector

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
)

// DefaultFailThreshold is how many frames an engine may fail (and software
// redo) before the policy stops giving it frames.
const DefaultFailThreshold = 16

// ErrTooManyEngines means a profile's bands name more engines than the
// record layer takes (record.MaxEngines).
var ErrTooManyEngines = errors.New("selector: too many engines")

// PolicyOptions configure NewPolicy.
type PolicyOptions struct {
	// Hybrid lets the CPU take frames of sizes where a hardware engine (a
	// device) wins, in the tables whose hybrid trial (Table.Hybrid, made
	// by Calibrate) kept it, and there only while the device limits the
	// link: the frames it returned in the last 50 ms, at its speed with
	// several in flight, fill at least 90% of that time (queue.go), and
	// it already holds so many frames that the CPU finishes this one
	// sooner: when the device holds q frames and the best CPU engine at
	// that size is r times slower than the device, the frame goes to the
	// CPU if q >= r (see Policy.Threshold). The record layer seals and
	// opens several frames in parallel, so device and CPU then work at
	// once. Elsewhere hybrid is auto: every frame goes to the band's
	// winner.
	Hybrid bool
	// Stats are the counters of the links this policy serves (the record
	// layer's Options.Stats). When an engine's Fallbacks grow by
	// FailThreshold from the moment NewPolicy ran, Pick stops returning
	// it. nil: engines are never taken out.
	Stats *record.Stats
	// FailThreshold, 0 means DefaultFailThreshold.
	FailThreshold uint64
	// Logger gets the one line that says an engine was taken out.
	Logger *zap.Logger
	// Open makes an engine from its spec; default engine.Open.
	Open func(spec string) (engine.Engine, error)

	// trial: hybrid hands frames over wherever a device wins, whether or
	// not a trial kept it (calibration's trial itself).
	trial bool
}

// Policy is a record.Policy built from a profile for one cipher. Pick
// reads a table precomputed per 16-byte size step: a few nanoseconds and
// no allocation. It is safe for concurrent use. Hybrid policies are also
// record.Trackers: the record layer tells them how many frames each engine
// holds.
type Policy struct {
	cipher  engine.Cipher
	engines []engine.Engine
	names   []string
	// pick[dir][slot] is the engine index for sizes (16(slot-1), 16 slot].
	pick [2][]uint8
	// In hybrid mode, where pick is a device: a frame goes to cpu[dir][slot]
	// instead while the device holds at least queue[dir][slot] frames (0:
	// never).
	cpu, queue [2][]uint8
	hybrid     bool
	// queues[idx]: frames device idx holds now and the work it was
	// given (queue.go), as the record layer reports them through Begin
	// and End; cost[idx][dir][slot] is that work per frame: the device's
	// calibrated time for the slot's size, in ns (hybrid devices only).
	queues    [record.MaxEngines]devQueue
	cost      [record.MaxEngines][2][]uint32
	handed    atomic.Uint64        // device frames hybrid gave the CPU
	start     time.Time            // clock's origin
	clock     func() time.Duration // time since start; tests fake it
	stats     *record.Stats
	threshold uint64
	base      [record.MaxEngines]uint64
	out       [record.MaxEngines]atomic.Bool
	log       *zap.Logger
}

var (
	_ record.Policy        = (*Policy)(nil)
	_ record.Tracker       = (*Policy)(nil)
	_ record.Excluder      = (*Policy)(nil)
	_ record.HandedCounter = (*Policy)(nil)
)

// maxQueue caps Threshold: a device more than this many times faster than
// the CPU at a size keeps its frames however long its queue.
const maxQueue = 64

// NewPolicy builds the policy for c from p's tables for both directions.
func NewPolicy(p *Profile, c engine.Cipher, o PolicyOptions) (*Policy, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Open == nil {
		o.Open = func(spec string) (engine.Engine, error) { return engine.Open(spec, engine.Options{Logger: o.Logger}) }
	}
	if o.FailThreshold == 0 {
		o.FailThreshold = DefaultFailThreshold
	}
	pol := &Policy{
		cipher:  c,
		engines: []engine.Engine{engine.Software{}}, names: []string{engine.SoftwareName},
		hybrid: o.Hybrid, stats: o.Stats, threshold: o.FailThreshold, log: o.Logger.Named("selector"),
		start: time.Now(),
	}
	pol.clock = func() time.Duration { return time.Since(pol.start) }
	index := func(name string) (int, error) {
		for i, n := range pol.names {
			if n == name {
				return i, nil
			}
		}
		if len(pol.names) == record.MaxEngines {
			return 0, fmt.Errorf("%w: more than %d", ErrTooManyEngines, record.MaxEngines)
		}
		e, err := o.Open(name)
		if err != nil {
			return 0, fmt.Errorf("selector: profile engine: %w", err)
		}
		pol.engines = append(pol.engines, e)
		pol.names = append(pol.names, name)
		return len(pol.names) - 1, nil
	}
	slots := p.MaxFrame/engine.BlockSize + 1
	for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		t, err := p.Table(c, d)
		if err != nil {
			return nil, err
		}
		pick := make([]uint8, slots)
		cpu := make([]uint8, slots)
		queue := make([]uint8, slots)
		for slot := range pick {
			size := max(slot*engine.BlockSize, 1)
			b := t.BandAt(size)
			idx, err := index(b.Engine)
			if err != nil {
				return nil, err
			}
			pick[slot] = uint8(idx)
			if !o.Hybrid || !t.hardware(b.Engine) || !(o.trial || t.Hybrid.kept()) {
				continue
			}
			name, q := overflow(t, b.Engine, size)
			if q == 0 {
				continue
			}
			ci, err := index(name)
			if err != nil {
				return nil, err
			}
			cpu[slot], queue[slot] = uint8(ci), uint8(q)
		}
		pol.pick[d], pol.cpu[d], pol.queue[d] = pick, cpu, queue
		if o.Hybrid {
			for idx, name := range pol.names {
				if t.hardware(name) {
					pol.cost[idx][d] = deviceCost(t, name, slots)
				}
			}
		}
	}
	if o.Stats != nil {
		for i := range pol.base {
			pol.base[i] = o.Stats.Fallbacks[i].Load()
		}
	}
	return pol, nil
}

// deviceBPS is dev's speed at size as hybrid counts it: the calibrated
// figure (one frame at a time), scaled by what the hybrid trial measured
// with several frames in flight where there was one for dev.
func (t *Table) deviceBPS(dev string, size int) float64 {
	bps := interpolate(t.Points, dev, size)
	if h := t.Hybrid; h != nil && h.Device == dev && h.AutoBPS > 0 {
		if ref := interpolate(t.Points, dev, h.Size); ref > 0 {
			bps *= h.AutoBPS / ref
		}
	}
	return bps
}

// kept reports whether a hybrid trial was made and hybrid won it.
func (h *HybridTrial) kept() bool { return h != nil && h.Keep && h.Failed == "" }

// deviceCost is, per 16-byte slot, the device's time for a frame of the
// slot's size at its speed (deviceBPS), in ns (0 without figures).
func deviceCost(t *Table, dev string, slots int) []uint32 {
	c := make([]uint32, slots)
	for slot := range c {
		size := max(slot*engine.BlockSize, 1)
		if bps := t.deviceBPS(dev, size); bps > 0 {
			c[slot] = uint32(min(float64(size)/bps*1e9, math.MaxUint32))
		}
	}
	return c
}

// overflow returns, for a frame of size that the device dev would get, the
// CPU engine that would take it from a queued device (the fastest usable
// engine of t without hardware at size, software included) and the queue
// length from which it should: a frame waits for the q frames ahead of it
// and then its own turn, (q+1)·size/devBPS, against size/cpuBPS on the
// CPU, so the CPU is sooner once q+1 > devBPS/cpuBPS, i.e. from
// q = floor(devBPS/cpuBPS) on (at least 1: an idle device is never
// passed over). q = 0: no figures, the frame stays with the device.
func overflow(t *Table, dev string, size int) (string, int) {
	devBPS := t.deviceBPS(dev, size)
	if devBPS <= 0 {
		return "", 0
	}
	best, bestBPS := "", 0.0
	for _, e := range t.Engines {
		if !e.Usable() || e.Driver.Hardware {
			continue
		}
		if bps := interpolate(t.Points, e.Name, size); bps > bestBPS {
			best, bestBPS = e.Name, bps
		}
	}
	if bestBPS <= 0 {
		return "", 0
	}
	q := math.Floor(devBPS / bestBPS)
	return best, int(min(max(q, 1), maxQueue))
}

// interpolate estimates name's throughput at size from the measured points,
// linearly in log(size) between the nearest points that have name.
func interpolate(points []Point, name string, size int) float64 {
	var lo, hi *Point
	for i := range points {
		pt := &points[i]
		if _, ok := pt.BPS[name]; !ok {
			continue
		}
		if pt.Size <= size {
			lo = pt
		}
		if pt.Size >= size {
			hi = pt
			break
		}
	}
	switch {
	case lo == nil && hi == nil:
		return 0
	case lo == nil:
		return hi.BPS[name]
	case hi == nil || hi.Size == lo.Size:
		return lo.BPS[name]
	}
	f := math.Log(float64(size)/float64(lo.Size)) / math.Log(float64(hi.Size)/float64(lo.Size))
	return lo.BPS[name] + f*(hi.BPS[name]-lo.BPS[name])
}

// Engines returns the engines Pick indexes; [0] is software. Give them to
// record.Options.Engines.
func (p *Policy) Engines() []engine.Engine { return p.engines }

// Names returns the engine names, by index.
func (p *Policy) Names() []string { return p.names }

// Pick implements record.Policy.
func (p *Policy) Pick(size int, dir engine.Direction) int {
	if dir > engine.Decrypt {
		return 0
	}
	tbl := p.pick[dir]
	slot := (size + engine.BlockSize - 1) / engine.BlockSize
	if slot >= len(tbl) {
		slot = len(tbl) - 1
	} else if slot < 0 {
		slot = 0
	}
	idx := int(tbl[slot])
	if idx == 0 {
		return 0
	}
	if p.out[idx].Load() {
		return 0
	}
	if p.stats != nil && p.stats.Fallbacks[idx].Load()-p.base[idx] >= p.threshold {
		p.takeOut(idx)
		return 0
	}
	if p.hybrid {
		q := &p.queues[idx]
		if k := p.queue[dir][slot]; k > 0 && q.n.Load() >= int32(k) && q.saturated(p.clock()) {
			p.handed.Add(1)
			if cpu := int(p.cpu[dir][slot]); !p.out[cpu].Load() {
				return cpu
			}
			return 0
		}
	}
	return idx
}

// Begin implements record.Tracker.
func (p *Policy) Begin(idx, _ int, _ engine.Direction) {
	if p.hybrid && idx > 0 && idx < len(p.queues) {
		p.queues[idx].n.Add(1)
	}
}

// End implements record.Tracker: the frame left the device, and its
// calibrated device time counts as work done.
func (p *Policy) End(idx, size int, dir engine.Direction) {
	if !p.hybrid || idx <= 0 || idx >= len(p.queues) {
		return
	}
	q := &p.queues[idx]
	q.n.Add(-1)
	if dir > engine.Decrypt {
		return
	}
	if c := p.cost[idx][dir]; len(c) > 0 {
		slot := min(max((size+engine.BlockSize-1)/engine.BlockSize, 0), len(c)-1)
		q.work.Add(int64(c[slot]))
	}
}

func (p *Policy) takeOut(idx int) {
	if p.out[idx].CompareAndSwap(false, true) {
		p.log.Warn("engine keeps failing; frames go to software from now on",
			zap.String("engine", p.names[idx]),
			zap.Uint64("fallbacks", p.stats.Fallbacks[idx].Load()-p.base[idx]),
			zap.Uint64("threshold", p.threshold))
	}
}

// Exclude implements record.Excluder: engine idx gave a wrong answer (a
// known-answer test or a verified frame), so Pick stops returning it at
// once, as after FailThreshold failures. Software (0) is never taken out.
func (p *Policy) Exclude(idx int, why error) {
	if idx <= 0 || idx >= len(p.names) {
		return
	}
	if p.out[idx].CompareAndSwap(false, true) {
		p.log.Warn("engine gives wrong answers; frames go to software from now on",
			zap.String("engine", p.names[idx]), zap.Error(why))
	}
}

// Out reports whether engine idx was taken out for failing.
func (p *Policy) Out(idx int) bool { return idx > 0 && idx < len(p.out) && p.out[idx].Load() }

// HandedToCPU is how many frames hybrid gave a CPU engine although their
// band's device would have had them (0 for auto).
func (p *Policy) HandedToCPU() uint64 { return p.handed.Load() }

// Threshold reports, for hybrid policies, where a frame of size in
// direction dir goes when the device Pick would give it is queued: the
// CPU engine's index and the number of frames the device must already hold
// (0: the frame always goes to Pick's engine, as with auto).
func (p *Policy) Threshold(size int, dir engine.Direction) (cpu, queue int) {
	if !p.hybrid || dir > engine.Decrypt {
		return 0, 0
	}
	slot := min(max((size+engine.BlockSize-1)/engine.BlockSize, 0), len(p.queue[dir])-1)
	return int(p.cpu[dir][slot]), int(p.queue[dir][slot])
}
