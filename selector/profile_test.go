package selector

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// testProfile: aes-256-cbc, software up to 6143 B and the device from 6144
// B for encryption, software everywhere for decryption.
func testProfile() *Profile {
	m := fakeMachine("linux 6.1.0-test", false, swEngine, hwEngine)
	p := newProfile(*m, 16384)
	drv := func(e fake) *engine.Driver {
		d, _ := e.Driver(cbc256)
		return &d
	}
	engines := []EngineInfo{{Name: swEngine.name, Driver: drv(swEngine)}, {Name: hwEngine.name, Driver: drv(hwEngine)}}
	points := []Point{
		{Size: 16, BPS: map[string]float64{"software": 20e6, "afalg:dev": 1e6}, Samples: 1},
		{Size: 8192, BPS: map[string]float64{"software": 20e6, "afalg:dev": 60e6}, Samples: 3},
		{Size: 16384, BPS: map[string]float64{"software": 20e6, "afalg:dev": 80e6}, Samples: 1},
	}
	p.Tables = []Table{
		{Cipher: "aes-256-cbc", Direction: "encrypt", Margin: DefaultMargin, Engines: engines, Points: points,
			Bands: []Band{{1, 6143, "software"}, {6144, 16384, "afalg:dev"}},
			// Measured with 4 frames in flight: as fast as one at a time.
			Hybrid: &HybridTrial{Device: "afalg:dev", CPU: "software", Size: 16384, Workers: 4, Queue: 4,
				AutoBPS: 80e6, HybridBPS: 95e6, Runs: 3, Handed: 40, Keep: true}},
		{Cipher: "aes-256-cbc", Direction: "decrypt", Margin: DefaultMargin, Engines: engines, Points: points,
			Bands: []Band{{1, 16384, "software"}}},
	}
	return p
}

func TestSaveLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "profile.json")
	p := testProfile()
	if err := Save(path, p); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, p)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "none.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing profile: %v", err)
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		modify func(*Profile)
		want   error
	}{
		{"old version", func(p *Profile) { p.Version = 0 }, ErrStale},
		{"gap in bands", func(p *Profile) { p.Tables[0].Bands[1].From = 6200 }, ErrInvalid},
		{"bands short of max frame", func(p *Profile) { p.Tables[1].Bands[0].To = 8192 }, ErrInvalid},
		{"unknown band engine", func(p *Profile) { p.Tables[0].Bands[1].Engine = "nope" }, ErrInvalid},
		{"bad cipher", func(p *Profile) { p.Tables[0].Cipher = "des" }, ErrInvalid},
	} {
		p := testProfile()
		tc.modify(p)
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
		if err := Save(path, p); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(path); !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
	path := filepath.Join(dir, "garbage.json")
	os.WriteFile(path, []byte("{not json"), 0o644)
	if _, err := Load(path); err == nil {
		t.Error("garbage loaded")
	}
}

func TestCheck(t *testing.T) {
	p := testProfile()
	cpuOnly := fake{name: "afalg:aes-generic", driver: "cbc(aes-generic)"}
	for _, tc := range []struct {
		name string
		m    *machine
		want []string // substrings of the error; none: fresh
	}{
		{"same", fakeMachine("linux 6.1.0-test", false, swEngine, hwEngine), nil},
		{"new cpu template instance is no change", fakeMachine("linux 6.1.0-test", false, swEngine, hwEngine, cpuOnly), nil},
		{"kernel", fakeMachine("linux 6.1.0-other", false, swEngine, hwEngine),
			[]string{`kernel was "linux 6.1.0-test", now "linux 6.1.0-other"`}},
		{"cpu aes", fakeMachine("linux 6.1.0-test", true, swEngine, hwEngine),
			[]string{"CPU AES instructions were off, now on"}},
		{"module gone", fakeMachine("linux 6.1.0-test", false, swEngine, fake{name: hwEngine.name, err: errGone}),
			[]string{"engine afalg:dev was dev_aes_cbc, now unavailable", "module unloaded"}},
		{"other driver", fakeMachine("linux 6.1.0-test", false, swEngine, fake{name: hwEngine.name, driver: "dev2_aes", hw: true}),
			[]string{"engine afalg:dev was driver dev_aes_cbc, now dev2_aes"}},
		{"new hardware", fakeMachine("linux 6.1.0-test", false, swEngine, hwEngine, fake{name: "cryptodev", driver: "mtk-aes", hw: true}),
			[]string{"new hardware engine cryptodev (mtk-aes)"}},
		{"two changes", fakeMachine("linux 6.2", true, swEngine, hwEngine),
			[]string{"kernel was", "CPU AES"}},
	} {
		err := check(p, *tc.m)
		if tc.want == nil {
			if err != nil {
				t.Errorf("%s: %v, want fresh", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrStale) {
			t.Errorf("%s: err %v, want ErrStale", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
	// An engine that was unavailable and now serves the cipher.
	p.Tables[0].Engines[1] = EngineInfo{Name: hwEngine.name, Unavailable: "no AF_ALG"}
	p.Tables[1].Engines[1] = p.Tables[0].Engines[1]
	err := check(p, *fakeMachine("linux 6.1.0-test", false, swEngine, hwEngine))
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "afalg:dev was unavailable, now dev_aes_cbc") {
		t.Errorf("engine back: %v", err)
	}
}

func TestCheckThisMachine(t *testing.T) {
	m := thisMachine(engine.Options{})
	p := newProfile(m, 1024)
	p.Tables = []Table{{Cipher: "aes-128-ctr", Direction: "encrypt"}}
	for _, e := range m.Discover(engine.Cipher{Mode: engine.CTR, KeyBits: 128}) {
		info := EngineInfo{Name: e.Name()}
		if d, err := e.Driver(engine.Cipher{Mode: engine.CTR, KeyBits: 128}); err != nil {
			info.Unavailable = err.Error()
		} else {
			info.Driver = &d
		}
		p.Tables[0].Engines = append(p.Tables[0].Engines, info)
	}
	if err := Check(p); err != nil {
		t.Errorf("a profile of this machine, now: %v", err)
	}
	p.Kernel += "-x"
	if err := Check(p); !errors.Is(err, ErrStale) {
		t.Errorf("other kernel: %v", err)
	}
}

func TestDefaultPath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("XDG_CACHE_HOME is the cache folder on Linux only")
	}
	t.Setenv("XDG_CACHE_HOME", "/some/cache")
	want := "/some/cache/offload/profile.json"
	if os.Geteuid() == 0 {
		want = "/var/lib/offload/profile.json"
	}
	if got := DefaultPath(); got != want {
		t.Errorf("DefaultPath() = %s, want %s", got, want)
	}
}
