package selector

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
)

// DefaultFailThreshold is how many frames an engine may fail (and software
// redo) before the policy stops giving it frames.
const DefaultFailThreshold = 16

// hybridScale is the resolution of the hybrid split: a device gets k of
// every hybridScale frames of a size.
const hybridScale = 64

// ErrTooManyEngines means a profile's bands name more engines than the
// record layer takes (record.MaxEngines).
var ErrTooManyEngines = errors.New("selector: too many engines")

// PolicyOptions configure NewPolicy.
type PolicyOptions struct {
	// Hybrid spreads the frames of sizes where a device wins between the
	// device and software, in proportion to their measured speeds, so both
	// work at once (the record layer seals and opens several frames in
	// parallel). Otherwise every frame goes to the band's winner ("auto").
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
}

// Policy is a record.Policy built from a profile for one cipher. Pick
// reads a table precomputed per 16-byte size step: a few nanoseconds and
// no allocation. It is safe for concurrent use.
type Policy struct {
	engines []engine.Engine
	names   []string
	// pick[dir][slot] is the engine index for sizes (16(slot-1), 16 slot].
	pick [2][]uint8
	// share[dir][slot] is, in hybrid mode, how many of hybridScale frames
	// go to pick[dir][slot]; the rest go to software.
	share  [2][]uint8
	hybrid bool
	ctr    [2]struct {
		n atomic.Uint64
		_ [56]byte // own cache line: workers of both directions count at once
	}
	stats     *record.Stats
	threshold uint64
	base      [record.MaxEngines]uint64
	out       [record.MaxEngines]atomic.Bool
	log       *zap.Logger
}

var _ record.Policy = (*Policy)(nil)

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
		engines: []engine.Engine{engine.Software{}}, names: []string{engine.SoftwareName},
		hybrid: o.Hybrid, stats: o.Stats, threshold: o.FailThreshold, log: o.Logger.Named("selector"),
	}
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
		share := make([]uint8, slots)
		for slot := range pick {
			size := max(slot*engine.BlockSize, 1)
			b := t.BandAt(size)
			idx, err := index(b.Engine)
			if err != nil {
				return nil, err
			}
			pick[slot] = uint8(idx)
			share[slot] = hybridScale
			if idx != 0 {
				share[slot] = hybridShare(t, b.Engine, size)
			}
		}
		pol.pick[d], pol.share[d] = pick, share
	}
	if o.Stats != nil {
		for i := range pol.base {
			pol.base[i] = o.Stats.Fallbacks[i].Load()
		}
	}
	return pol, nil
}

// hybridShare is how many of hybridScale frames of size go to the engine
// name when software works alongside it: name's share of the summed
// throughput of both at that size, at least half (the engine won the
// band) and at most all.
func hybridShare(t *Table, name string, size int) uint8 {
	dev := interpolate(t.Points, name, size)
	sw := interpolate(t.Points, engine.SoftwareName, size)
	if dev <= 0 || sw <= 0 {
		return hybridScale
	}
	k := math.Round(hybridScale * dev / (dev + sw))
	return uint8(min(max(k, hybridScale/2), hybridScale))
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
		if k := uint64(p.share[dir][slot]); k < hybridScale {
			// Exactly k of every hybridScale consecutive counts are
			// below k after multiplying by k (mod hybridScale).
			if n := p.ctr[dir].n.Add(1); (n*k)%hybridScale >= k {
				return 0
			}
		}
	}
	return idx
}

func (p *Policy) takeOut(idx int) {
	if p.out[idx].CompareAndSwap(false, true) {
		p.log.Warn("engine keeps failing; frames go to software from now on",
			zap.String("engine", p.names[idx]),
			zap.Uint64("fallbacks", p.stats.Fallbacks[idx].Load()-p.base[idx]),
			zap.Uint64("threshold", p.threshold))
	}
}

// Out reports whether engine idx was taken out for failing.
func (p *Policy) Out(idx int) bool { return idx > 0 && idx < len(p.out) && p.out[idx].Load() }

// Share reports, for hybrid policies, the fraction of frames of size in
// direction dir that go to the picked engine (1 for auto).
func (p *Policy) Share(size int, dir engine.Direction) float64 {
	if !p.hybrid || dir > engine.Decrypt {
		return 1
	}
	slot := min(max((size+engine.BlockSize-1)/engine.BlockSize, 0), len(p.share[dir])-1)
	if p.pick[dir][slot] == 0 {
		return 1
	}
	return float64(p.share[dir][slot]) / hybridScale
}
