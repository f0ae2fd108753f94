package selector

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

var cbc256 = engine.Cipher{Mode: engine.CBC, KeyBits: 256}

func calibrateSynth(t *testing.T, s *synth, maxFrame, repeats int, engines ...engine.Engine) *Table {
	t.Helper()
	m := fakeMachine("test 1.0", false, engines...)
	p, err := Calibrate(context.Background(), Config{
		Ciphers: []engine.Cipher{cbc256}, Directions: []engine.Direction{engine.Encrypt},
		Engines: m.Discover, MaxFrame: maxFrame, Repeats: repeats, machine: m, measure: s.measure, push: s.push,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tables) != 1 {
		t.Fatalf("%d tables", len(p.Tables))
	}
	if err := p.validate(); err != nil {
		t.Fatalf("calibrated profile invalid: %v", err)
	}
	return &p.Tables[0]
}

// firstWin is the smallest multiple of 16 from which hw beats sw by more
// than margin up to limit (or 0).
func firstWin(hw, sw curve, from, limit int) int {
	for s := from; s <= limit; s += 16 {
		if hw(s) > sw(s)*(1+DefaultMargin) {
			return s
		}
	}
	return 0
}

func bandEngines(bs []Band) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Engine)
	}
	return out
}

func TestGrid(t *testing.T) {
	got := grid(16384)
	want := []int{16, 32, 64, 128, 256, 512, 1024, 1440, 1472, 2048, 4096, 8192, 16368, 16384}
	if !slices.Equal(got, want) {
		t.Errorf("grid(16384) = %v, want %v", got, want)
	}
	if got := grid(1000); !slices.Equal(got, []int{16, 32, 64, 128, 256, 512, 976, 992}) {
		t.Errorf("grid(1000) = %v", got)
	}
}

func TestCalibrateNoCrossing(t *testing.T) {
	s := newSynth(0, map[string]curve{swEngine.name: flat(100), hwEngine.name: saturating(90, 1024)})
	tbl := calibrateSynth(t, s, 16384, 3, swEngine, hwEngine)
	if len(tbl.Bands) != 1 || tbl.Bands[0] != (Band{1, 16384, engine.SoftwareName}) {
		t.Fatalf("bands %+v, want software everywhere", tbl.Bands)
	}
	for _, pt := range tbl.Points {
		if pt.Samples != 1 {
			t.Errorf("size %d measured %d times; no crossing, no close call: want 1", pt.Size, pt.Samples)
		}
	}
}

func TestCalibrateOneCrossing(t *testing.T) {
	sw, hw := flat(20), saturating(100, 8192)
	s := newSynth(0, map[string]curve{swEngine.name: sw, hwEngine.name: hw})
	tbl := calibrateSynth(t, s, 16384, 3, swEngine, hwEngine)
	if got := bandEngines(tbl.Bands); !slices.Equal(got, []string{"software", "afalg:dev"}) {
		t.Fatalf("bands %+v", tbl.Bands)
	}
	// Grid points 2048 and 4096 bracket it; 5 bisection steps leave 64 B.
	truth := firstWin(hw, sw, 16, 16384)
	if at := tbl.Bands[1].From; at < truth || at > truth+2048>>DefaultRefineSteps {
		t.Errorf("crossover at %d, true one at %d (tolerance %d)", at, truth, 2048>>DefaultRefineSteps)
	}
	if tbl.Bands[0].To != tbl.Bands[1].From-1 || tbl.Bands[1].To != 16384 {
		t.Errorf("bands do not tile: %+v", tbl.Bands)
	}
	// The refinement measured between grid points, median of 3.
	refined := 0
	for _, pt := range tbl.Points {
		if !slices.Contains(grid(16384), pt.Size) {
			refined++
			if pt.Samples != 3 {
				t.Errorf("refined point %d has %d samples, want 3", pt.Size, pt.Samples)
			}
		}
	}
	if refined == 0 {
		t.Error("no refined points")
	}
}

func TestCalibrateTwoCrossings(t *testing.T) {
	sw := flat(20)
	hw := func(s int) float64 {
		if s >= 1000 && s <= 8000 {
			return 30e6
		}
		return 5e6
	}
	s := newSynth(0, map[string]curve{swEngine.name: sw, hwEngine.name: hw})
	tbl := calibrateSynth(t, s, 16384, 3, swEngine, hwEngine)
	if got := bandEngines(tbl.Bands); !slices.Equal(got, []string{"software", "afalg:dev", "software"}) {
		t.Fatalf("bands %+v", tbl.Bands)
	}
	if at := tbl.Bands[1].From; at < 1008 || at > 1008+512>>DefaultRefineSteps {
		t.Errorf("first crossover at %d, want 1008..%d", at, 1008+512>>DefaultRefineSteps)
	}
	if at := tbl.Bands[2].From; at < 8016 || at > 8016+4096>>DefaultRefineSteps {
		t.Errorf("second crossover at %d, want 8016..%d", at, 8016+4096>>DefaultRefineSteps)
	}
}

func TestCalibrateNoisy(t *testing.T) {
	sw, hw := flat(20), saturating(100, 8192)
	truth := firstWin(hw, sw, 16, 16384)
	for _, tc := range []struct {
		name    string
		hw      curve
		noise   float64
		want    []string
		nearest int // the crossover within a factor 2 of it
	}{
		// ±8% noise on each run: medians of 5 keep one crossover near
		// the true one.
		{"saturating", hw, 0.08, []string{"software", "afalg:dev"}, truth},
		// 1% faster, ±0.8% noise: at most 2.6% faster in any run, inside
		// the 3% margin: software everywhere, no flapping between the two.
		{"within margin", func(s int) float64 { return 1.01 * sw(s) }, 0.008, []string{"software"}, 0},
		// The same without the margin would flap.
		{"margin is what keeps it", func(s int) float64 { return 1.01 * sw(s) }, 0.008, nil, -1},
		// 10% faster everywhere, even with ±2% noise: the device everywhere.
		{"clearly faster", func(s int) float64 { return 1.10 * sw(s) }, 0.02, []string{"afalg:dev"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSynth(tc.noise, map[string]curve{swEngine.name: sw, hwEngine.name: tc.hw})
			if tc.nearest < 0 {
				flaps := 0
				for i := range 50 {
					pt := Point{BPS: map[string]float64{
						"software":  s.curves["software"](16*(i+1)) * (1 + s.noise*(2*s.rng.Float64()-1)),
						"afalg:dev": s.curves["afalg:dev"](16*(i+1)) * (1 + s.noise*(2*s.rng.Float64()-1)),
					}}
					if winner(pt, []string{"software", "afalg:dev"}, 0) != "afalg:dev" {
						flaps++
					}
				}
				if flaps == 0 {
					t.Error("without a margin the winner never changed: the noise is too small to test the margin")
				}
				return
			}
			tbl := calibrateSynth(t, s, 16384, 5, swEngine, hwEngine)
			if got := bandEngines(tbl.Bands); !slices.Equal(got, tc.want) {
				t.Fatalf("bands %+v, want engines %v", tbl.Bands, tc.want)
			}
			if tc.nearest > 0 {
				if at := tbl.Bands[1].From; at < tc.nearest/2 || at > tc.nearest*2 {
					t.Errorf("crossover at %d, true one at %d", at, tc.nearest)
				}
			}
		})
	}
}

func TestCalibrateUnavailableEngine(t *testing.T) {
	gone := fake{name: "cryptodev", err: errGone}
	s := newSynth(0, map[string]curve{swEngine.name: flat(20)})
	tbl := calibrateSynth(t, s, 1024, 3, swEngine, gone)
	e, ok := tbl.Engine("cryptodev")
	if !ok || e.Driver != nil || !strings.Contains(e.Unavailable, "module unloaded") {
		t.Errorf("engine info %+v", e)
	}
	if s.runs["cryptodev"] != 0 {
		t.Errorf("unavailable engine was measured %d times", s.runs["cryptodev"])
	}
}

// An engine that would win but fails during the grid is recorded as failed
// with its error and wins nothing.
func TestCalibrateEngineFailsMidway(t *testing.T) {
	s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: flat(200)})
	s.failAfter[hwEngine.name] = 6 // warm-up, then 4 grid sizes, then the 6th run fails
	var progressErr error
	m := fakeMachine("test 1.0", false, swEngine, hwEngine)
	p, err := Calibrate(context.Background(), Config{
		Ciphers: []engine.Cipher{cbc256}, Directions: []engine.Direction{engine.Encrypt},
		Engines: m.Discover, MaxFrame: 4096, machine: m, measure: s.measure, push: s.push,
		Progress: func(pr Progress) {
			if pr.Err != nil {
				progressErr = pr.Err
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tbl := &p.Tables[0]
	e, _ := tbl.Engine(hwEngine.name)
	if e.Usable() || !strings.Contains(e.Failed, errFell.Error()) {
		t.Errorf("engine info %+v, want failed with %q", e, errFell)
	}
	if !errors.Is(progressErr, errFell) {
		t.Errorf("progress error %v, want errFell", progressErr)
	}
	if got := bandEngines(tbl.Bands); !slices.Equal(got, []string{"software"}) {
		t.Errorf("bands %+v: a failed engine must not win", tbl.Bands)
	}
	// Its figures up to the failure are kept (for plots), not used.
	if n := countPoints(tbl, hwEngine.name); n != 4 {
		t.Errorf("failed engine has %d points, want the 4 it finished", n)
	}
}

func countPoints(tbl *Table, name string) int {
	n := 0
	for _, pt := range tbl.Points {
		if _, ok := pt.BPS[name]; ok {
			n++
		}
	}
	return n
}

// flaky is a real engine (software underneath) whose Crypters fail from
// failSize bytes on: calibration runs it through speed.Run like any other.
func flaky(failSize int) *enginetest.Failing {
	return &enginetest.Failing{Label: "flaky", Drv: engine.Driver{Name: "flaky_aes", Hardware: true}, Err: errFell,
		Fail: func(_ uint64, d engine.Direction, size int) bool { return d == engine.Encrypt && size >= failSize }}
}

func TestCalibrateRealRunsEngineFails(t *testing.T) {
	engines := []engine.Engine{engine.Software{}, flaky(256)}
	p, err := Calibrate(context.Background(), Config{
		Ciphers: []engine.Cipher{cbc256}, Directions: []engine.Direction{engine.Encrypt},
		Engines: func(engine.Cipher) []engine.Engine { return engines }, MaxFrame: 1024,
		Duration: 2 * time.Millisecond, RefineSteps: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	tbl := &p.Tables[0]
	e, _ := tbl.Engine("flaky")
	if e.Usable() || !strings.Contains(e.Failed, errFell.Error()) || !strings.Contains(e.Failed, "256 bytes") {
		t.Errorf("flaky engine info %+v", e)
	}
	if n := countPoints(tbl, "flaky"); n != 4 {
		t.Errorf("flaky has %d points, want 4 (16..128)", n)
	}
	for _, b := range tbl.Bands {
		if b.Engine == "flaky" {
			t.Errorf("failed engine wins band %+v", b)
		}
	}
	if tbl.Points[0].BPS[engine.SoftwareName] <= 0 {
		t.Errorf("software not measured: %+v", tbl.Points[0])
	}
}

func TestCalibrateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Calibrate(ctx, Config{Ciphers: []engine.Cipher{cbc256}, Engines: func(engine.Cipher) []engine.Engine {
		return []engine.Engine{engine.Software{}}
	}, Duration: time.Millisecond})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestWinnerHysteresis(t *testing.T) {
	u := []string{"software", "a", "b"}
	for _, tc := range []struct {
		bps  map[string]float64
		want string
	}{
		{map[string]float64{"software": 100, "a": 103}, "software"},    // at the margin: keep software
		{map[string]float64{"software": 100, "a": 103.1}, "a"},         // beyond it
		{map[string]float64{"software": 100, "a": 110, "b": 120}, "b"}, // the fastest
		{map[string]float64{"software": 100, "a": 90}, "software"},
		{map[string]float64{"a": 5}, "a"}, // software not measured
	} {
		if got := winner(Point{BPS: tc.bps}, u, DefaultMargin); got != tc.want {
			t.Errorf("winner(%v) = %s, want %s", tc.bps, got, tc.want)
		}
	}
}

func TestSmooth(t *testing.T) {
	for _, tc := range []struct{ in, want []Band }{
		{[]Band{{1, 65519, "software"}, {65520, 65536, "dev"}}, []Band{{1, 65536, "software"}}},
		{[]Band{{1, 16127, "dev"}, {16128, 16383, "software"}, {16384, 65536, "dev"}}, []Band{{1, 65536, "dev"}}},
		{[]Band{{1, 3071, "software"}, {3072, 16127, "a"}, {16128, 16383, "software"}, {16384, 65536, "b"}},
			[]Band{{1, 3071, "software"}, {3072, 16127, "a"}, {16128, 16383, "software"}, {16384, 65536, "b"}}}, // A B C: kept
		{[]Band{{1, 6127, "software"}, {6128, 16384, "dev"}}, []Band{{1, 6127, "software"}, {6128, 16384, "dev"}}},
		{[]Band{{1, 16, "dev"}, {17, 16384, "software"}}, []Band{{1, 16, "dev"}, {17, 16384, "software"}}}, // wide enough for its size
	} {
		if got := smooth(slices.Clone(tc.in)); !slices.Equal(got, tc.want) {
			t.Errorf("smooth(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// Two devices within noise of each other, alternating: one band, not
// many; a clear overtaking still switches.
func TestBandsHysteresisBetweenDevices(t *testing.T) {
	u := []string{"software", "a", "b"}
	pt := func(size int, sw, a, b float64) Point {
		return Point{Size: size, BPS: map[string]float64{"software": sw, "a": a, "b": b}}
	}
	got := bands([]Point{
		pt(16, 10, 1, 1), pt(1024, 10, 20, 20.2), pt(2048, 10, 20.4, 20), pt(4096, 10, 30, 30.5),
		pt(8192, 10, 30.8, 30), pt(16384, 10, 40, 30), pt(32768, 10, 45, 30),
	}, u, DefaultMargin, 32768)
	want := []Band{{1, 1023, "software"}, {1024, 16383, "b"}, {16384, 32768, "a"}}
	if !slices.Equal(got, want) {
		t.Errorf("bands %v, want %v", got, want)
	}
}
