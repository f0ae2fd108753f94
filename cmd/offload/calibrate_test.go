package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel/record"
)

func TestCalibrateWritesProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.json")
	code, out, errs := runCmd(t, "calibrate", "-evp", "aes-128-ctr", "-both", "-seconds", "0.002", "-max-frame", "1024", "-o", path)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	p, err := selector.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := selector.Check(p); err != nil {
		t.Errorf("fresh profile: %v", err)
	}
	if len(p.Tables) != 2 || p.MaxFrame != 1024 {
		t.Fatalf("tables %d, max frame %d", len(p.Tables), p.MaxFrame)
	}
	for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		tbl, err := p.Table(engine.Cipher{Mode: engine.CTR, KeyBits: 128}, d)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "aes-128-ctr "+d.String()+":") {
			t.Errorf("summary has no %v table:\n%s", d, out)
		}
		sw, ok := tbl.Engine(engine.SoftwareName)
		if !ok || !sw.Usable() || tbl.Points[0].BPS[engine.SoftwareName] <= 0 {
			t.Errorf("%v: software not measured: %+v", d, tbl)
		}
	}
	// Progress: a line per run with its figure, on stderr.
	if !strings.Contains(errs, "aes-128-ctr encrypt grid") || !strings.Contains(errs, "MB/s") || !strings.Contains(errs, "profile written to "+path) {
		t.Errorf("progress:\n%s", errs)
	}
	// Every engine is listed with its driver or why it can't be used.
	for _, e := range engine.Discover(engine.Cipher{Mode: engine.CTR, KeyBits: 128}, engine.Options{}) {
		if !strings.Contains(out, "    "+e.Name()+" ") {
			t.Errorf("summary does not list %s:\n%s", e.Name(), out)
		}
	}

	// Another cipher into the same file keeps the first one's tables.
	code, out, errs = runCmd(t, "calibrate", "-evp", "aes-256-cbc", "-decrypt", "-seconds", "0.002", "-max-frame", "1024", "-o", path, "-json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var printed selector.Profile
	if err := json.Unmarshal([]byte(out), &printed); err != nil {
		t.Fatalf("-json: %v\n%s", err, out)
	}
	if len(printed.Tables) != 3 || printed.Tables[0].Cipher != "aes-256-cbc" || printed.Tables[0].Direction != "decrypt" {
		t.Errorf("-json tables: %+v", printed.Tables)
	}
	if !strings.Contains(errs, "kept 2 table(s)") {
		t.Errorf("stderr: %s", errs)
	}
}

func TestCalibrateUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-decrypt", "-both"}, {"-seconds", "0"}, {"-max-frame", "100"}, {"-max-frame", "8"}, {"extra"},
	} {
		if code, _, _ := runCmd(t, append([]string{"calibrate"}, args...)...); code != 2 {
			t.Errorf("calibrate %v: exit %d, want 2", args, code)
		}
	}
	if code, _, errs := runCmd(t, "calibrate", "-evp", "des", "-o", filepath.Join(t.TempDir(), "p.json")); code != 2 || !strings.Contains(errs, "unknown cipher") {
		t.Errorf("bad cipher: exit %d %s", code, errs)
	}
}

// calibrate takes the max_frame values a config takes, no others: a
// profile measured to a smaller frame would fit no link. The floor is
// record.MinMaxFrame, and a config at it loads.
func TestCalibrateMaxFrameFloor(t *testing.T) {
	for _, n := range []int{record.MinMaxFrame - 16, 512, 1000, record.HardMaxFrame + 16} {
		code, _, errs := runCmd(t, "calibrate", "-seconds", "0.002", "-max-frame", strconv.Itoa(n), "-o", filepath.Join(t.TempDir(), "p.json"))
		want := fmt.Sprintf("-max-frame %d bytes: want a multiple of 16 from %d to %d", n, record.MinMaxFrame, record.HardMaxFrame)
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("-max-frame %d: exit %d, want 2 and %q in\n%s", n, code, want, errs)
		}
		if _, err := config.ParseServer("s.yaml", []byte(fmt.Sprintf("listen: :7000\nkey_file: k\nservices: {web: 127.0.0.1:80}\nmax_frame: %d\n", n))); err == nil {
			t.Errorf("max_frame %d: calibrate refuses it, a config takes it", n)
		}
	}
	for _, n := range []int{record.MinMaxFrame, record.HardMaxFrame} {
		if _, err := config.ParseServer("s.yaml", []byte(fmt.Sprintf("listen: :7000\nkey_file: k\nservices: {web: 127.0.0.1:80}\nmax_frame: %d\n", n))); err != nil {
			t.Errorf("max_frame %d, which calibrate takes: %v", n, err)
		}
	}
}

func TestBandLines(t *testing.T) {
	tbl := &selector.Table{
		Bands: []selector.Band{{From: 1, To: 6143, Engine: "software"}, {From: 6144, To: 16384, Engine: "afalg:dev"}},
		Points: []selector.Point{
			{Size: 16, BPS: map[string]float64{"software": 20, "afalg:dev": 1}},
			{Size: 16384, BPS: map[string]float64{"software": 20, "afalg:dev": 42}},
		},
	}
	got := strings.Join(bandLines(tbl), "\n")
	want := "software up to 6143 B\nafalg:dev from 6144 B: 2.10x software at 16384 B"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTrialLine(t *testing.T) {
	for _, tc := range []struct {
		h    *selector.HybridTrial
		want string
	}{
		{nil, ""},
		{&selector.HybridTrial{Device: "afalg:dev", CPU: "software", Size: 65536, Workers: 4, Queue: 3, AutoBPS: 68e6, HybridBPS: 65.7e6, Runs: 3},
			"hybrid trial, 4 frames of 65536 B in flight: auto 68.0 MB/s, hybrid 65.7 MB/s (0.97x, 0 frames to software, median of 3): not kept: hybrid is auto here"},
		{&selector.HybridTrial{Device: "afalg:dev", CPU: "software", Size: 16384, Workers: 4, Queue: 2, AutoBPS: 20e6, HybridBPS: 30e6, Runs: 3, Handed: 120, Keep: true},
			"hybrid trial, 4 frames of 16384 B in flight: auto 20.0 MB/s, hybrid 30.0 MB/s (1.50x, 120 frames to software, median of 3): kept: hybrid hands afalg:dev's frames to software when 2 wait and afalg:dev is loaded"},
		{&selector.HybridTrial{Size: 65536, Failed: "device fell over"}, "hybrid trial at 65536 B: failed (device fell over): hybrid is auto here"},
	} {
		if got := trialLine(tc.h); got != tc.want {
			t.Errorf("trialLine(%+v)\n got %q\nwant %q", tc.h, got, tc.want)
		}
	}
}
