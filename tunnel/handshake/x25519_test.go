package handshake

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/flynn/noise"
)

// The handshake's X25519 is third_party/noise's (on filippo.io/edwards25519,
// so that the binary does not link crypto/ecdh and the NIST curves with it):
// these tests hold it to RFC 7748 and to the standard library's.

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestX25519RFC7748: section 5.2's two test vectors and section 6.1's
// Diffie-Hellman example.
func TestX25519RFC7748(t *testing.T) {
	for _, v := range []struct{ scalar, point, out string }{
		{"a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4", "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c", "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"},
		{"4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d", "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493", "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957"},
		// Alice's private key times the base point is her public key; times Bob's public key, the shared secret.
		{"77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", "0900000000000000000000000000000000000000000000000000000000000000", "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"},
		{"77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f", "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742"},
	} {
		got, err := noise.DH25519.DH(unhex(t, v.scalar), unhex(t, v.point))
		if err != nil {
			t.Fatalf("X25519(%s, %s): %v", v.scalar, v.point, err)
		}
		if want := unhex(t, v.out); !bytes.Equal(got, want) {
			t.Errorf("X25519(%s, %s) = %x, want %x", v.scalar, v.point, got, want)
		}
	}
}

// TestX25519MatchesStdlib: key pairs and shared secrets agree with
// crypto/ecdh for random keys, in both directions.
func TestX25519MatchesStdlib(t *testing.T) {
	for range 50 {
		a, err := noise.DH25519.GenerateKeypair(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		sa, err := ecdh.X25519().NewPrivateKey(a.Private)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sa.PublicKey().Bytes(), a.Public) {
			t.Fatalf("public key of %x: %x, crypto/ecdh says %x", a.Private, a.Public, sa.PublicKey().Bytes())
		}
		sb, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		got, err := noise.DH25519.DH(a.Private, sb.PublicKey().Bytes())
		if err != nil {
			t.Fatal(err)
		}
		want, err := sb.ECDH(sa.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("shared secret %x, crypto/ecdh says %x", got, want)
		}
	}
}

// TestX25519Refuses: a low-order point (an all-zero secret) and inputs
// that are not 32 bytes are errors, as in x/crypto's curve25519.X25519.
func TestX25519Refuses(t *testing.T) {
	priv := make([]byte, 32)
	priv[0] = 1
	for _, p := range [][]byte{
		make([]byte, 32), // zero
		unhex(t, "0100000000000000000000000000000000000000000000000000000000000000"),
		unhex(t, "e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"), // order 8
	} {
		if out, err := noise.DH25519.DH(priv, p); err == nil {
			t.Errorf("X25519 with low-order point %x = %x, want an error", p, out)
		}
	}
	if _, err := noise.DH25519.DH(priv[:31], make([]byte, 32)); err == nil {
		t.Error("31-byte scalar accepted")
	}
	if _, err := noise.DH25519.DH(priv, make([]byte, 33)); err == nil {
		t.Error("33-byte point accepted")
	}
}
