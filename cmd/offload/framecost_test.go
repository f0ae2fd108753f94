package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/offload-dev/offload/measure/speed"
)

func TestFrameCostTable(t *testing.T) {
	code, out, errs := runCmd(t, "frame-cost", "-engine", "software", "-evp", "aes-128-cbc", "-bytes", "1024", "-time", "20ms")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, re := range []string{
		`(?m)^1024-byte frames$`,
		`(?m)^  copy memmove\s+\d+\s+[\d.]+`,
		`(?m)^  cipher software \(go/[a-z0-9-]+\)\s+\d+\s+[\d.]+`,
		`(?m)^  mac hmac-sha256\s+\d+`, `(?m)^  mac gmac\s+\d+`, `(?m)^  mac poly1305\s+\d+`, `(?m)^  mac nhpoly1305\s+\d+`,
		`(?m)^    software \+ poly1305\s+\d+\s+[\d.]+\s+bottleneck (cipher|mac|copy) \(\d+%\)$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("no match for %s in\n%s", re, out)
		}
	}
	if !regexp.MustCompile(`(?m)^Doing mac gmac on 1024-byte frames$`).MatchString(errs) {
		t.Errorf("no progress line in %q", errs)
	}
}

func TestFrameCostJSON(t *testing.T) {
	code, out, errs := runCmd(t, "frame-cost", "-engine", "software", "-mac", "poly1305", "-bytes", "100", "-evp", "aes-256-ctr", "-decrypt", "-time", "10ms", "-json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var rep frameCostReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Cipher != "aes-256-ctr" || rep.Direction != "decrypt" || rep.Copies != 2 || len(rep.Parts) != 3 || len(rep.Estimates) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if e := rep.Estimates[0]; e.MAC != "poly1305" || e.Size != 100 || e.Total() <= 0 {
		t.Errorf("estimate %+v", e)
	}
	for _, p := range rep.Parts {
		if p.Ops == 0 || (p.Kind != speed.PartCopy && p.Kind != speed.PartCipher && p.Kind != speed.PartMAC) {
			t.Errorf("part %+v", p)
		}
	}
}

func TestFrameCostUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-mac", "md5"}, {"-evp", "des"}, {"-engine", "nope"}, {"-time", "0s"}, {"extra"},
	} {
		if code, _, _ := runCmd(t, append([]string{"frame-cost"}, args...)...); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
	if code, _, errs := runCmd(t, "frame-cost", "-engine", "software", "-evp", "aes-128-cbc", "-bytes", "17", "-time", "10ms"); code != 1 {
		t.Errorf("CBC frame of 17 bytes: exit %d (%s)", code, errs)
	}
}
