package config

import (
	"bytes"
	"strings"
	"testing"
)

func TestKeyFingerprint(t *testing.T) {
	a := bytes.Repeat([]byte{1}, KeySize)
	b := bytes.Repeat([]byte{2}, KeySize)
	fa, fb := KeyFingerprint(a), KeyFingerprint(b)
	if len(fa) != 16 || strings.Trim(fa, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q: want 16 hex digits", fa)
	}
	if fa == fb {
		t.Fatalf("two keys, one fingerprint %q", fa)
	}
	if KeyFingerprint(a) != fa {
		t.Fatal("fingerprint not deterministic")
	}
	// Pinned (computed independently with python3 hashlib): ends built
	// from different trees must agree.
	if got, want := KeyFingerprint(make([]byte, KeySize)), "3521388137fba291"; got != want {
		t.Errorf("fingerprint of the zero key = %s, want %s", got, want)
	}
}
