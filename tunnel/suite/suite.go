// Package suite names the tunnel's cipher suites: a cipher and a MAC
// together, as the handshake negotiates and binds them. The MAC is part of
// the suite so faster MACs can be added without changing the frame (the tag
// stays 16 bytes).
package suite

import (
	"fmt"
	"strings"

	"github.com/offload-dev/offload/engine"
)

// MAC names a frame authenticator.
type MAC uint8

// The MACs offload knows.
const (
	HMACSHA256 MAC = iota + 1 // HMAC-SHA256 truncated to 16 bytes
)

func (m MAC) String() string {
	switch m {
	case HMACSHA256:
		return "hmac-sha256"
	}
	return fmt.Sprintf("mac(%d)", uint8(m))
}

// TagSize is the length of every frame tag.
const TagSize = 16

// Suite is a cipher and a MAC, e.g. aes-256-ctr-hmac-sha256.
type Suite struct {
	Cipher engine.Cipher
	MAC    MAC
}

// Default is the suite used when a config names none.
var Default = Suite{Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 256}, MAC: HMACSHA256}

// All lists every supported suite.
func All() []Suite {
	var out []Suite
	for _, c := range engine.Ciphers {
		out = append(out, Suite{Cipher: c, MAC: HMACSHA256})
	}
	return out
}

// String is the suite's name, e.g. "aes-128-cbc-hmac-sha256".
func (s Suite) String() string { return s.Cipher.String() + "-" + s.MAC.String() }

// Parse reads a suite name (case-insensitive).
func Parse(name string) (Suite, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, s := range All() {
		if s.String() == n {
			return s, nil
		}
	}
	names := make([]string, 0, 6)
	for _, s := range All() {
		names = append(names, s.String())
	}
	return Suite{}, fmt.Errorf("unknown suite %q (one of: %s)", name, strings.Join(names, ", "))
}
