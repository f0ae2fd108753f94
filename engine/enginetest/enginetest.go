// Package enginetest is the conformance suite every engine passes: the NIST
// SP 800-38A vectors (F.1.1–F.1.6, F.2.1–F.2.6, F.5.1–F.5.6), argument checks, in-place
// operation, CTR partial blocks and counter carries across the 64- and
// 128-bit boundaries, large buffers, and a differential test against an
// independent reference built from crypto/aes block by block.
package enginetest

import (
	"bytes"
	"crypto/aes"
	"encoding/hex"
	"errors"
	mrand "math/rand/v2"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// Options tune Run.
type Options struct {
	// Ciphers to test; nil means engine.MeasureCiphers (ECB included: the
	// engines serve it for offload speed). A cipher the engine reports
	// unavailable is skipped with the engine's reason.
	Ciphers []engine.Cipher
	// LargeSize is the size of the large-buffer test (default 1 MiB + 48),
	// chosen above every engine's request limit so that splitting is tested.
	LargeSize int
	// RandomRounds is how many random differential cases run per cipher
	// (default 64).
	RandomRounds int
}

// Run runs the conformance suite against e.
func Run(t *testing.T, e engine.Engine, o Options) {
	t.Helper()
	if o.Ciphers == nil {
		o.Ciphers = engine.MeasureCiphers
	}
	if o.LargeSize == 0 {
		o.LargeSize = 1<<20 + 48
	}
	if o.RandomRounds == 0 {
		o.RandomRounds = 64
	}
	for _, c := range o.Ciphers {
		t.Run(c.String(), func(t *testing.T) {
			if _, err := e.Driver(c); err != nil {
				if errors.Is(err, engine.ErrUnavailable) {
					t.Skipf("%s: %v", e.Name(), err)
				}
				t.Fatalf("Driver(%v): %v", c, err)
			}
			t.Run("NIST", func(t *testing.T) { testNIST(t, e, c) })
			t.Run("Args", func(t *testing.T) { testArgs(t, e, c) })
			t.Run("InPlace", func(t *testing.T) { testInPlace(t, e, c) })
			t.Run("Empty", func(t *testing.T) { testEmpty(t, e, c) })
			if c.Mode == engine.CTR {
				t.Run("PartialBlock", func(t *testing.T) { testPartial(t, e, c) })
				t.Run("CounterCarry", func(t *testing.T) { testCarry(t, e, c) })
			}
			t.Run("Large", func(t *testing.T) { testLarge(t, e, c, o.LargeSize) })
			t.Run("Differential", func(t *testing.T) { testDifferential(t, e, c, o.RandomRounds) })
			t.Run("Driver", func(t *testing.T) { testDriver(t, e, c) })
			t.Run("Close", func(t *testing.T) { testClose(t, e, c) })
		})
	}
}

func mustCrypter(t *testing.T, e engine.Engine, c engine.Cipher, key []byte) engine.Crypter {
	t.Helper()
	cr, err := e.NewCrypter(c, key)
	if err != nil {
		t.Fatalf("%s NewCrypter(%v): %v", e.Name(), c, err)
	}
	t.Cleanup(func() { cr.Close() })
	return cr
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err)
	}
	return b
}

// NISTVector is one SP 800-38A example (the encrypt and decrypt examples of
// a mode and key size share key, IV and texts).
type NISTVector struct {
	Name                  string // e.g. "F.2.5 CBC-AES256"
	Cipher                engine.Cipher
	Key, IV, Plain, Cipha []byte
}

// NISTVectors returns the vectors of F.2.1–F.2.6, F.5.1–F.5.6 and
// F.1.1–F.1.6: the
// engine package's known answers (engine.KnownAnswers), which the tunnel
// also runs on its engines at start and periodically.
func NISTVectors() []NISTVector {
	var out []NISTVector
	for _, v := range engine.KnownAnswers() {
		out = append(out, NISTVector{Name: v.Name, Cipher: v.Cipher, Key: v.Key, IV: v.IV, Plain: v.Plain, Cipha: v.Ciphertext})
	}
	return out
}

func testNIST(t *testing.T, e engine.Engine, c engine.Cipher) {
	for _, v := range NISTVectors() {
		if v.Cipher != c {
			continue
		}
		cr := mustCrypter(t, e, c, v.Key)
		got := make([]byte, len(v.Plain))
		if err := cr.Encrypt(got, v.Plain, v.IV); err != nil {
			t.Fatalf("%s encrypt: %v", v.Name, err)
		}
		if !bytes.Equal(got, v.Cipha) {
			t.Errorf("%s encrypt:\n got %x\nwant %x", v.Name, got, v.Cipha)
		}
		if err := cr.Decrypt(got, v.Cipha, v.IV); err != nil {
			t.Fatalf("%s decrypt: %v", v.Name, err)
		}
		if !bytes.Equal(got, v.Plain) {
			t.Errorf("%s decrypt:\n got %x\nwant %x", v.Name, got, v.Plain)
		}
		// Block by block for CTR needs the counter advanced; for one block at
		// a time in CBC the previous ciphertext is the IV.
		for i := 0; i < len(v.Plain); i += engine.BlockSize {
			iv := v.IV
			if c.Mode == engine.CBC && i > 0 {
				iv = v.Cipha[i-engine.BlockSize : i]
			} else if c.Mode == engine.CTR {
				iv = AddCounter(v.IV, uint64(i/engine.BlockSize))
			}
			blk := make([]byte, engine.BlockSize)
			if err := cr.Encrypt(blk, v.Plain[i:i+engine.BlockSize], iv); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(blk, v.Cipha[i:i+engine.BlockSize]) {
				t.Errorf("%s block %d: got %x want %x", v.Name, i/16, blk, v.Cipha[i:i+16])
			}
		}
	}
}

func testArgs(t *testing.T, e engine.Engine, c engine.Cipher) {
	for _, n := range []int{0, 1, 15, 17, 31, 33, 64} {
		if n == c.KeySize() {
			continue
		}
		cr, err := e.NewCrypter(c, make([]byte, n))
		if err == nil {
			cr.Close()
			t.Errorf("key of %d bytes accepted", n)
		} else if !errors.Is(err, engine.ErrKeySize) {
			t.Errorf("key of %d bytes: %v, want ErrKeySize", n, err)
		}
	}
	cr := mustCrypter(t, e, c, make([]byte, c.KeySize()))
	buf := make([]byte, 64)
	for _, n := range []int{0, 8, 15, 17, 32} {
		for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
			if err := engine.Crypt(cr, d, buf, buf, make([]byte, n)); !errors.Is(err, engine.ErrIVSize) {
				t.Errorf("%v with IV of %d bytes: %v, want ErrIVSize", d, n, err)
			}
		}
	}
	iv := make([]byte, 16)
	if c.Blocks() {
		for _, n := range []int{1, 15, 17, 33} {
			for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
				if err := engine.Crypt(cr, d, buf[:n], buf[:n], iv); !errors.Is(err, engine.ErrBlockSize) {
					t.Errorf("%v %v of %d bytes: %v, want ErrBlockSize", c, d, n, err)
				}
			}
		}
	}
	if err := cr.Encrypt(buf[:16], buf[:32], iv); !errors.Is(err, engine.ErrShortDst) {
		t.Errorf("short dst: %v, want ErrShortDst", err)
	}
	big := make([]byte, 80)
	if err := cr.Encrypt(big[16:80], big[0:64], iv); !errors.Is(err, engine.ErrOverlap) {
		t.Errorf("inexact overlap: %v, want ErrOverlap", err)
	}
	// A longer dst is fine; bytes past len(src) are not touched.
	dst := bytes.Repeat([]byte{0xa5}, 48)
	if err := cr.Encrypt(dst, buf[:32], iv); err != nil {
		t.Errorf("longer dst: %v", err)
	}
	if !bytes.Equal(dst[32:], bytes.Repeat([]byte{0xa5}, 16)) {
		t.Errorf("bytes past len(src) changed: %x", dst[32:])
	}
}

func testInPlace(t *testing.T, e engine.Engine, c engine.Cipher) {
	rng := mrand.New(mrand.NewPCG(1, uint64(c.KeyBits)))
	key, iv := randBytes(rng, c.KeySize()), randBytes(rng, 16)
	cr := mustCrypter(t, e, c, key)
	for _, n := range []int{16, 64, 4096, 16384} {
		plain := randBytes(rng, n)
		want := Reference(c, engine.Encrypt, key, iv, plain)
		buf := bytes.Clone(plain)
		ivCopy := bytes.Clone(iv)
		if err := cr.Encrypt(buf, buf, iv); err != nil {
			t.Fatalf("in-place encrypt %d: %v", n, err)
		}
		if !bytes.Equal(buf, want) {
			t.Fatalf("in-place encrypt %d differs from reference", n)
		}
		if !bytes.Equal(iv, ivCopy) {
			t.Fatalf("IV modified by Encrypt")
		}
		if err := cr.Decrypt(buf, buf, iv); err != nil {
			t.Fatalf("in-place decrypt %d: %v", n, err)
		}
		if !bytes.Equal(buf, plain) {
			t.Fatalf("in-place round trip %d differs", n)
		}
		if !bytes.Equal(iv, ivCopy) {
			t.Fatalf("IV modified by Decrypt")
		}
	}
}

func testEmpty(t *testing.T, e engine.Engine, c engine.Cipher) {
	cr := mustCrypter(t, e, c, make([]byte, c.KeySize()))
	if err := cr.Encrypt(nil, nil, make([]byte, 16)); err != nil {
		t.Errorf("empty encrypt: %v", err)
	}
	if err := cr.Decrypt([]byte{}, []byte{}, make([]byte, 16)); err != nil {
		t.Errorf("empty decrypt: %v", err)
	}
}

func testPartial(t *testing.T, e engine.Engine, c engine.Cipher) {
	rng := mrand.New(mrand.NewPCG(2, uint64(c.KeyBits)))
	key, iv := randBytes(rng, c.KeySize()), randBytes(rng, 16)
	cr := mustCrypter(t, e, c, key)
	for _, n := range []int{1, 5, 15, 17, 31, 33, 1000, 4097, 16383} {
		checkBoth(t, cr, c, key, iv, randBytes(rng, n))
	}
}

// CarryIVs are counter blocks whose increments carry across the 64-bit
// boundary (low half all ones) and wrap the whole 128-bit block.
var CarryIVs = [][]byte{
	unhex("0011223344556677 fffffffffffffffd"),
	unhex("00000000000000ff ffffffffffffffff"),
	unhex("ffffffffffffffff fffffffffffffffe"),
	unhex("ffffffffffffffff ffffffffffffffff"),
}

func testCarry(t *testing.T, e engine.Engine, c engine.Cipher) {
	rng := mrand.New(mrand.NewPCG(3, uint64(c.KeyBits)))
	key := randBytes(rng, c.KeySize())
	cr := mustCrypter(t, e, c, key)
	for _, iv := range CarryIVs {
		for _, n := range []int{16, 48, 100, 4096} {
			checkBoth(t, cr, c, key, iv, randBytes(rng, n))
		}
	}
}

func testLarge(t *testing.T, e engine.Engine, c engine.Cipher, size int) {
	rng := mrand.New(mrand.NewPCG(4, uint64(c.KeyBits)))
	if c.Blocks() {
		size &^= engine.BlockSize - 1
	}
	key := randBytes(rng, c.KeySize())
	cr := mustCrypter(t, e, c, key)
	iv := randBytes(rng, 16)
	if c.Mode == engine.CTR {
		iv = CarryIVs[0] // the split point must carry the counter too
	}
	checkBoth(t, cr, c, key, iv, randBytes(rng, size))
}

func testDifferential(t *testing.T, e engine.Engine, c engine.Cipher, rounds int) {
	rng := mrand.New(mrand.NewPCG(5, uint64(c.KeyBits)))
	for range rounds {
		key := randBytes(rng, c.KeySize())
		n := rng.IntN(20000)
		if rng.IntN(4) == 0 {
			n = rng.IntN(64)
		}
		if c.Blocks() {
			n &^= 15
		}
		cr, err := e.NewCrypter(c, key)
		if err != nil {
			t.Fatal(err)
		}
		checkBoth(t, cr, c, key, randBytes(rng, 16), randBytes(rng, n))
		cr.Close()
	}
}

func testDriver(t *testing.T, e engine.Engine, c engine.Cipher) {
	d, err := e.Driver(c)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name == "" || d.Algorithm != c.KernelName() {
		t.Errorf("engine Driver(%v) = %+v: want a name and algorithm %q", c, d, c.KernelName())
	}
	cr := mustCrypter(t, e, c, make([]byte, c.KeySize()))
	if cr.Cipher() != c {
		t.Errorf("Cipher() = %v, want %v", cr.Cipher(), c)
	}
	if cd := cr.Driver(); cd.Name == "" || cd.Algorithm != c.KernelName() {
		t.Errorf("crypter Driver() = %+v", cd)
	}
}

func testClose(t *testing.T, e engine.Engine, c engine.Cipher) {
	cr, err := e.NewCrypter(c, make([]byte, c.KeySize()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	buf := make([]byte, 32)
	if err := cr.Encrypt(buf, buf, make([]byte, 16)); err == nil {
		t.Errorf("Encrypt after Close succeeded")
	}
}

// checkBoth encrypts and decrypts plain (out of place) and compares both
// directions with the reference; for CBC and ECB the decryption of random
// data is checked too, so decrypt is not only tested as an inverse.
func checkBoth(t *testing.T, cr engine.Crypter, c engine.Cipher, key, iv, plain []byte) {
	t.Helper()
	want := Reference(c, engine.Encrypt, key, iv, plain)
	got := make([]byte, len(plain))
	src := bytes.Clone(plain)
	if err := cr.Encrypt(got, src, iv); err != nil {
		t.Fatalf("encrypt %d bytes iv %x: %v", len(plain), iv, err)
	}
	if !bytes.Equal(src, plain) {
		t.Fatalf("encrypt %d bytes modified src", len(plain))
	}
	if i := firstDiff(got, want); i >= 0 {
		t.Fatalf("encrypt %d bytes iv %x: differs from reference at byte %d", len(plain), iv, i)
	}
	back := make([]byte, len(plain))
	if err := cr.Decrypt(back, got, iv); err != nil {
		t.Fatalf("decrypt %d bytes: %v", len(plain), err)
	}
	if i := firstDiff(back, plain); i >= 0 {
		t.Fatalf("round trip %d bytes iv %x: differs at byte %d", len(plain), iv, i)
	}
	if c.Blocks() {
		wantDec := Reference(c, engine.Decrypt, key, iv, plain)
		if err := cr.Decrypt(back, plain, iv); err != nil {
			t.Fatalf("decrypt %d bytes: %v", len(plain), err)
		}
		if i := firstDiff(back, wantDec); i >= 0 {
			t.Fatalf("decrypt %d bytes: differs from reference at byte %d", len(plain), i)
		}
	}
}

func firstDiff(a, b []byte) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func randBytes(rng *mrand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// AddCounter returns the 128-bit big-endian counter block iv + n.
func AddCounter(iv []byte, n uint64) []byte {
	out := bytes.Clone(iv)
	carry := n
	for i := 15; i >= 0 && carry != 0; i-- {
		s := uint64(out[i]) + carry&0xff
		out[i] = byte(s)
		carry = carry>>8 + s>>8
	}
	return out
}

// Reference is a deliberately plain implementation of CBC, CTR and ECB from
// crypto/aes single-block calls, independent of every engine.
func Reference(c engine.Cipher, d engine.Direction, key, iv, src []byte) []byte {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	out := make([]byte, len(src))
	switch c.Mode {
	case engine.CBC:
		prev := bytes.Clone(iv)
		for i := 0; i < len(src); i += 16 {
			if d == engine.Encrypt {
				var x [16]byte
				for j := range x {
					x[j] = src[i+j] ^ prev[j]
				}
				b.Encrypt(out[i:i+16], x[:])
				prev = out[i : i+16]
			} else {
				b.Decrypt(out[i:i+16], src[i:i+16])
				for j := 0; j < 16; j++ {
					out[i+j] ^= prev[j]
				}
				prev = src[i : i+16]
			}
		}
	case engine.ECB:
		for i := 0; i < len(src); i += 16 {
			if d == engine.Encrypt {
				b.Encrypt(out[i:i+16], src[i:i+16])
			} else {
				b.Decrypt(out[i:i+16], src[i:i+16])
			}
		}
	case engine.CTR:
		ctr := bytes.Clone(iv)
		var ks [16]byte
		for i := 0; i < len(src); i += 16 {
			b.Encrypt(ks[:], ctr)
			for j := 0; j < 16 && i+j < len(src); j++ {
				out[i+j] = src[i+j] ^ ks[j]
			}
			ctr = AddCounter(ctr, 1)
		}
	}
	return out
}
