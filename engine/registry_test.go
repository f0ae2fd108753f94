package engine_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

func TestOpen(t *testing.T) {
	for spec, want := range map[string]string{
		"software":            "software",
		"afalg":               "afalg",
		"afalg:virtio_crypto": "afalg:virtio_crypto",
		"afalg:cbc-aes-aesni": "afalg:cbc-aes-aesni",
		"cryptodev":           "cryptodev",
		"cryptodev:hw":        "cryptodev:hw",
	} {
		e, err := engine.Open(spec, engine.Options{})
		if err != nil {
			t.Errorf("Open(%q): %v", spec, err)
			continue
		}
		if e.Name() != want {
			t.Errorf("Open(%q).Name() = %q, want %q", spec, e.Name(), want)
		}
	}
	for _, spec := range []string{"", "openssl", "afalg:", "software:x", "cryptodev:x", "cryptodev:", "auto", "afalg-aead:"} {
		if _, err := engine.Open(spec, engine.Options{}); !errors.Is(err, engine.ErrUnknownEngine) {
			t.Errorf("Open(%q) = %v, want ErrUnknownEngine", spec, err)
		}
	}
}

func TestDiscover(t *testing.T) {
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	list := engine.Discover(c, engine.Options{})
	if len(list) < 3 || list[0].Name() != "software" || list[1].Name() != "afalg" || list[len(list)-1].Name() != "cryptodev" {
		t.Fatalf("Discover order: %v", names(list))
	}
	seen := map[string]bool{}
	for _, e := range list {
		if seen[e.Name()] {
			t.Errorf("%s listed twice", e.Name())
		}
		seen[e.Name()] = true
	}
	// A driver bound by name must not repeat the kernel's default choice.
	if d, err := list[1].Driver(c); err == nil && seen["afalg:"+d.Name] {
		t.Errorf("default driver %s listed again", d.Name)
	} else if err != nil && len(list) != 3 {
		t.Errorf("AF_ALG unavailable (%v) but per-driver engines listed: %v", err, names(list))
	}
}

func names(es []engine.Engine) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// Every family's specs parse, open an engine of that name, and say what
// they are; a frame engine is exactly a family of KindFrame, and only it
// says why cipher figures do not apply.
func TestRegistry(t *testing.T) {
	for _, f := range engine.Families() {
		specs := []string{f.Name}
		switch f.Arg {
		case engine.DriverArg:
			specs = append(specs, f.Name+":cbc(aes-generic)", f.Name+":virtio_crypto")
		case engine.HardwareArg:
			specs = append(specs, f.Name+":hw")
		}
		for _, spec := range specs {
			s, err := engine.ParseSpec(spec)
			if err != nil {
				t.Errorf("ParseSpec(%q): %v", spec, err)
				continue
			}
			e := s.Open(engine.Options{})
			if e.Name() != spec || s.String() != spec {
				t.Errorf("%q: opens %q, String %q", spec, e.Name(), s.String())
			}
			if engine.Describe(spec) == "" {
				t.Errorf("%q: no description", spec)
			}
			_, frame := e.(engine.FrameEngine)
			if frame != (f.Kind == engine.KindFrame) || frame != (engine.WhyNoCipherFigures(spec) != "") {
				t.Errorf("%q: FrameEngine %v, kind %v, why %q", spec, frame, f.Kind, engine.WhyNoCipherFigures(spec))
			}
		}
		if !strings.Contains(engine.Specs, f.Syntax()) {
			t.Errorf("Specs %q lacks %q", engine.Specs, f.Syntax())
		}
	}
	for _, bad := range []string{"afalg:has space", "afalg:tab\there", "afalg-aead:" + strings.Repeat("x", 128), "afalg:\xff", "software ", "Software"} {
		if _, err := engine.ParseSpec(bad); !errors.Is(err, engine.ErrUnknownEngine) {
			t.Errorf("ParseSpec(%q) = %v, want ErrUnknownEngine", bad, err)
		}
	}
}

// All is Discover and then every frame engine, each once.
func TestAll(t *testing.T) {
	c := engine.Cipher{Mode: engine.CTR, KeyBits: 128}
	all := names(engine.All(c, engine.Options{}))
	disc := names(engine.Discover(c, engine.Options{}))
	if len(all) < len(disc) || !slices.Equal(all[:len(disc)], disc) {
		t.Fatalf("All %v does not start with Discover %v", all, disc)
	}
	for _, f := range engine.Families() {
		if !slices.Contains(all, f.Name) {
			t.Errorf("All lacks %s: %v", f.Name, all)
		}
	}
}
