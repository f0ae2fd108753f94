package handshake

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"

	"github.com/flynn/noise"

	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Direction labels of the key derivation.
const (
	labelC2S = "c2s"
	labelS2C = "s2c"

	// labelVersion is the version in the labels below. Version 3 changed
	// no derivation (its prologue, in the hash, already tells the two
	// versions apart), so the labels still say 2 for both.
	labelVersion = 2
)

// confirmation is the client's key confirmation:
//
//	confirm = HKDF-SHA256(secret = k_c2s, salt = handshake hash,
//	                      info = "offload v2 client confirm " suite, length = 32)
//
// Its own label keeps it independent of the record keys drawn from the same
// secret; the hash binds it to both ephemerals, so it proves the client
// took part in this handshake, not only in the one whose first message it
// sent.
func confirmation(cs1 *noise.CipherState, hash []byte, s suite.Suite) ([confirmLen]byte, error) {
	var out [confirmLen]byte
	if cs1 == nil {
		return out, fmt.Errorf("handshake: %w: handshake not complete", ErrProtocol)
	}
	k := cs1.UnsafeKey()
	defer clear(k[:])
	okm, err := hkdf.Key(sha256.New, k[:], hash, fmt.Sprintf("offload v%d client confirm %s", labelVersion, s), confirmLen)
	if err != nil {
		return out, fmt.Errorf("handshake: deriving the key confirmation: %w", err)
	}
	copy(out[:], okm)
	clear(okm)
	return out, nil
}

// deriveKeys turns the final Noise cipher states (cs1 initiator→responder,
// cs2 responder→initiator) into record keys per direction:
//
//	okm = HKDF-SHA256(secret = k_dir, salt = handshake hash,
//	                  info = "offload v2 record keys " dir " " suite)
//	K_enc = okm[:keyLen], K_mac = okm[keyLen:keyLen+32], S_iv = okm[keyLen+32:]
func deriveKeys(cs1, cs2 *noise.CipherState, hash []byte, s suite.Suite) (c2s, s2c record.DirKeys, err error) {
	if cs1 == nil || cs2 == nil {
		return c2s, s2c, fmt.Errorf("handshake: %w: handshake not complete", ErrProtocol)
	}
	k1, k2 := cs1.UnsafeKey(), cs2.UnsafeKey()
	defer clear(k1[:])
	defer clear(k2[:])
	if c2s, err = dirKeys(k1[:], hash, labelC2S, s); err != nil {
		return c2s, s2c, err
	}
	if s2c, err = dirKeys(k2[:], hash, labelS2C, s); err != nil {
		return c2s, s2c, err
	}
	return c2s, s2c, nil
}

func dirKeys(secret, hash []byte, dir string, s suite.Suite) (record.DirKeys, error) {
	kl := s.Cipher.KeySize()
	info := fmt.Sprintf("offload v%d record keys %s %s", labelVersion, dir, s)
	okm, err := hkdf.Key(sha256.New, secret, hash, info, kl+record.MACKeySize+len(record.DirKeys{}.IV))
	if err != nil {
		return record.DirKeys{}, fmt.Errorf("handshake: deriving %s keys: %w", dir, err)
	}
	var k record.DirKeys
	k.Enc = okm[:kl:kl]
	k.MAC = okm[kl : kl+record.MACKeySize : kl+record.MACKeySize]
	copy(k.IV[:], okm[kl+record.MACKeySize:])
	return k, nil
}
