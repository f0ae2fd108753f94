package handshake

import (
	"crypto/sha256"
	"encoding/hex"
)

// fingerprintDomain separates a fingerprint's hash from any other use of
// SHA-256 over the key, so the fingerprint cannot stand for one of them.
const fingerprintDomain = "offload key fingerprint v1\x00"

// Fingerprint is a short name for a pre-shared key that two ends (offload
// status on each, offload validate, a router's web page) can compare
// without showing the key: the first 8 bytes of SHA-256 over a domain
// string and the key, in hex, e.g. "3f9a0c1b7e2d4a65". 64 bits of a
// one-way hash tell an observer nothing usable about a 256-bit key, and
// are plenty to tell keys apart by eye.
func Fingerprint(key []byte) string {
	h := sha256.New()
	h.Write([]byte(fingerprintDomain))
	h.Write(key)
	return hex.EncodeToString(h.Sum(nil)[:8])
}
