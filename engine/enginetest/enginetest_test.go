package enginetest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"errors"
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

func TestFailing(t *testing.T) {
	want := errors.New("device fell over")
	f := &Failing{Label: "flaky", Drv: engine.Driver{Name: "flaky_aes", Hardware: true}, Err: want,
		Fail: func(n uint64, d engine.Direction, size int) bool { return d == engine.Encrypt && size >= 32 }}
	c := engine.Cipher{Mode: engine.CTR, KeyBits: 128}
	if d, err := f.Driver(c); err != nil || d.Name != "flaky_aes" || !d.Hardware || d.Algorithm != c.KernelName() {
		t.Errorf("Driver = %+v, %v", d, err)
	}
	cr, err := f.NewCrypter(c, make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	iv := make([]byte, 16)
	small, big := make([]byte, 16), make([]byte, 32)
	if err := cr.Encrypt(small, small, iv); err != nil {
		t.Errorf("16 bytes: %v, want an answer", err)
	}
	if !bytes.Equal(small, Reference(c, engine.Encrypt, make([]byte, 16), iv, make([]byte, 16))) {
		t.Error("16 bytes: not the software answer")
	}
	if err := cr.Encrypt(big, big, iv); !errors.Is(err, want) {
		t.Errorf("32 bytes: %v, want %v", err, want)
	}
	if err := cr.Decrypt(big, big, iv); err != nil {
		t.Errorf("decrypt of 32 bytes: %v, want an answer", err)
	}
	if n := f.Calls(); n != 3 {
		t.Errorf("Calls = %d, want 3", n)
	}
	var every Failing
	cr, err = every.NewCrypter(c, make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.Decrypt(small, small, iv); !errors.Is(err, ErrFailing) || every.Name() != "failing" {
		t.Errorf("zero Failing: %v, name %q; want ErrFailing, \"failing\"", err, every.Name())
	}
}
