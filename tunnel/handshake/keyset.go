package handshake

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/offload-dev/offload/tunnel/suite"
)

// MaxKeys caps the pre-shared keys one server accepts at once (every
// client's keys, a rotating client's two included). The server finds the
// key a first message was made with by trying each (KeySet.find), so this
// bounds what one unauthenticated first flight can cost: at most MaxKeys
// trials of 7 SHA-256 compressions of at most two blocks and one
// ChaCha20-Poly1305 open of a payload of at most 4 bytes, without Diffie-Hellman and
// without a Noise state (about 90 bytes of garbage per trial, the boxed
// AEAD; docs/protocol.md, "Which key").
const MaxKeys = 64

// ErrKeySet means a server's key set can not be used: no keys, more than
// MaxKeys, a key of the wrong size, or the same key twice. Fix the
// server's clients (each key belongs to exactly one client).
var ErrKeySet = errors.New("handshake: bad server key set")

// noiseName is the Noise protocol name of the handshake; the symmetric
// state starts from its hash (it is longer than 32 bytes).
const noiseName = "Noise_NNpsk0_25519_ChaChaPoly_SHA256"

// KeySet is the pre-shared keys a server accepts, each with the part of
// NNpsk0's first-message state that depends only on the suite, the key and
// the client's version, computed once: the chaining key and, per version,
// the handshake hash after the prologue and MixKeyAndHash(psk). Read-only
// once made; share it among handshakes.
type KeySet struct {
	suite suite.Suite
	keys  []keyState
}

type keyState struct {
	psk []byte
	ck  [32]byte // chaining key after MixKeyAndHash(psk)
	// h is the handshake hash after MixKeyAndHash(psk), per version from
	// MinVersion (the prologue is the version's hello).
	h [Version - MinVersion + 1][32]byte
}

// NewKeySet returns the set of psks for a server of suite s. The index of a
// key in psks is what Server reports as the key a client used.
func NewKeySet(s suite.Suite, psks ...[]byte) (*KeySet, error) {
	if len(psks) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrKeySet)
	}
	if len(psks) > MaxKeys {
		return nil, fmt.Errorf("%w: %d keys, at most %d", ErrKeySet, len(psks), MaxKeys)
	}
	ks := &KeySet{suite: s, keys: make([]keyState, len(psks))}
	for i, psk := range psks {
		if len(psk) != PSKSize {
			return nil, fmt.Errorf("%w: key %d: %w (got %d)", ErrKeySet, i, ErrPSK, len(psk))
		}
		for j := range i {
			if subtle.ConstantTimeCompare(psks[j], psk) == 1 {
				return nil, fmt.Errorf("%w: keys %d and %d are the same key", ErrKeySet, j, i)
			}
		}
		k := &ks.keys[i]
		k.psk = append([]byte(nil), psk...)
		// InitializeSymmetric(name), MixHash(prologue), then the psk token
		// at position 0: MixKeyAndHash(psk). The chaining key does not
		// depend on the prologue, the hash does.
		h0 := sha256.Sum256([]byte(noiseName))
		ck, tempH, tempK := noiseHKDF(&h0, psk, 3)
		clear(tempK[:]) // replaced by MixKey(e) before it encrypts anything
		k.ck = ck
		for v := byte(MinVersion); v <= Version; v++ {
			h := mixHash(&h0, prologue(v, s))
			k.h[v-MinVersion] = mixHash(&h, tempH[:])
		}
	}
	return ks, nil
}

// Len returns the number of keys.
func (ks *KeySet) Len() int { return len(ks.keys) }

// psk returns key i.
func (ks *KeySet) psk(i int) []byte { return ks.keys[i].psk }

// find returns the index of the key under which msg (a first Noise
// message of version v: e, then the sealed payload, empty before version
// 3) authenticates, or -1. Per key it continues NNpsk0 from the
// precomputed state: MixHash(e), MixKey(e), and opens the payload with
// ad = h. The winner is checked again by the Noise library, so a bug here
// can refuse a client but never admit one.
func (ks *KeySet) find(msg []byte, v byte) int {
	if v < MinVersion || v > Version || len(msg) != noiseLen(v) {
		return -1
	}
	e, sealed := msg[:32], msg[32:]
	var plain [payloadLen]byte
	var nonce [chacha20poly1305.NonceSize]byte // Noise: 4 zero bytes, then n = 0 little-endian
	binary.LittleEndian.PutUint64(nonce[4:], 0)
	for i := range ks.keys {
		k := &ks.keys[i]
		h := mixHash(&k.h[v-MinVersion], e)
		ck, key, _ := noiseHKDF(&k.ck, e, 2)
		clear(ck[:])
		aead, err := chacha20poly1305.New(key[:])
		clear(key[:])
		if err != nil {
			continue
		}
		if _, err := aead.Open(plain[:0], nonce[:], sealed, h[:]); err == nil {
			return i
		}
	}
	return -1
}

// mixHash is Noise's MixHash: SHA-256(h || data), data at most 64 bytes.
func mixHash(h *[32]byte, data []byte) [32]byte {
	var buf [32 + 64]byte
	n := copy(buf[:], h[:])
	n += copy(buf[n:], data)
	return sha256.Sum256(buf[:n])
}

// hmac32 is HMAC-SHA256 with a 32-byte key over a message of at most 64
// bytes, on the stack: crypto/hmac allocates its two hashes per call, and
// find runs up to MaxKeys of these for every unauthenticated first flight.
func hmac32(key *[32]byte, msg []byte) [32]byte {
	var inner [64 + 64]byte
	padKey(inner[:64], key, 0x36)
	n := 64 + copy(inner[64:], msg)
	ih := sha256.Sum256(inner[:n])
	clear(inner[:])
	var outer [64 + 32]byte
	padKey(outer[:64], key, 0x5c)
	copy(outer[64:], ih[:])
	return sha256.Sum256(outer[:])
}

// padKey writes HMAC's key block: the key, zero-padded to 64 bytes, XOR pad.
func padKey(dst []byte, key *[32]byte, pad byte) {
	for i := range dst {
		var b byte
		if i < len(key) {
			b = key[i]
		}
		dst[i] = b ^ pad
	}
}

// noiseHKDF is Noise's HKDF (not RFC 5869's expand with info: the outputs chain
// through the counter byte alone), with two outputs or three (n = 3).
func noiseHKDF(ck *[32]byte, ikm []byte, n int) (out1, out2, out3 [32]byte) {
	temp := hmac32(ck, ikm)
	defer clear(temp[:])
	out1 = hmac32(&temp, []byte{1})
	var m [33]byte
	copy(m[:], out1[:])
	m[32] = 2
	out2 = hmac32(&temp, m[:])
	if n == 3 {
		copy(m[:], out2[:])
		m[32] = 3
		out3 = hmac32(&temp, m[:])
	}
	return out1, out2, out3
}
