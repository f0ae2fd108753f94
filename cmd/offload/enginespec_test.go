package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
)

// Every engine the registry knows appears in every list the commands
// make: offload engines, bench -policy all, calibrate (measured or not
// measured with why) and the help texts; speed -engine all is
// TestSpeedAllListsEveryEngine. The lists once drifted apart (afalg-aead
// was in none of them); they all come from engine.Families and
// engine.All now, and this keeps it so.
func TestEveryEngineInEveryList(t *testing.T) {
	families := engine.Families()
	if len(families) < 4 {
		t.Fatalf("registry: %d families", len(families))
	}

	code, out, errs := runCmd(t, "engines", "-json")
	var list []engineInfo
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("engines -json: exit %d\n%s\n%s", code, out, errs)
	}
	for _, f := range families {
		i := slices.IndexFunc(list, func(e engineInfo) bool { return e.Engine == f.Name })
		if i < 0 {
			t.Errorf("offload engines lacks %s", f.Name)
		} else if list[i].Description != f.Description {
			t.Errorf("offload engines describes %s as %q, the registry as %q", f.Name, list[i].Description, f.Description)
		}
	}

	for _, c := range engine.Ciphers {
		policies := expandPolicies("all", c)
		for _, f := range families {
			if !slices.Contains(policies, f.Name) {
				t.Errorf("bench -policy all for %v lacks %s: %v", c, f.Name, policies)
			}
		}
		for _, p := range []string{selector.SpecAuto, selector.SpecHybrid} {
			if !slices.Contains(policies, p) {
				t.Errorf("bench -policy all for %v lacks %s: %v", c, p, policies)
			}
		}
		for _, p := range policies {
			if err := selector.CheckSpec(p); err != nil {
				t.Errorf("bench -policy all runs %q, which the spec check refuses: %v", p, err)
			}
		}
	}

	path := filepath.Join(t.TempDir(), "profile.json")
	code, out, errs = runCmd(t, "calibrate", "-evp", "aes-128-cbc", "-seconds", "0.002", "-max-frame", "1024", "-o", path)
	if code != 0 {
		t.Fatalf("calibrate: exit %d\n%s\n%s", code, out, errs)
	}
	p, err := selector.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tbl := range p.Tables {
		for _, f := range families {
			_, measured := tbl.Engine(f.Name)
			skipped := slices.ContainsFunc(tbl.NotMeasured, func(n selector.NotMeasured) bool { return n.Name == f.Name && n.Why != "" })
			if measured == skipped {
				t.Errorf("calibrate %s %s: %s measured %v, not measured %v: want exactly one", tbl.Cipher, tbl.Direction, f.Name, measured, skipped)
			}
			if !strings.Contains(out, "    "+f.Name+" ") {
				t.Errorf("calibrate's summary does not list %s:\n%s", f.Name, out)
			}
		}
	}

	for _, f := range families {
		if !strings.Contains(engine.Specs, f.Syntax()) || !strings.Contains(selector.Specs(), f.Syntax()) {
			t.Errorf("help texts lack %s: %q", f.Syntax(), engine.Specs)
		}
	}
}
