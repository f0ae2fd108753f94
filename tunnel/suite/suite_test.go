package suite

import (
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

func TestParseEverySuite(t *testing.T) {
	all := All()
	if want := len(engine.Ciphers) * len(MACs); len(all) != want {
		t.Fatalf("All() has %d suites, want %d", len(all), want)
	}
	seen := map[string]bool{}
	for _, s := range all {
		if !s.Valid() {
			t.Errorf("%v: not Valid", s)
		}
		name := s.String()
		if seen[name] {
			t.Errorf("%s listed twice", name)
		}
		seen[name] = true
		got, err := Parse(" " + strings.ToUpper(name) + " ")
		if err != nil || got != s {
			t.Errorf("Parse(%q) = %v, %v; want %v", name, got, err, s)
		}
	}
	for _, name := range []string{"aes-256-ctr-gmac", "aes-128-cbc-poly1305", "aes-192-ctr-hmac-sha256", "aes-256-ctr-nhpoly1305", "aes-256-cbc-nhpoly1305"} {
		if !seen[name] {
			t.Errorf("%s missing from All()", name)
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, name := range []string{"", "aes-256-ctr", "aes-256-ctr-hmac-md5", "aes-256-gcm-gmac", "poly1305", "nhpoly1305", "aes-256-ctr-nh"} {
		_, err := Parse(name)
		if err == nil {
			t.Errorf("Parse(%q): no error", name)
			continue
		}
		if !strings.Contains(err.Error(), "aes-256-ctr-poly1305") {
			t.Errorf("Parse(%q): error does not list the suites: %v", name, err)
		}
	}
}

// ECB is for measuring engines (offload speed) only: no suite may use it.
func TestNoECBSuite(t *testing.T) {
	for _, s := range All() {
		if s.Cipher.Mode == engine.ECB {
			t.Errorf("%v listed in All()", s)
		}
	}
	for _, name := range []string{"aes-256-ecb-hmac-sha256", "aes-128-ecb-gmac", "AES-192-ECB-POLY1305"} {
		if s, err := Parse(name); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", name, s)
		}
	}
	for _, m := range MACs {
		if s := (Suite{Cipher: engine.Cipher{Mode: engine.ECB, KeyBits: 128}, MAC: m}); s.Valid() {
			t.Errorf("%v: Valid", s)
		}
	}
}

func TestMACNames(t *testing.T) {
	for _, m := range MACs {
		got, err := ParseMAC(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMAC(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMAC("sha1"); err == nil {
		t.Error("ParseMAC(sha1): no error")
	}
	for _, m := range []MAC{0, 5, 255} {
		if m.Valid() {
			t.Errorf("%v: Valid", m)
		}
		if (Suite{Cipher: Default.Cipher, MAC: m}).Valid() {
			t.Errorf("suite with %v: Valid", m)
		}
	}
	if Default.MAC != HMACSHA256 {
		t.Errorf("default MAC %v, want hmac-sha256", Default.MAC)
	}
}
