package speed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

func TestRunSoftware(t *testing.T) {
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	var started, done []int
	var ready []engine.Driver
	res, drv, err := Run(context.Background(), engine.Software{}, Config{
		Cipher: c, Sizes: []int{16, 1024}, Duration: 30 * time.Millisecond, Multi: 2,
		Ready: func(d engine.Driver) { ready = append(ready, d) },
		Start: func(s int) {
			if len(ready) != 1 {
				t.Errorf("size %d started with %d Ready calls before it, want 1", s, len(ready))
			}
			started = append(started, s)
		},
		Done: func(r Result) { done = append(done, r.Size) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Size != 16 || res[1].Size != 1024 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Ops <= 0 || r.Elapsed < 30*time.Millisecond || r.BytesPerSecond() <= 0 {
			t.Errorf("implausible result %+v", r)
		}
	}
	if len(started) != 2 || len(done) != 2 {
		t.Errorf("callbacks: start %v done %v", started, done)
	}
	if drv.Name == "" || drv.Hardware {
		t.Errorf("driver %+v", drv)
	}
	if len(ready) != 1 || ready[0] != drv {
		t.Errorf("Ready got %+v, want the run's driver %+v once", ready, drv)
	}
}

// ECB (measuring only) takes whole blocks like CBC.
func TestRunRejectsPartialECBBlocks(t *testing.T) {
	_, _, err := Run(context.Background(), engine.Software{}, Config{
		Cipher: engine.Cipher{Mode: engine.ECB, KeyBits: 256}, Sizes: []int{1472, 100}, Duration: time.Millisecond,
	})
	if !errors.Is(err, engine.ErrBlockSize) {
		t.Fatalf("err = %v, want ErrBlockSize", err)
	}
}

func TestRunRejectsPartialCBCBlocks(t *testing.T) {
	_, _, err := Run(context.Background(), engine.Software{}, Config{
		Cipher: engine.Cipher{Mode: engine.CBC, KeyBits: 128}, Sizes: []int{100}, Duration: time.Millisecond,
	})
	if !errors.Is(err, engine.ErrBlockSize) {
		t.Fatalf("err = %v, want ErrBlockSize", err)
	}
}

var errBroken = errors.New("device fell over")

// failing is an engine whose Crypters fail after a few calls.
func failing() *enginetest.Failing {
	return &enginetest.Failing{Label: "failing", Err: errBroken,
		Fail: func(n uint64, d engine.Direction, _ int) bool { return d == engine.Encrypt && n > 100 }}
}

func TestRunReportsEngineError(t *testing.T) {
	res, _, err := Run(context.Background(), failing(), Config{
		Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 128}, Sizes: []int{64}, Duration: time.Second,
	})
	if !errors.Is(err, errBroken) || len(res) != 0 {
		t.Fatalf("res %v err %v, want errBroken and no result", res, err)
	}
}

func TestRunCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, _, err := Run(ctx, engine.Software{}, Config{Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 128}})
	if !errors.Is(err, context.Canceled) || len(res) != 0 {
		t.Fatalf("res %v err %v", res, err)
	}
}

func curve(name string, bps ...float64) Curve {
	c := Curve{Engine: name}
	for i, b := range bps {
		size := 16 << (2 * i)
		c.Results = append(c.Results, Result{Size: size, Ops: int64(b), Elapsed: time.Duration(size) * time.Second})
	}
	return c
}

func TestWinners(t *testing.T) {
	for _, tc := range []struct {
		name   string
		curves []Curve
		want   []Band
	}{
		{"none", nil, nil},
		{"single", []Curve{curve("sw", 1, 2, 3)}, []Band{{From: 16, To: 256, Engine: "sw"}}},
		{"no crossing", []Curve{curve("sw", 5, 6, 7), curve("hw", 1, 2, 3)}, []Band{{From: 16, To: 256, Engine: "sw"}}},
		{"one crossing", []Curve{curve("sw", 5, 6, 7), curve("hw", 1, 7, 30)}, []Band{{From: 16, To: 16, Engine: "sw"}, {From: 64, To: 256, Engine: "hw"}}},
		{"two crossings", []Curve{curve("sw", 5, 6, 7), curve("hw", 1, 7, 3)}, []Band{{From: 16, To: 16, Engine: "sw"}, {From: 64, To: 64, Engine: "hw"}, {From: 256, To: 256, Engine: "sw"}}},
		{"failed engine ignored", []Curve{curve("sw", 5, 6), {Engine: "dead"}}, []Band{{From: 16, To: 64, Engine: "sw"}}},
	} {
		got := Winners(tc.curves)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %+v want %+v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i].From != tc.want[i].From || got[i].To != tc.want[i].To || got[i].Engine != tc.want[i].Engine || got[i].Lead != nil {
				t.Errorf("%s: band %d = %+v want %+v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}

// rounds makes an engine's rounds from per-round throughputs (bytes per
// second at sizes 16, 64, 256, ...).
func rounds(name string, perRound ...[]float64) Rounds {
	r := Rounds{Engine: name}
	for _, bps := range perRound {
		r.Runs = append(r.Runs, curve(name, bps...).Results)
	}
	return r
}

// A band's lead is the band engine's paired per-round ratio over the
// runner-up at the size where the median ratio is smallest; the table
// shows the median run per size.
func TestLeads(t *testing.T) {
	sw := rounds("sw", []float64{10, 10}, []float64{10, 10}, []float64{10, 10})
	hw := rounds("hw", []float64{5, 11}, []float64{4, 9}, []float64{6, 12}) // at 64 B: 1.1, 0.9, 1.2
	if m := hw.Median(); m.Results[0].BytesPerSecond() != 5 || m.Results[1].BytesPerSecond() != 11 {
		t.Fatalf("median curve %+v", m)
	}
	bands := Winners([]Curve{sw.Median(), hw.Median()})
	got := Leads(bands, []Rounds{sw, hw})
	if len(got) != 2 || got[0].Engine != "sw" || got[1].Engine != "hw" {
		t.Fatalf("bands %+v", got)
	}
	// sw at 16 B: 2.0, 2.5, 1.67 over hw: clear.
	if l := got[0].Lead; l == nil || got[0].LeadOver != "hw" || got[0].LeadSize != 16 || l.Straddles() || l.Median != 2 {
		t.Errorf("sw's lead %+v over %q at %d", l, got[0].LeadOver, got[0].LeadSize)
	}
	// hw at 64 B: 1.1, 0.9, 1.2 over sw: the rounds disagree.
	if l := got[1].Lead; l == nil || got[1].LeadOver != "sw" || got[1].LeadSize != 64 || !l.Straddles() || l.String() != "1.10x (within spread 0.90–1.20)" {
		t.Errorf("hw's lead %+v over %q at %d", l, got[1].LeadOver, got[1].LeadSize)
	}
	if bands[0].Lead != nil {
		t.Error("Leads modified its argument")
	}
}

// A crossover is doubted only by the leads next to it: a band whose
// narrowest lead straddles elsewhere does not make its other crossover
// unsure.
func TestSureCrossover(t *testing.T) {
	sw := rounds("sw", []float64{10, 10, 1, 1}, []float64{10, 10, 1, 1}, []float64{10, 10, 1, 1})
	// a wins 64 B (1.1, 0.9, 1.2 over sw: straddles) and 256 B (3x, every round).
	a := rounds("a", []float64{5, 11, 3, 2}, []float64{4, 9, 3, 2}, []float64{6, 12, 3, 2})
	v := rounds("v", []float64{1, 1, 1, 4}, []float64{1, 1, 1, 4}, []float64{1, 1, 1, 4}) // 1024 B: 2x over a
	bands := Leads(Winners([]Curve{sw.Median(), a.Median(), v.Median()}), []Rounds{sw, a, v})
	if len(bands) != 3 || bands[1].Engine != "a" || bands[1].From != 64 || bands[1].To != 256 || bands[2].Engine != "v" {
		t.Fatalf("bands %+v", bands)
	}
	if SureCrossover(bands[0], bands[1]) {
		t.Error("sw to a: a's lead at 64 B straddles, want unsure")
	}
	if !SureCrossover(bands[1], bands[2]) {
		t.Errorf("a to v: a's lead at 256 B %v and v's at 1024 B %v are clear, want sure", bands[1].ToLead, bands[2].FromLead)
	}
	if !bands[1].Lead.Straddles() {
		t.Errorf("a's narrowest lead %v, want the straddling one at 64 B", bands[1].Lead)
	}
}
