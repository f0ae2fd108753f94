package selector

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/jsonlite"
	"github.com/offload-dev/offload/internal/sysinfo"
)

// Version is the profile format this code writes and reads. A profile of
// another version is stale.
const Version = 1

// ErrStale wraps every error of Check: the profile was measured on another
// machine state (kernel, CPU AES instructions, drivers) and must be
// measured again (Setup does that).
var ErrStale = errors.New("profile is stale")

// ErrNoTable means a profile has no measurements for a cipher and
// direction. Calibrate that cipher (Setup does it).
var ErrNoTable = errors.New("profile has no table")

// Profile is what calibration learned about one machine: for each cipher
// and direction, every engine's throughput over frame sizes and the bands
// of sizes over which each engine wins. docs/selector.md documents every
// field.
type Profile struct {
	Version  int       `json:"version"`
	Created  time.Time `json:"created"`
	Kernel   string    `json:"kernel"`
	Go       string    `json:"go"`
	GOARCH   string    `json:"goarch"`
	CPUAES   bool      `json:"cpu_aes"`
	MaxFrame int       `json:"max_frame"`
	Tables   []Table   `json:"tables"`
}

// Table is the calibration of one cipher in one direction.
type Table struct {
	Cipher    string `json:"cipher"`    // e.g. "aes-256-cbc"
	Direction string `json:"direction"` // "encrypt" or "decrypt"
	// Margin is the hysteresis: another engine replaces software at a size
	// only when it is faster by more than this fraction (0.03 = 3%).
	Margin float64 `json:"margin"`
	// Seconds is the measuring time of one run at one point.
	Seconds float64      `json:"seconds_per_point"`
	Engines []EngineInfo `json:"engines"`
	// NotMeasured are the registry's engines a cipher table cannot hold,
	// each with why (engine.WhyNoCipherFigures: a frame engine's cipher
	// is another engine's). They are listed so that no engine goes
	// missing silently; they win no band and a profile's checks ignore
	// them.
	NotMeasured []NotMeasured `json:"not_measured,omitempty"`
	Points      []Point       `json:"points"` // ascending sizes
	Bands       []Band        `json:"bands"`  // cover 1..MaxFrame, ascending
	// Hybrid is calibration's trial of the hybrid policy where a device
	// wins the largest frames; nil where none does. Hybrid hands a
	// device's frames to the CPU in this table only if the trial kept it.
	Hybrid *HybridTrial `json:"hybrid,omitempty"`
}

// HybridTrial is the measured answer to "does hybrid win here?": Workers
// frames of Size bytes at once, as fast as they come (a link's sealing and
// opening workers), through auto (every frame to Device) and through
// hybrid (CPU takes a frame from Device's queue when Device holds Queue
// frames and is loaded), in turns.
type HybridTrial struct {
	Device  string `json:"device"`
	CPU     string `json:"cpu"` // the CPU engine hybrid hands frames to
	Size    int    `json:"size"`
	Workers int    `json:"workers"`
	Queue   int    `json:"queue"`
	// AutoBPS and HybridBPS are the medians of the runs of each, bytes
	// per second over all workers. AutoBPS is also the device's speed with
	// Workers frames in flight, which is what hybrid's load check counts
	// the device's work against (many devices and drivers do more with
	// several requests in flight than with one).
	AutoBPS   float64 `json:"auto_bps"`
	HybridBPS float64 `json:"hybrid_bps"`
	Runs      int     `json:"runs"`   // of each
	Handed    uint64  `json:"handed"` // frames hybrid handed to the CPU in its runs
	// Gains are hybrid's figure over auto's, round by round (the two
	// runs of a round are made one after the other).
	Gains []float64 `json:"gains,omitempty"`
	// Keep: hybrid handed frames over, beat auto in every round, and in
	// the median round by more than the table's Margin and at least 5%.
	Keep bool `json:"keep"`
	// Failed is why the trial could not be made (then Keep is false).
	Failed string `json:"failed,omitempty"`
}

// EngineInfo is one engine as calibration found it.
type EngineInfo struct {
	// Name is the engine spec (engine.Open), e.g. "afalg:virtio_crypto_aes_cbc".
	Name string `json:"name"`
	// Driver serves the cipher on this engine; nil when unavailable.
	Driver *engine.Driver `json:"driver,omitempty"`
	// Unavailable says why the engine could not serve the cipher.
	Unavailable string `json:"unavailable,omitempty"`
	// Failed is the error that stopped the engine during calibration; a
	// failed engine wins no band.
	Failed string `json:"failed,omitempty"`
}

// NotMeasured is an engine calibration leaves out, and why.
type NotMeasured struct {
	Name string `json:"name"`
	Why  string `json:"why"`
}

// notMeasured lists the engine registry's engines that cipher tables do
// not measure.
func notMeasured() []NotMeasured {
	var out []NotMeasured
	for _, f := range engine.Families() {
		if why := engine.WhyNoCipherFigures(f.Name); why != "" {
			out = append(out, NotMeasured{Name: f.Name, Why: why})
		}
	}
	return out
}

// Usable reports whether the engine was measured without failing.
func (e EngineInfo) Usable() bool { return e.Driver != nil && e.Unavailable == "" && e.Failed == "" }

// Point is the throughput of every measured engine at one frame size.
type Point struct {
	Size int `json:"size"`
	// BPS is bytes per second by engine name (the median of Samples runs).
	BPS map[string]float64 `json:"bps"`
	// Samples is how many runs each figure is the median of.
	Samples int `json:"samples"`
}

// Band is a range of frame sizes (inclusive) over which Engine is used.
type Band struct {
	From   int    `json:"from"`
	To     int    `json:"to"`
	Engine string `json:"engine"`
}

// Table returns the table for c and d, or an error wrapping ErrNoTable.
func (p *Profile) Table(c engine.Cipher, d engine.Direction) (*Table, error) {
	for i := range p.Tables {
		t := &p.Tables[i]
		if t.Cipher == c.String() && t.Direction == d.String() {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w for %v %v", ErrNoTable, c, d)
}

// put replaces or adds t.
func (p *Profile) put(t Table) {
	for i := range p.Tables {
		if p.Tables[i].Cipher == t.Cipher && p.Tables[i].Direction == t.Direction {
			p.Tables[i] = t
			return
		}
	}
	p.Tables = append(p.Tables, t)
}

// Engine returns the named engine's info.
func (t *Table) Engine(name string) (EngineInfo, bool) {
	for _, e := range t.Engines {
		if e.Name == name {
			return e, true
		}
	}
	return EngineInfo{}, false
}

// hardware reports whether the named engine's driver is hardware (a
// device), as measured.
func (t *Table) hardware(name string) bool {
	e, ok := t.Engine(name)
	return ok && e.Driver != nil && e.Driver.Hardware
}

// BandAt returns the band containing size (the last band above MaxFrame,
// the first below 1).
func (t *Table) BandAt(size int) Band {
	for _, b := range t.Bands {
		if size <= b.To {
			return b
		}
	}
	if len(t.Bands) == 0 {
		return Band{Engine: engine.SoftwareName}
	}
	return t.Bands[len(t.Bands)-1]
}

// Load reads a profile. A missing file is an error wrapping fs.ErrNotExist;
// a profile of another Version wraps ErrStale.
func Load(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("selector: load profile: %w", err)
	}
	var p Profile
	if err := jsonlite.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("selector: load profile %s: %w", path, err)
	}
	if p.Version != Version {
		return nil, fmt.Errorf("selector: %s: %w: version %d, this offload writes %d", path, ErrStale, p.Version, Version)
	}
	if err := p.validate(); err != nil {
		return nil, fmt.Errorf("selector: load profile %s: %w", path, err)
	}
	return &p, nil
}

// ErrInvalid means a profile's content is inconsistent (hand-edited or
// truncated); measure again.
var ErrInvalid = errors.New("invalid profile")

func (p *Profile) validate() error {
	if p.MaxFrame < engine.BlockSize {
		return fmt.Errorf("%w: max_frame %d", ErrInvalid, p.MaxFrame)
	}
	for _, t := range p.Tables {
		if _, err := engine.ParseCipher(t.Cipher); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if t.Direction != engine.Encrypt.String() && t.Direction != engine.Decrypt.String() {
			return fmt.Errorf("%w: direction %q", ErrInvalid, t.Direction)
		}
		prev := 0
		for _, b := range t.Bands {
			if b.From != prev+1 || b.To < b.From {
				return fmt.Errorf("%w: %s %s: bands do not cover sizes contiguously at %d..%d", ErrInvalid, t.Cipher, t.Direction, b.From, b.To)
			}
			if _, ok := t.Engine(b.Engine); !ok && b.Engine != engine.SoftwareName {
				return fmt.Errorf("%w: %s %s: band engine %q is not among the table's engines", ErrInvalid, t.Cipher, t.Direction, b.Engine)
			}
			prev = b.To
		}
		if len(t.Bands) == 0 || prev < p.MaxFrame {
			return fmt.Errorf("%w: %s %s: bands end at %d, before max_frame %d", ErrInvalid, t.Cipher, t.Direction, prev, p.MaxFrame)
		}
		if h := t.Hybrid; h != nil {
			if _, ok := t.Engine(h.Device); !ok || h.Size <= 0 || h.Workers <= 0 && h.Failed == "" || h.AutoBPS < 0 || h.HybridBPS < 0 {
				return fmt.Errorf("%w: %s %s: hybrid trial %+v", ErrInvalid, t.Cipher, t.Direction, *h)
			}
		}
	}
	return nil
}

// Save writes p to path atomically (temporary file and rename), creating
// the folder.
func Save(path string, p *Profile) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("selector: save profile: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("selector: save profile: %w", err)
	}
	f, err := os.CreateTemp(dir, ".profile-*.json")
	if err != nil {
		return fmt.Errorf("selector: save profile: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("selector: save profile %s: %w", path, err)
	}
	return nil
}

// DefaultPath is where the profile lives unless configured: the user's
// cache folder ($XDG_CACHE_HOME/offload/profile.json, ~/.cache/... on
// Linux) for a normal user, /var/lib/offload/profile.json for root or when
// there is no home (a router's init). On OpenWrt /var is in RAM, so the
// profile is measured again after each boot (a few seconds), which also
// catches a firmware upgrade; set the path to /etc/offload/profile.json to
// keep it on flash.
func DefaultPath() string {
	if os.Geteuid() != 0 {
		if dir, err := os.UserCacheDir(); err == nil {
			return filepath.Join(dir, "offload", "profile.json")
		}
	}
	return "/var/lib/offload/profile.json"
}

// machine is what a profile is tied to; Check compares a profile with it.
type machine struct {
	Kernel   string
	CPUAES   bool
	Discover func(engine.Cipher) []engine.Engine
}

func thisMachine(o engine.Options) machine {
	return machine{
		Kernel:   sysinfo.Kernel(),
		CPUAES:   engine.HardwareAES(),
		Discover: func(c engine.Cipher) []engine.Engine { return engine.Discover(c, o) },
	}
}

func newProfile(m machine, maxFrame int) *Profile {
	return &Profile{
		Version: Version, Created: time.Now().UTC().Truncate(time.Second),
		Kernel: m.Kernel, Go: runtime.Version(), GOARCH: runtime.GOARCH, CPUAES: m.CPUAES,
		MaxFrame: maxFrame,
	}
}

// Check reports whether p still describes this machine. It returns nil,
// or an error wrapping ErrStale that lists every change: another kernel,
// CPU AES instructions turned on or off (GODEBUG=cpu.aes=off), an engine
// whose driver changed (another driver wins by priority), went away (module
// unloaded) or appeared (a module loaded, or a hardware driver that was not
// there). A new CPU driver alone (a template instance such as
// cbc(aes-generic), which the kernel creates on first use) is not a change.
func Check(p *Profile) error { return check(p, thisMachine(engine.Options{})) }

func check(p *Profile, m machine) error {
	var changes []string
	if p.Version != Version {
		changes = append(changes, fmt.Sprintf("profile version %d, want %d", p.Version, Version))
	}
	if p.Kernel != m.Kernel {
		changes = append(changes, fmt.Sprintf("kernel was %q, now %q", p.Kernel, m.Kernel))
	}
	if p.CPUAES != m.CPUAES {
		changes = append(changes, fmt.Sprintf("CPU AES instructions were %s, now %s", onOff(p.CPUAES), onOff(m.CPUAES)))
	}
	seen := map[string]bool{}
	for _, t := range p.Tables {
		c, err := engine.ParseCipher(t.Cipher)
		if err != nil || seen[t.Cipher] {
			continue
		}
		seen[t.Cipher] = true
		changes = append(changes, engineChanges(c, t, m.Discover(c))...)
	}
	if len(changes) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStale, strings.Join(changes, "; "))
}

func engineChanges(c engine.Cipher, t Table, now []engine.Engine) []string {
	var changes []string
	byName := map[string]engine.Engine{}
	for _, e := range now {
		byName[e.Name()] = e
	}
	for _, old := range t.Engines {
		e, ok := byName[old.Name]
		if !ok {
			// Discover lists per-driver engines only for drivers the
			// kernel has; open the spec to hear why it is gone.
			var err error
			if e, err = engine.Open(old.Name, engine.Options{}); err != nil {
				changes = append(changes, fmt.Sprintf("%v: engine %s: %v", c, old.Name, err))
				continue
			}
		}
		drv, err := e.Driver(c)
		switch {
		case old.Driver != nil && err != nil:
			changes = append(changes, fmt.Sprintf("%v: engine %s was %s, now unavailable: %v", c, old.Name, old.Driver.Name, err))
		case old.Driver == nil && err == nil:
			changes = append(changes, fmt.Sprintf("%v: engine %s was unavailable, now %s", c, old.Name, drv.Name))
		case old.Driver != nil && drv.Name != old.Driver.Name:
			changes = append(changes, fmt.Sprintf("%v: engine %s was driver %s, now %s", c, old.Name, old.Driver.Name, drv.Name))
		case old.Driver != nil && drv.Hardware != old.Driver.Hardware:
			changes = append(changes, fmt.Sprintf("%v: engine %s driver %s hardware was %v, now %v", c, old.Name, drv.Name, old.Driver.Hardware, drv.Hardware))
		}
	}
	for _, e := range now {
		if _, ok := t.Engine(e.Name()); ok {
			continue
		}
		drv, err := e.Driver(c)
		if err == nil && drv.Hardware {
			changes = append(changes, fmt.Sprintf("%v: new hardware engine %s (%s)", c, e.Name(), drv.Name))
		}
	}
	slices.Sort(changes)
	return slices.Compact(changes)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// isNotExist reports a missing profile file.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
