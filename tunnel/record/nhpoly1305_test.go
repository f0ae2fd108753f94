package record

import (
	"bytes"
	"crypto/aes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// adiantumVector is one test vector of google/adiantum's
// test_vectors/ours/{NH,NHPoly1305}/*.json (third_party/adiantum).
type adiantumVector struct {
	Description string `json:"description"`
	Input       struct {
		Key     string `json:"key_hex"`
		Message string `json:"message_hex"`
	} `json:"input"`
	Hash string `json:"hash_hex"`
}

func adiantumVectors(t *testing.T, name string) []adiantumVector {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "third_party", "adiantum", name))
	if err != nil {
		t.Fatal(err)
	}
	var vs []adiantumVector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(vs) == 0 {
		t.Fatalf("%s: no vectors", name)
	}
	return vs
}

// refNH is NH written from the Adiantum paper's pseudocode (§ "NH"): for
// each chunk of 1024 bytes and each pass i, the sum over the chunk's
// stride pairs of (K[i+j+k] + M[j+k])·(K[i+j+k+s] + M[j+k+s]), in words,
// with math/big instead of wrapping arithmetic.
func refNH(key, msg []byte) []byte {
	const w, s, passes, chunk = 4, 2, 4, 1024
	word := func(b []byte, i int) uint64 { return uint64(binary.LittleEndian.Uint32(b[w*i:])) }
	mod64 := new(big.Int).Lsh(big.NewInt(1), 64)
	var out []byte
	for len(msg) > 0 {
		l := min(len(msg), chunk)
		for i := 0; i < 2*s*passes; i += 2 * s {
			p := new(big.Int)
			for j := 0; j < l/w; j += 2 * s {
				for k := range s {
					a0 := (word(key, i+j+k) + word(msg, j+k)) % (1 << 32)
					a1 := (word(key, i+j+k+s) + word(msg, j+k+s)) % (1 << 32)
					p.Add(p, new(big.Int).Mul(new(big.Int).SetUint64(a0), new(big.Int).SetUint64(a1)))
				}
			}
			out = binary.LittleEndian.AppendUint64(out, p.Mod(p, mod64).Uint64())
		}
		msg = msg[l:]
	}
	return out
}

// refPoly is Poly1305's polynomial with math/big (the paper's PolyP and
// Poly1305 without s): r = k clamped, h = Σ (m_i | 1) r^(n-i+1) mod
// 2^130-5 over 16-byte blocks, a short last block padded with its 1 byte,
// then mod 2^128 as 16 little-endian bytes.
func refPoly(k, m []byte) [16]byte {
	p := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 130), big.NewInt(5))
	le := func(b []byte) *big.Int {
		rev := bytes.Clone(b)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		return new(big.Int).SetBytes(rev)
	}
	clamp := unhexStatic("ffffff0ffcffff0ffcffff0ffcffff0f")
	rb := make([]byte, 16)
	for i := range rb {
		rb[i] = k[i] & clamp[i]
	}
	r := le(rb)
	h := new(big.Int)
	for len(m) > 0 {
		n := min(16, len(m))
		blk := append(bytes.Clone(m[:n]), 1)
		h.Add(h, le(blk))
		h.Mul(h, r)
		h.Mod(h, p)
		m = m[n:]
	}
	h.Mod(h, new(big.Int).Lsh(big.NewInt(1), 128))
	var out [16]byte
	hb := h.Bytes()
	for i := range hb {
		out[i] = hb[len(hb)-1-i]
	}
	return out
}

func unhexStatic(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// refNHPoly1305 is NHPoly1305 from the parts: Poly1305_{K_M} over NH of
// the message zero-padded to 16 bytes (google/adiantum python/nhpoly1305.py).
func refNHPoly1305(key, msg []byte) [16]byte {
	padded := append(bytes.Clone(msg), make([]byte, -len(msg)&15)...)
	return refPoly(key[:16], refNH(key[16:], padded))
}

func add128(a, b [16]byte) [16]byte {
	lo, c := binaryAdd(binary.LittleEndian.Uint64(a[:8]), binary.LittleEndian.Uint64(b[:8]), 0)
	hi, _ := binaryAdd(binary.LittleEndian.Uint64(a[8:]), binary.LittleEndian.Uint64(b[8:]), c)
	var out [16]byte
	binary.LittleEndian.PutUint64(out[:8], lo)
	binary.LittleEndian.PutUint64(out[8:], hi)
	return out
}

// binaryAdd is a + b + c with its carry, written out so the reference does
// not share math/bits with the code under test.
func binaryAdd(a, b, c uint64) (uint64, uint64) {
	s := new(big.Int).Add(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b))
	s.Add(s, new(big.Int).SetUint64(c))
	carry := uint64(s.Bit(64))
	return s.SetBit(s, 64, 0).Uint64(), carry
}

// refNHMAC is the nhpoly1305 suites' tag from docs/macs.md: HKDF subkeys,
// Adiantum's H_T + H_L, plus AES-256 of 0^64 | seq.
func refNHMAC(kmac []byte, seq uint64, frame []byte) []byte {
	okm, err := hkdf.Key(sha256.New, kmac, nil, "offload nhpoly1305 mac keys", 1136)
	if err != nil {
		panic(err)
	}
	kaes, kt, kh := okm[:32], okm[32:48], okm[48:]
	var lenBlock [16]byte
	binary.LittleEndian.PutUint64(lenBlock[:], uint64(len(frame))*8)
	ht := refPoly(kt, lenBlock[:])
	hl := refNHPoly1305(kh, frame)
	b, err := aes.NewCipher(kaes)
	if err != nil {
		panic(err)
	}
	var pad [16]byte
	binary.BigEndian.PutUint64(pad[8:], seq)
	b.Encrypt(pad[:], pad[:])
	tag := add128(add128(ht, hl), pad)
	return tag[:]
}

// TestNHVectors: the record's NH and the reference against google/adiantum's
// NH test vectors (messages of 16, 1008 and 1024 bytes).
func TestNHVectors(t *testing.T) {
	for _, v := range adiantumVectors(t, "NH.json") {
		key, msg, want := unhex(t, v.Input.Key), unhex(t, v.Input.Message), unhex(t, v.Hash)
		if len(key) != nhKeyBytes {
			t.Fatalf("%s: %d-byte key, want %d", v.Description, len(key), nhKeyBytes)
		}
		if got := refNH(key, msg); !bytes.Equal(got, want) {
			t.Errorf("%s, %d bytes: reference NH %x, want %x", v.Description, len(msg), got, want)
		}
		var h nhPoly1305
		h.setKey(append(make([]byte, 16), key...))
		var s [nhPasses]uint64
		nhAdd(&s, h.nhKey[:], msg)
		var got [nhHashBytes]byte
		for i, x := range s {
			binary.LittleEndian.PutUint64(got[8*i:], x)
		}
		if !bytes.Equal(got[:], want) {
			t.Errorf("%s, %d bytes: NH %x, want %x", v.Description, len(msg), got, want)
		}
	}
}

// TestNHPoly1305Vectors: the record's NHPoly1305 and the reference against
// google/adiantum's NHPoly1305 vectors (0, 16, 19, 1024, 1040 and 2048
// bytes; the first of each length is Linux's crypto/testmgr.h
// nhpoly1305_tv_template, from the same generator), whole and, to cross
// the chunk and padding edges differently, as prefixes checked against the
// reference.
func TestNHPoly1305Vectors(t *testing.T) {
	for _, v := range adiantumVectors(t, "NHPoly1305.json") {
		key, msg, want := unhex(t, v.Input.Key), unhex(t, v.Input.Message), unhex(t, v.Hash)
		if got := refNHPoly1305(key, msg); !bytes.Equal(got[:], want) {
			t.Errorf("%s, %d bytes: reference %x, want %x", v.Description, len(msg), got, want)
		}
		var h nhPoly1305
		h.setKey(key)
		var got [16]byte
		h.sum(&got, msg)
		if !bytes.Equal(got[:], want) {
			t.Errorf("%s, %d bytes: NHPoly1305 %x, want %x", v.Description, len(msg), got, want)
		}
		for _, n := range []int{1, 15, 17, 1000, 1023, 1025, 2047} {
			if n > len(msg) {
				continue
			}
			h.sum(&got, msg[:n])
			if ref := refNHPoly1305(key, msg[:n]); got != ref {
				t.Errorf("%s, first %d bytes: NHPoly1305 %x, reference %x", v.Description, n, got, ref)
			}
		}
	}
}

// TestNHMACMatchesReference: the record's tag equals the reference for
// random keys, seqs and frames of every length around the unit, chunk and
// frame-size edges, aligned or not.
func TestNHMACMatchesReference(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(7, 8))
	lengths := []int{1023, 1024, 1025, 1039, 1040, 1041, 2048, 2052, 16<<10 + 4, 64<<10 + 4}
	for n := range 70 {
		lengths = append(lengths, n)
	}
	if !testing.Short() {
		lengths = append(lengths, HardMaxFrame+HeaderSize)
	}
	for i, n := range lengths {
		key := randBytes(t, MACKeySize)
		if i == 0 {
			clear(key)
		}
		// Offsets 0..3: NH reads aligned frames a word at a time, others
		// byte by byte.
		frame := randBytes(t, n+3)[i%4:][:n]
		if i%7 == 1 {
			for j := range frame {
				frame[j] = 0xff // the NH sums' and Poly1305's carries at their edge
			}
		}
		seq := randSeq(rng, i)
		var tag [TagSize]byte
		mustMAC(t, suite.NHPoly1305, key).Sum(&tag, seq, frame)
		if want := refNHMAC(key, seq, frame); !bytes.Equal(tag[:], want) {
			t.Fatalf("%d bytes, seq %#x: tag %x, reference %x", n, seq, tag, want)
		}
	}
}

// TestNHMACBindsEverything: the tag changes with every bit of the frame
// (header and ciphertext), with its length even when the extra bytes are
// zeros NH's padding would hide, and with seq; a tag and a frame of
// another seq never verify.
func TestNHMACBindsEverything(t *testing.T) {
	m := mustMAC(t, suite.NHPoly1305, randBytes(t, MACKeySize))
	frame := binary.BigEndian.AppendUint32(nil, 1100)
	frame = append(frame, randBytes(t, 1100)...)
	var tag, other [TagSize]byte
	m.Sum(&tag, 3, frame)
	for i := range 8 * len(frame) {
		frame[i/8] ^= 1 << (i % 8)
		m.Sum(&other, 3, frame)
		frame[i/8] ^= 1 << (i % 8)
		if other == tag {
			t.Fatalf("bit %d flipped: same tag", i)
		}
	}
	// pad16 makes frame and frame | 0 the same NH input; H_T tells them apart.
	short := binary.BigEndian.AppendUint32(nil, 9)
	short = append(short, make([]byte, 9)...)
	m.Sum(&tag, 3, short)
	for _, n := range []int{1, 3, 7} {
		m.Sum(&other, 3, append(bytes.Clone(short), make([]byte, n)...))
		if other == tag {
			t.Errorf("%d zero bytes appended: same tag", n)
		}
	}
	m.Sum(&tag, 3, frame)
	for _, seq := range []uint64{0, 2, 4, 3 | 1<<32, 3 << 32, 1 << 63} {
		m.Sum(&other, seq, frame)
		if other == tag {
			t.Errorf("seq %#x: same tag as seq 3", seq)
		}
		if m.Verify(tag[:], seq, frame) {
			t.Errorf("seq %#x verifies seq 3's tag", seq)
		}
	}
	// One K_mac, two MAC states (two workers): the same tags.
	k := randBytes(t, MACKeySize)
	a, b := mustMAC(t, suite.NHPoly1305, k), mustMAC(t, suite.NHPoly1305, k)
	a.Sum(&tag, 9, frame)
	b.Sum(&other, 9, frame)
	if tag != other {
		t.Error("two MACs of one key disagree")
	}
}

// FuzzNHMAC: for any frame, key and seq the tag equals the reference, and
// a flipped bit of the frame or another seq changes it.
func FuzzNHMAC(f *testing.F) {
	f.Add(make([]byte, 32), uint64(0), []byte{}, uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 32), uint64(1<<40), bytes.Repeat([]byte{0xff}, 1041), uint16(8000))
	f.Add(bytes.Repeat([]byte{1}, 32), uint64(7), []byte("0123456789abcdef0"), uint16(3))
	f.Fuzz(func(t *testing.T, key []byte, seq uint64, frame []byte, flip uint16) {
		if len(key) != MACKeySize || len(frame) > 4<<10 {
			return
		}
		m := mustMAC(t, suite.NHPoly1305, key)
		var tag, other [TagSize]byte
		m.Sum(&tag, seq, frame)
		if want := refNHMAC(key, seq, frame); !bytes.Equal(tag[:], want) {
			t.Fatalf("tag %x, reference %x", tag, want)
		}
		m.Sum(&other, seq+1, frame)
		if other == tag {
			t.Fatalf("seq %d and %d: same tag", seq, seq+1)
		}
		if len(frame) > 0 {
			i := int(flip) % (8 * len(frame))
			frame[i/8] ^= 1 << (i % 8)
			if m.Verify(tag[:], seq, frame) {
				t.Fatalf("bit %d flipped: the tag still verifies", i)
			}
		}
	})
}

func TestNHMACAllocs(t *testing.T) {
	m := mustMAC(t, suite.NHPoly1305, make([]byte, MACKeySize))
	frame := make([]byte, 64<<10+HeaderSize)
	var tag [TagSize]byte
	if a := testing.AllocsPerRun(20, func() { m.Sum(&tag, 5, frame) }); a != 0 {
		t.Fatalf("%.1f allocations per tag, want 0", a)
	}
}

// BenchmarkNHPoly1305 is NHPoly1305's hash alone beside the suite tags it
// competes with (BenchmarkMAC has the whole tag of every MAC).
func BenchmarkNHPoly1305(b *testing.B) {
	for _, n := range []int{1500, 16 << 10, 64 << 10} {
		msg := make([]byte, n)
		b.Run(fmt.Sprintf("nhpoly1305/%d", n), func(b *testing.B) {
			var h nhPoly1305
			h.setKey(make([]byte, 16+nhKeyBytes))
			var out [16]byte
			b.SetBytes(int64(n))
			for b.Loop() {
				h.sum(&out, msg)
			}
		})
		b.Run(fmt.Sprintf("poly32/%d", n), func(b *testing.B) {
			m := newPoly32(make([]byte, 32))
			var tag [TagSize]byte
			b.SetBytes(int64(n))
			for b.Loop() {
				m.Sum(&tag, 1, msg)
			}
		})
	}
}

// nhFrameVector is one known-answer frame of testdata/nhpoly1305_frames.json:
// the keys of one direction, a seq and a plaintext, and the wire frame
// (hdr | ciphertext | tag) docs/protocol.md gives for them. The file was
// made with the references of this file (refIV, crypto/cipher, refNHMAC),
// so another implementation can check its frames against it byte for byte.
type nhFrameVector struct {
	Suite     string `json:"suite"`
	KEnc      string `json:"k_enc"`
	KMAC      string `json:"k_mac"`
	SIV       string `json:"s_iv"`
	Seq       uint64 `json:"seq"`
	Plaintext string `json:"plaintext"`
	Wire      string `json:"wire"`
}

// TestNHPoly1305Frames: the record layer seals each known-answer frame to
// the wire bytes of the file, the reference tags them the same, and an
// opening worker gives the plaintext back and refuses the frame with any
// bit flipped.
func TestNHPoly1305Frames(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "nhpoly1305_frames.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs []nhFrameVector
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	suites := map[string]bool{}
	for _, v := range vs {
		s, err := suite.Parse(v.Suite)
		if err != nil || s.MAC != suite.NHPoly1305 {
			t.Fatalf("vector suite %q: %v", v.Suite, err)
		}
		suites[v.Suite] = true
		k := DirKeys{Enc: unhex(t, v.KEnc), MAC: unhex(t, v.KMAC)}
		copy(k.IV[:], unhex(t, v.SIV))
		pt, wire := unhex(t, v.Plaintext), unhex(t, v.Wire)
		name := fmt.Sprintf("%s/seq %d/%d bytes", v.Suite, v.Seq, len(pt))
		if got := refNHMAC(k.MAC, v.Seq, wire[:len(wire)-TagSize]); !bytes.Equal(got, wire[len(wire)-TagSize:]) {
			t.Errorf("%s: reference tag %x, file %x", name, got, wire[len(wire)-TagSize:])
		}

		c := &Conn{suite: s, stats: new(Stats), opt: Options{Engines: []engine.Engine{engine.Software{}}, Policy: SoftwareOnly{}}}
		sealer, opener := testWorker(c, engine.Encrypt, &k), testWorker(c, engine.Decrypt, &k)
		f := getFrame(wireSize(len(pt) + engine.BlockSize))
		copy(f.buf[HeaderSize:], pt)
		f.seq, f.n = v.Seq, len(pt)
		if err := sealer.seal(f); err != nil {
			t.Fatalf("%s: seal: %v", name, err)
		}
		if got := f.buf[:wireSize(f.n)]; !bytes.Equal(got, wire) {
			t.Errorf("%s: sealed\n%x\nwant\n%x", name, got, wire)
		}
		for _, bit := range []int{0, 8*HeaderSize + 3, 8*len(wire) - 1} {
			bad := bytes.Clone(wire)
			bad[bit/8] ^= 1 << (bit % 8)
			copy(f.buf, bad)
			f.seq, f.n = v.Seq, len(wire)-Overhead
			if err := opener.open(f); !errors.Is(err, ErrAuth) {
				t.Errorf("%s: bit %d flipped: open %v, want ErrAuth", name, bit, err)
			}
		}
		copy(f.buf, wire)
		f.seq, f.n = v.Seq, len(wire)-Overhead
		if err := opener.open(f); err != nil {
			t.Errorf("%s: open: %v", name, err)
		} else if got := f.buf[f.off:f.end]; !bytes.Equal(got, pt) {
			t.Errorf("%s: opened %x, want %x", name, got, pt)
		}
		putFrame(f)
		sealer.close()
		opener.close()
	}
	if !suites["aes-256-ctr-nhpoly1305"] || !suites["aes-256-cbc-nhpoly1305"] {
		t.Errorf("vectors cover %v, want both aes-256 modes", suites)
	}
}
