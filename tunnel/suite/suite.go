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

// The MACs offload knows; docs/macs.md has each construction and its
// security argument. Every one takes the 32-byte K_mac of the handshake and
// gives a 16-byte tag, so the frame is the same whichever is used.
const (
	// HMACSHA256 is HMAC-SHA256(K_mac, seq | len | ciphertext) truncated to
	// 16 bytes: the default, and what the AF_ALG authenc engine computes.
	HMACSHA256 MAC = iota + 1
	// GMAC is AES-256-GCM under K_mac with an empty plaintext, the nonce
	// 0^32 | seq and the additional data len | ciphertext: GHASH, which
	// runs on carry-less multiply instructions where the CPU has them.
	GMAC
	// Poly1305 is ChaCha20-Poly1305 (RFC 8439) under K_mac with an empty
	// plaintext, the nonce 0^32 | seq and the additional data
	// len | ciphertext: Poly1305 under a fresh one-time key per frame,
	// fast on 32-bit CPUs without AES or carry-less multiply instructions.
	Poly1305
	// NHPoly1305 is a Wegman–Carter–Shoup MAC: Adiantum's hash (NH, then
	// Poly1305, plus a Poly1305 of the length) of the frame, plus AES-256 of
	// 0^64 | seq, mod 2^128, under subkeys HKDF-expanded from K_mac. NH
	// needs a third of Poly1305's multiplies per byte.
	NHPoly1305
)

// MACs lists every MAC, in the order tables show them.
var MACs = []MAC{HMACSHA256, GMAC, Poly1305, NHPoly1305}

func (m MAC) String() string {
	switch m {
	case HMACSHA256:
		return "hmac-sha256"
	case GMAC:
		return "gmac"
	case Poly1305:
		return "poly1305"
	case NHPoly1305:
		return "nhpoly1305"
	}
	return fmt.Sprintf("mac(%d)", uint8(m))
}

// Valid reports whether m is one of MACs.
func (m MAC) Valid() bool { return m >= HMACSHA256 && m <= NHPoly1305 }

// MACNames lists the names of MACs, in order, for help texts.
func MACNames() []string {
	names := make([]string, 0, len(MACs))
	for _, m := range MACs {
		names = append(names, m.String())
	}
	return names
}

// ParseMAC reads a MAC name (case-insensitive), e.g. "poly1305".
func ParseMAC(name string) (MAC, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	for _, m := range MACs {
		if m.String() == n {
			return m, nil
		}
	}
	return 0, fmt.Errorf("unknown MAC %q (one of: %s)", name, strings.Join(MACNames(), ", "))
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

// All lists every supported suite: every cipher with every MAC, cipher
// first, e.g. aes-128-cbc-hmac-sha256, aes-128-cbc-gmac, ...
func All() []Suite {
	var out []Suite
	for _, c := range engine.Ciphers {
		for _, m := range MACs {
			out = append(out, Suite{Cipher: c, MAC: m})
		}
	}
	return out
}

// Valid reports whether s is one of All.
func (s Suite) Valid() bool { return s.Cipher.Valid() && s.MAC.Valid() }

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
	names := make([]string, 0, len(engine.Ciphers)*len(MACs))
	for _, s := range All() {
		names = append(names, s.String())
	}
	return Suite{}, fmt.Errorf("unknown suite %q (one of: %s)", name, strings.Join(names, ", "))
}
