package selector

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
)

func setupOpts(m *machine, s *synth, log *zap.Logger) SetupOptions {
	return SetupOptions{Logger: log, machine: m, measure: s.measure, push: s.push, MaxFrame: 16384}
}

func TestSetupMeasuresOnceThenLoads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.json")
	m := fakeMachine("linux 6.1.0-test", false, swEngine, hwEngine)
	s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: saturating(100, 8192)})
	core, logs := observer.New(zap.InfoLevel)
	engines, pol, err := Setup(context.Background(), SpecAuto, cbc256, path, setupOpts(m, s, zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if len(engines) != 2 || engines[0].Name() != "software" || engines[1].Name() != "afalg:dev" {
		t.Fatalf("engines %v", engines)
	}
	if pol.Pick(16, engine.Encrypt) != 0 || pol.Pick(16384, engine.Encrypt) != 1 || pol.Pick(16384, engine.Decrypt) != 1 {
		t.Error("policy does not follow the synthetic curves")
	}
	if logs.FilterMessage("measuring engines").FilterField(zap.String("why", "no profile yet")).Len() != 1 {
		t.Errorf("no 'measuring engines' line with the reason: %v", logs.All())
	}
	if logs.FilterMessage("measuring").Len() < 5 {
		t.Errorf("progress: %d lines", logs.FilterMessage("measuring").Len())
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("profile not saved: %v", err)
	}

	// Second start: loaded, nothing measured.
	calls := s.calls
	if _, _, err := Setup(context.Background(), SpecHybrid, cbc256, path, setupOpts(m, s, nil)); err != nil {
		t.Fatal(err)
	}
	if s.calls != calls {
		t.Errorf("second start measured %d runs; the profile was fresh", s.calls-calls)
	}

	// Another cipher: measured and added; the first one kept.
	ctr := engine.Cipher{Mode: engine.CTR, KeyBits: 128}
	if _, _, err := Setup(context.Background(), SpecAuto, ctr, path, setupOpts(m, s, nil)); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tables) != 4 {
		t.Errorf("%d tables, want 4 (two ciphers, two directions)", len(p.Tables))
	}

	// The module went away: stale, measured again, the reason logged.
	gone := fakeMachine("linux 6.1.0-test", false, swEngine, fake{name: hwEngine.name, err: errGone})
	core, logs = observer.New(zap.InfoLevel)
	calls = s.calls
	engines, pol, err = Setup(context.Background(), SpecAuto, cbc256, path, setupOpts(gone, s, zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if s.calls == calls {
		t.Error("stale profile not measured again")
	}
	why := logs.FilterMessage("measuring engines").All()
	if len(why) != 1 || !strings.Contains(why[0].ContextMap()["why"].(string), "afalg:dev was dev_aes_cbc, now unavailable") {
		t.Errorf("reason: %v", why)
	}
	if len(engines) != 1 || pol.Pick(16384, engine.Encrypt) != 0 {
		t.Errorf("engines %v after the device went away", engines)
	}
	soft := logs.FilterMessageSnippet("software serves every frame size").All()
	if len(soft) != 1 {
		t.Fatalf("no explanation: %v", logs.All())
	}
	if w := soft[0].ContextMap()["why_not"]; !strings.Contains(strings.Join(toStrings(w), "|"), "afalg:dev: unavailable: engine unavailable: algorithm not registered: module unloaded") {
		t.Errorf("why_not = %v", w)
	}
}

func toStrings(v any) []string {
	var out []string
	if xs, ok := v.([]any); ok {
		for _, x := range xs {
			out = append(out, x.(string))
		}
	}
	if xs, ok := v.([]string); ok {
		out = xs
	}
	return out
}

func TestSetupLargerFramesRemeasure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.json")
	m := fakeMachine("k", false, swEngine, hwEngine)
	s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: flat(10)})
	o := setupOpts(m, s, nil)
	o.MaxFrame = 4096
	if _, _, err := Setup(context.Background(), SpecAuto, cbc256, path, o); err != nil {
		t.Fatal(err)
	}
	calls := s.calls
	o.MaxFrame = 8192
	if _, _, err := Setup(context.Background(), SpecAuto, cbc256, path, o); err != nil {
		t.Fatal(err)
	}
	if s.calls == calls {
		t.Error("profile measured up to 4096 used for 8192-byte frames")
	}
	if p, _ := Load(path); p == nil || p.MaxFrame != 8192 {
		t.Errorf("saved max frame: %+v", p)
	}
}

func TestSetupUnwritableProfileStillWorks(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	os.WriteFile(blocker, nil, 0o644)
	m := fakeMachine("k", false, swEngine, hwEngine)
	s := newSynth(0, map[string]curve{swEngine.name: flat(20), hwEngine.name: flat(40)})
	core, logs := observer.New(zap.WarnLevel)
	_, pol, err := Setup(context.Background(), SpecAuto, cbc256, filepath.Join(blocker, "profile.json"), setupOpts(m, s, zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	if pol.Pick(64, engine.Encrypt) != 1 {
		t.Error("policy wrong")
	}
	if logs.FilterMessageSnippet("not saved").Len() != 1 {
		t.Errorf("no warning: %v", logs.All())
	}
}

func TestSetupBadSpec(t *testing.T) {
	_, _, err := Setup(context.Background(), "fastest", cbc256, "", SetupOptions{})
	if !errors.Is(err, engine.ErrUnknownEngine) {
		t.Errorf("err %v", err)
	}
}

// On a machine without kernel engines (the usual CI machine), auto is
// software everywhere and says why for each engine. Where a kernel engine
// is available this test has nothing to check.
func TestSetupThisMachine(t *testing.T) {
	var reasons []string
	for _, e := range engine.Discover(cbc256, engine.Options{}) {
		if e.Name() == engine.SoftwareName {
			continue
		}
		if _, err := e.Driver(cbc256); err == nil {
			t.Skipf("engine %s is available here; the VM test covers this case", e.Name())
		}
		reasons = append(reasons, e.Name())
	}
	core, logs := observer.New(zap.InfoLevel)
	path := filepath.Join(t.TempDir(), "profile.json")
	engines, pol, err := Setup(context.Background(), SpecAuto, cbc256, path, SetupOptions{
		Logger: zap.New(core), Duration: time.Millisecond, MaxFrame: 1024,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(engines) != 1 || pol.Pick(1024, engine.Encrypt) != 0 {
		t.Fatalf("engines %v", engines)
	}
	soft := logs.FilterMessageSnippet("software serves every frame size").All()
	if len(soft) != 1 {
		t.Fatalf("no explanation in %v", logs.All())
	}
	why := strings.Join(toStrings(soft[0].ContextMap()["why_not"]), "\n")
	for _, name := range reasons {
		if !strings.Contains(why, name+": unavailable: ") {
			t.Errorf("why_not does not explain %s:\n%s", name, why)
		}
	}
	t.Logf("why_not:\n%s", why)
}
