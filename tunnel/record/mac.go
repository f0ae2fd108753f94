package record

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// MAC computes and checks the tags of one direction's frames under K_mac.
// Every MAC authenticates the same three things: the implicit seq, the
// length header and the ciphertext (docs/macs.md). Sum and Verify allocate
// nothing. A MAC is not safe for concurrent use: one per worker.
type MAC interface {
	// Sum writes the tag of frame seq into tag. frame is the frame as sent,
	// without its tag: len:u32be | ciphertext[len].
	Sum(tag *[TagSize]byte, seq uint64, frame []byte)
	// Verify reports whether tag is the tag of frame seq, comparing in
	// constant time.
	Verify(tag []byte, seq uint64, frame []byte) bool
	// MAC is the suite MAC this computes.
	MAC() suite.MAC
}

// NewMAC returns the MAC m keyed with K_mac (MACKeySize bytes). The error
// wraps ErrSuite for an unknown MAC and engine.ErrKeySize for a key of the
// wrong length.
func NewMAC(m suite.MAC, key []byte) (MAC, error) {
	if !m.Valid() {
		return nil, fmt.Errorf("record: %w: %v", ErrSuite, m)
	}
	if len(key) != MACKeySize {
		return nil, fmt.Errorf("record: K_mac: %w: %d bytes, want %d", engine.ErrKeySize, len(key), MACKeySize)
	}
	switch m {
	case suite.GMAC:
		return newGMAC(key)
	case suite.Poly1305:
		return newPoly1305MAC(key)
	case suite.NHPoly1305:
		return newNHMAC(key)
	}
	return newHMAC(key), nil
}

// hmacMAC is HMAC-SHA256(K_mac, seq:u64be | len:u32be | ciphertext)[:16],
// the tag of docs/protocol.md and of the kernel's authenc(hmac(sha256),...) with
// seq | len as associated data.
type hmacMAC struct {
	h    hash.Hash
	seq  [8]byte
	sum  [sha256.Size]byte
	want [TagSize]byte
}

func newHMAC(key []byte) *hmacMAC { return &hmacMAC{h: hmac.New(sha256.New, key)} }

func (m *hmacMAC) MAC() suite.MAC { return suite.HMACSHA256 }

func (m *hmacMAC) Sum(tag *[TagSize]byte, seq uint64, frame []byte) {
	binary.BigEndian.PutUint64(m.seq[:], seq)
	m.h.Reset()
	m.h.Write(m.seq[:])
	m.h.Write(frame)
	copy(tag[:], m.h.Sum(m.sum[:0]))
}

func (m *hmacMAC) Verify(tag []byte, seq uint64, frame []byte) bool {
	m.Sum(&m.want, seq, frame)
	return subtle.ConstantTimeCompare(m.want[:], tag) == 1
}

// aeadMAC is an AEAD used as a nonce-based MAC: the tag of an empty
// plaintext with the frame (len | ciphertext) as additional data and the
// nonce 0^32 | seq:u64be. seq is unique within an epoch and K_mac is per
// direction, link and epoch (rekey.go), so no nonce repeats under a key
// (the key-use limit MaxFrames keeps seq far below 2^64).
//
//   - GMAC: AES-256-GCM (NIST SP 800-38D calls GCM with an empty plaintext
//     GMAC). GHASH runs on PCLMULQDQ/PMULL where the CPU has them.
//   - Poly1305: ChaCha20-Poly1305 (RFC 8439 §2.8): the Poly1305 key of each
//     frame is ChaCha20 block 0 under K_mac and the frame's nonce (§2.6),
//     used once; the MAC input is frame | pad16 | le64(len(frame)) | le64(0).
type aeadMAC struct {
	a     cipher.AEAD
	m     suite.MAC
	nonce [12]byte // 0^32 | seq
	out   [TagSize]byte
	want  [TagSize]byte
}

func newGMAC(key []byte) (*aeadMAC, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("record: gmac: %w", err)
	}
	g, err := cipher.NewGCM(b)
	if err != nil {
		return nil, fmt.Errorf("record: gmac: %w", err)
	}
	return &aeadMAC{a: g, m: suite.GMAC}, nil
}

func newPoly1305MAC(key []byte) (MAC, error) {
	if usePoly32 {
		return newPoly32(key), nil // NewMAC checked the key's length
	}
	a, err := chacha20poly1305.New(key)
	if err != nil {
		return nil, fmt.Errorf("record: poly1305: %w", err)
	}
	return &aeadMAC{a: a, m: suite.Poly1305}, nil
}

func (m *aeadMAC) MAC() suite.MAC { return m.m }

func (m *aeadMAC) Sum(tag *[TagSize]byte, seq uint64, frame []byte) {
	binary.BigEndian.PutUint64(m.nonce[4:], seq)
	// Seal into a buffer of our own: what is passed to an interface
	// method escapes, and the caller's tag may live on its stack.
	m.a.Seal(m.out[:0], m.nonce[:], nil, frame)
	*tag = m.out
}

func (m *aeadMAC) Verify(tag []byte, seq uint64, frame []byte) bool {
	m.Sum(&m.want, seq, frame)
	return subtle.ConstantTimeCompare(m.want[:], tag) == 1
}
