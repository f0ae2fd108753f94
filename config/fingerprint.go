package config

import "github.com/offload-dev/offload/tunnel/handshake"

// KeyFingerprint is a short name for a pre-shared key that two ends (or a
// router's web page) can compare without showing the key: the first 8
// bytes of SHA-256 over a domain string and the key, in hex, e.g.
// "3f9a0c1b7e2d4a65" (handshake.Fingerprint, which offload status shows
// for the running ends' keys).
func KeyFingerprint(key []byte) string { return handshake.Fingerprint(key) }
