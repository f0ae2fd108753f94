package record

import (
	"crypto/subtle"
	"fmt"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// MACKeySize is the length of K_mac, the MAC key of one direction: 32
// bytes for every suite MAC (the HMAC-SHA256 key, the AES-256 key of GMAC,
// the ChaCha20 key that derives each frame's Poly1305 key, the HKDF secret
// of NHPoly1305's subkeys).
const MACKeySize = 32

// DirKeys are the record keys of one direction, as the handshake derives
// them (docs/protocol.md).
type DirKeys struct {
	Enc []byte                 // K_enc: 16, 24 or 32 bytes by suite
	MAC []byte                 // K_mac: MACKeySize bytes
	IV  [engine.BlockSize]byte // S_iv
}

// Keys are the record keys of both directions of one link, seen from one
// end: Send seals what this end writes, Recv opens what it reads. The two
// ends of a link hold mirrored Keys (one's Send is the other's Recv).
type Keys struct {
	Send, Recv DirKeys
	// PeerMaxFrame is the largest frame the peer accepts, as the
	// handshake learnt it. This end sends frames of at most the smaller
	// of it and Options.MaxFrame, and accepts up to Options.MaxFrame, so
	// the two ends' settings need not agree. 0 means unknown: this end
	// sends up to its own MaxFrame.
	PeerMaxFrame int
}

// Check reports whether k fits s: key lengths by cipher, a 32-byte MAC key.
func (k *DirKeys) Check(s suite.Suite) error {
	// engine.CheckKey accepts the measuring-only ECB ciphers too.
	if !s.Cipher.Valid() {
		return fmt.Errorf("record: %w: %v", ErrSuite, s.Cipher)
	}
	if err := engine.CheckKey(s.Cipher, k.Enc); err != nil {
		return fmt.Errorf("record: K_enc: %w", err)
	}
	if !s.MAC.Valid() {
		return fmt.Errorf("record: %w: %v", ErrSuite, s.MAC)
	}
	if len(k.MAC) != MACKeySize {
		return fmt.Errorf("record: K_mac: %w: %d bytes, want %d", engine.ErrKeySize, len(k.MAC), MACKeySize)
	}
	return nil
}

// Equal reports whether k and o hold the same keys, in constant time.
func (k *DirKeys) Equal(o *DirKeys) bool {
	return subtle.ConstantTimeCompare(k.Enc, o.Enc)&
		subtle.ConstantTimeCompare(k.MAC, o.MAC)&
		subtle.ConstantTimeCompare(k.IV[:], o.IV[:]) == 1
}

// Wipe overwrites the key material with zeros. New copies what it needs, so
// callers may Wipe their Keys once the Conn exists.
func (k *Keys) Wipe() {
	for _, d := range []*DirKeys{&k.Send, &k.Recv} {
		clear(d.Enc)
		clear(d.MAC)
		clear(d.IV[:])
	}
}

func (k DirKeys) clone() DirKeys {
	return DirKeys{Enc: append([]byte(nil), k.Enc...), MAC: append([]byte(nil), k.MAC...), IV: k.IV}
}
