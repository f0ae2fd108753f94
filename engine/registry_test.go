package engine_test

import (
	"errors"
	"testing"

	"github.com/offload-dev/offload/engine"
)

func TestOpen(t *testing.T) {
	for spec, want := range map[string]string{
		"software":            "software",
		" software ":          "software",
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
