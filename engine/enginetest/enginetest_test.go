package enginetest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// The reference must agree with the NIST vectors and with crypto/cipher,
// or the suite would compare engines against a wrong answer.
func TestReference(t *testing.T) {
	for _, v := range NISTVectors() {
		if got := Reference(v.Cipher, engine.Encrypt, v.Key, v.IV, v.Plain); !bytes.Equal(got, v.Cipha) {
			t.Errorf("%s: reference encrypt wrong", v.Name)
		}
		if got := Reference(v.Cipher, engine.Decrypt, v.Key, v.IV, v.Cipha); !bytes.Equal(got, v.Plain) {
			t.Errorf("%s: reference decrypt wrong", v.Name)
		}
	}
	key := make([]byte, 32)
	b, _ := aes.NewCipher(key)
	for _, iv := range CarryIVs {
		src := make([]byte, 1000)
		want := make([]byte, len(src))
		cipher.NewCTR(b, iv).XORKeyStream(want, src)
		if got := Reference(engine.Cipher{Mode: engine.CTR, KeyBits: 256}, engine.Encrypt, key, iv, src); !bytes.Equal(got, want) {
			t.Errorf("reference CTR at iv %x differs from crypto/cipher", iv)
		}
	}
}

func TestAddCounter(t *testing.T) {
	for _, tc := range []struct {
		iv   string
		n    uint64
		want string
	}{
		{"00000000000000000000000000000000", 1, "00000000000000000000000000000001"},
		{"0000000000000000ffffffffffffffff", 1, "00000000000000010000000000000000"},
		{"ffffffffffffffffffffffffffffffff", 2, "00000000000000000000000000000001"},
		{"000000000000000000000000000000ff", 0x101, "00000000000000000000000000000200"},
		{"0000000000000000fffffffffffffff0", 1 << 32, "000000000000000100000000fffffff0"},
	} {
		if got := AddCounter(unhex(tc.iv), tc.n); !bytes.Equal(got, unhex(tc.want)) {
			t.Errorf("AddCounter(%s, %#x) = %x, want %s", tc.iv, tc.n, got, tc.want)
		}
	}
}
