package record

import (
	"bytes"
	"crypto/aes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"

	"golang.org/x/crypto/chacha20"
	//lint:ignore SA1019 the bare one-time MAC is what the test reference needs; the record layer itself uses chacha20poly1305
	"golang.org/x/crypto/poly1305"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustMAC(t testing.TB, m suite.MAC, key []byte) MAC {
	t.Helper()
	x, err := NewMAC(m, key)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestHMACRFC4231 runs RFC 4231's HMAC-SHA256 test cases through the
// record's own code path: the first 8 message bytes are taken as seq, the
// rest as the frame, so Sum computes HMAC over exactly the RFC's message.
func TestHMACRFC4231(t *testing.T) {
	cases := []struct{ name, key, data, mac string }{
		{"case 1", "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b", hex.EncodeToString([]byte("Hi There")),
			"b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
		{"case 2", hex.EncodeToString([]byte("Jefe")), hex.EncodeToString([]byte("what do ya want for nothing?")),
			"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
		{"case 3", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", hex.EncodeToString(bytes.Repeat([]byte{0xdd}, 50)),
			"773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
	}
	for _, c := range cases {
		data := unhex(t, c.data)
		m := newHMAC(unhex(t, c.key))
		var tag [TagSize]byte
		m.Sum(&tag, binary.BigEndian.Uint64(data[:8]), data[8:])
		want := unhex(t, c.mac)[:TagSize]
		if !bytes.Equal(tag[:], want) {
			t.Errorf("%s: tag %x, want %x", c.name, tag, want)
		}
		if !m.Verify(want, binary.BigEndian.Uint64(data[:8]), data[8:]) {
			t.Errorf("%s: Verify rejects the RFC tag", c.name)
		}
	}
}

// refGHASH is GHASH and GCM's tag for an empty plaintext written from
// NIST SP 800-38D (algorithm 1, bit by bit) with crypto/aes's block
// function only: a reference independent of crypto/cipher's GCM.
func refGMAC(key, nonce, aad []byte) []byte {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	var h, j0, ek [16]byte
	b.Encrypt(h[:], h[:])
	hv := [2]uint64{binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])}
	mul := func(x [2]uint64) [2]uint64 {
		var z [2]uint64
		v := hv
		for i := range 128 {
			if x[i/64]>>(63-i%64)&1 == 1 {
				z[0] ^= v[0]
				z[1] ^= v[1]
			}
			lsb := v[1] & 1
			v[1] = v[1]>>1 | v[0]<<63
			v[0] >>= 1
			if lsb == 1 {
				v[0] ^= 0xe1 << 56
			}
		}
		return z
	}
	var x [2]uint64
	for off := 0; off < len(aad); off += 16 {
		var blk [16]byte
		copy(blk[:], aad[off:])
		x[0] ^= binary.BigEndian.Uint64(blk[:8])
		x[1] ^= binary.BigEndian.Uint64(blk[8:])
		x = mul(x)
	}
	x[0] ^= uint64(len(aad)) * 8 // len(A) in bits | len(C) = 0
	x = mul(x)
	copy(j0[:], nonce)
	j0[15] = 1
	b.Encrypt(ek[:], j0[:])
	out := make([]byte, 16)
	binary.BigEndian.PutUint64(out[:8], x[0]^binary.BigEndian.Uint64(ek[:8]))
	binary.BigEndian.PutUint64(out[8:], x[1]^binary.BigEndian.Uint64(ek[8:]))
	return out
}

// TestGMACVectors checks the GMAC reference against NIST's GCM vectors with
// an empty plaintext, the record's GMAC against GCM spec test case 13
// directly (K_mac = 0^256, seq 0 gives the nonce 0^96, an empty frame no
// additional data), and the record's GMAC against the reference for random
// keys, seqs and frames.
func TestGMACVectors(t *testing.T) {
	vectors := []struct{ name, key, nonce, aad, tag string }{
		// McGrew & Viega, The GCM mode of operation, test case 13.
		{"gcm-spec TC13", "0000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000", "",
			"530f8afbc74536b9a963b4f1c4cb738b"},
		// NIST CAVP gcmEncryptExtIV256.rsp [PTlen=0][AADlen=128] Count 0.
		{"CAVP 256 AAD-only", "78dc4e0aaf52d935c3c01eea57428f00ca1fd475f5da86a49c8dd73d68c8e223", "d79cf22d504cc793c3fb6c8a",
			"b96baa8c1c75a671bfb2d08d06be5f36", "3e5d486aa2e30b22e040b85723a06e76"},
		// NIST CAVP gcmEncryptExtIV128.rsp [PTlen=0][AADlen=128] Count 0.
		{"CAVP 128 AAD-only", "77be63708971c4e240d1cb79e8d77feb", "e0e00f19fed7ba0136a797f3",
			"7a43ec1d9c0a5a78a0b16533a6213cab", "209fcc8d3675ed938e9c7166709dd946"},
	}
	for _, v := range vectors {
		key, nonce, aad, want := unhex(t, v.key), unhex(t, v.nonce), unhex(t, v.aad), unhex(t, v.tag)
		if got := refGMAC(key, nonce, aad); !bytes.Equal(got, want) {
			t.Errorf("%s: reference GMAC %x, want %x", v.name, got, want)
		}
		g, err := newGMAC(key)
		if err != nil {
			t.Fatal(err)
		}
		if got := g.a.Seal(nil, nonce, nil, aad); !bytes.Equal(got, want) {
			t.Errorf("%s: crypto/cipher GCM %x, want %x", v.name, got, want)
		}
	}
	var tag [TagSize]byte
	mustMAC(t, suite.GMAC, make([]byte, 32)).Sum(&tag, 0, nil)
	if want := unhex(t, "530f8afbc74536b9a963b4f1c4cb738b"); !bytes.Equal(tag[:], want) {
		t.Errorf("record GMAC, zero key, seq 0, empty frame: %x, want TC13 %x", tag, want)
	}

	rng := mrand.New(mrand.NewPCG(3, 4))
	for i := range 200 {
		key := randBytes(t, MACKeySize)
		seq := randSeq(rng, i)
		frame := randFrame(t, rng)
		m := mustMAC(t, suite.GMAC, key)
		m.Sum(&tag, seq, frame)
		var nonce [12]byte
		binary.BigEndian.PutUint64(nonce[4:], seq)
		if want := refGMAC(key, nonce[:], frame); !bytes.Equal(tag[:], want) {
			t.Fatalf("seq %d, frame of %d bytes: GMAC %x, reference %x", seq, len(frame), tag, want)
		}
	}
}

// refPoly1305 is RFC 8439 §2.8's tag computed from its parts: the one-time
// key is ChaCha20 block 0 (§2.6), the MAC input
// aad | pad16 | ct | pad16 | le64(len aad) | le64(len ct).
func refPoly1305(key, nonce, aad, ct []byte) []byte {
	otk := refOneTimeKey(key, nonce)
	var in []byte
	pad := func(b []byte) {
		in = append(in, b...)
		if r := len(b) % 16; r != 0 {
			in = append(in, make([]byte, 16-r)...)
		}
	}
	pad(aad)
	pad(ct)
	in = binary.LittleEndian.AppendUint64(in, uint64(len(aad)))
	in = binary.LittleEndian.AppendUint64(in, uint64(len(ct)))
	var tag [16]byte
	poly1305.Sum(&tag, in, &otk)
	return tag[:]
}

func refOneTimeKey(key, nonce []byte) [32]byte {
	c, err := chacha20.NewUnauthenticatedCipher(key, nonce)
	if err != nil {
		panic(err)
	}
	var otk [32]byte
	c.XORKeyStream(otk[:], otk[:])
	return otk
}

// TestPoly1305Vectors checks the reference's parts and layout against
// RFC 8439 (Poly1305 §2.5.2, key generation §2.6.2 and A.4, the AEAD tag
// §2.8.2) and the record's Poly1305 MAC against the reference.
func TestPoly1305Vectors(t *testing.T) {
	// §2.5.2.
	var pk [32]byte
	copy(pk[:], unhex(t, "85d6be7857556d337f4452fe42d506a80103808afb0db2fd4abff6af4149f51b"))
	var ptag [16]byte
	poly1305.Sum(&ptag, []byte("Cryptographic Forum Research Group"), &pk)
	if want := unhex(t, "a8061dc1305136c6c22b8baf0c0127a9"); !bytes.Equal(ptag[:], want) {
		t.Errorf("RFC 8439 2.5.2: Poly1305 %x, want %x", ptag, want)
	}
	// §2.6.2 and A.4 #1, #3: the nonces of A.4 are 0^32 | seq, the record's
	// nonce layout (seq 0 and seq 2).
	otks := []struct{ name, key, nonce, otk string }{
		{"2.6.2", "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f", "000000000001020304050607",
			"8ad5a08b905f81cc815040274ab29471a833b637e3fd0da508dbb8e2fdd1a646"},
		{"A.4 #1", "0000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000",
			"76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"},
		{"A.4 #3", "1c9240a5eb55d38af333888604f6b5f0473917c1402b80099dca5cbc207075c0", "000000000000000000000002",
			"965e3bc6f9ec7ed9560808f4d229f94b137ff275ca9b3fcbdd59deaad23310ae"},
	}
	for _, v := range otks {
		if got := refOneTimeKey(unhex(t, v.key), unhex(t, v.nonce)); !bytes.Equal(got[:], unhex(t, v.otk)) {
			t.Errorf("RFC 8439 %s: one-time key %x, want %s", v.name, got, v.otk)
		}
	}
	// §2.8.2: the ciphertext is ChaCha20 from block 1.
	key := unhex(t, "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
	nonce := unhex(t, "070000004041424344454647")
	aad := unhex(t, "50515253c0c1c2c3c4c5c6c7")
	pt := []byte("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.")
	c, err := chacha20.NewUnauthenticatedCipher(key, nonce)
	if err != nil {
		t.Fatal(err)
	}
	c.SetCounter(1)
	ct := make([]byte, len(pt))
	c.XORKeyStream(ct, pt)
	if got, want := refPoly1305(key, nonce, aad, ct), unhex(t, "1ae10b594f09e26a7e902ecbd0600691"); !bytes.Equal(got, want) {
		t.Errorf("RFC 8439 2.8.2: reference tag %x, want %x", got, want)
	}

	rng := mrand.New(mrand.NewPCG(5, 6))
	var tag [TagSize]byte
	for i := range 200 {
		key := randBytes(t, MACKeySize)
		seq := randSeq(rng, i)
		frame := randFrame(t, rng)
		mustMAC(t, suite.Poly1305, key).Sum(&tag, seq, frame)
		var nonce [12]byte
		binary.BigEndian.PutUint64(nonce[4:], seq)
		if want := refPoly1305(key, nonce[:], frame, nil); !bytes.Equal(tag[:], want) {
			t.Fatalf("seq %d, frame of %d bytes: Poly1305 %x, reference %x", seq, len(frame), tag, want)
		}
	}
}

func randSeq(rng *mrand.Rand, i int) uint64 {
	switch i % 4 {
	case 0:
		return uint64(i)
	case 1:
		return 1<<32 + uint64(rng.Uint32()) // above 32 bits: the nonce's upper half
	}
	return rng.Uint64()
}

// randFrame is len:u32be | ciphertext of a random length (0 to 17 KiB).
func randFrame(t testing.TB, rng *mrand.Rand) []byte {
	n := rng.IntN(17 << 10)
	if rng.IntN(3) == 0 {
		n = rng.IntN(40)
	}
	f := binary.BigEndian.AppendUint32(nil, uint32(n))
	return append(f, randBytes(t, n)...)
}

// TestMACRejects: each MAC rejects a flipped bit anywhere in the tag or the
// frame, another seq, another key, and a truncated tag.
func TestMACRejects(t *testing.T) {
	for _, mac := range suite.MACs {
		t.Run(mac.String(), func(t *testing.T) {
			key := randBytes(t, MACKeySize)
			m := mustMAC(t, mac, key)
			frame := binary.BigEndian.AppendUint32(nil, 100)
			frame = append(frame, randBytes(t, 100)...)
			var tag [TagSize]byte
			m.Sum(&tag, 7, frame)
			if !m.Verify(tag[:], 7, frame) {
				t.Fatal("Verify rejects its own tag")
			}
			for i := range tag {
				bad := tag
				bad[i] ^= 0x10
				if m.Verify(bad[:], 7, frame) {
					t.Errorf("accepts tag with byte %d flipped", i)
				}
			}
			for i := range frame {
				frame[i] ^= 1
				if m.Verify(tag[:], 7, frame) {
					t.Errorf("accepts frame with byte %d flipped", i)
				}
				frame[i] ^= 1
			}
			for _, seq := range []uint64{6, 8, 7 | 1<<32, 7 << 32} {
				if m.Verify(tag[:], seq, frame) {
					t.Errorf("accepts seq %d for the tag of seq 7", seq)
				}
			}
			if m.Verify(tag[:15], 7, frame) {
				t.Error("accepts a truncated tag")
			}
			other := bytes.Clone(key)
			other[31] ^= 1
			if mustMAC(t, mac, other).Verify(tag[:], 7, frame) {
				t.Error("accepts the tag under another key")
			}
			for _, o := range suite.MACs {
				if o != mac && mustMAC(t, o, key).Verify(tag[:], 7, frame) {
					t.Errorf("%v accepts the %v tag under the same key", o, mac)
				}
			}
			if m.MAC() != mac {
				t.Errorf("MAC() = %v", m.MAC())
			}
		})
	}
}

func TestNewMACRejects(t *testing.T) {
	for _, n := range []int{0, 16, 31, 33} {
		for _, mac := range suite.MACs {
			if _, err := NewMAC(mac, make([]byte, n)); !errors.Is(err, engine.ErrKeySize) {
				t.Errorf("%v with a %d-byte key: %v, want ErrKeySize", mac, n, err)
			}
		}
	}
	for _, mac := range []suite.MAC{0, 5, 9} {
		if _, err := NewMAC(mac, make([]byte, 32)); !errors.Is(err, ErrSuite) {
			t.Errorf("MAC %d: %v, want ErrSuite", mac, err)
		}
	}
}

func TestMACAllocs(t *testing.T) {
	frame := make([]byte, HeaderSize+1500)
	for _, mac := range suite.MACs {
		m := mustMAC(t, mac, make([]byte, 32))
		var tag [TagSize]byte
		seq := uint64(0)
		if n := testing.AllocsPerRun(100, func() { seq++; m.Sum(&tag, seq, frame) }); n != 0 {
			t.Errorf("%v: Sum allocates %.1f times per frame", mac, n)
		}
		if n := testing.AllocsPerRun(100, func() { seq++; m.Verify(tag[:], seq, frame) }); n != 0 {
			t.Errorf("%v: Verify allocates %.1f times per frame", mac, n)
		}
	}
}

// macSuites are ctr256 and cbc128 with every MAC.
func macSuites() []suite.Suite {
	var out []suite.Suite
	for _, s := range []suite.Suite{ctr256, cbc128} {
		for _, m := range suite.MACs {
			out = append(out, suite.Suite{Cipher: s.Cipher, MAC: m})
		}
	}
	return out
}

// TestRoundTripMACs runs a link with every MAC, and checks the tags the
// worker puts on frames against the references.
func TestRoundTripMACs(t *testing.T) {
	for _, s := range macSuites() {
		t.Run(s.String(), func(t *testing.T) {
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s, Options{}, Options{})
			roundTrip(t, a, b, 256<<10, 40<<10)
			if a.Stats().AuthFailures.Load() != 0 || b.Stats().AuthFailures.Load() != 0 {
				t.Error("auth failures on a clean link")
			}

			k := randDirKeys(t, s)
			c := &Conn{suite: s, stats: new(Stats), opt: Options{Engines: []engine.Engine{engine.Software{}}, Policy: SoftwareOnly{}}}
			w := testWorker(c, engine.Encrypt, &k)
			defer w.close()
			for _, seq := range []uint64{0, 1, 1<<32 + 5} {
				f := getFrame(wireSize(1000 + 16))
				f.seq, f.n = seq, 1000
				if err := w.seal(f); err != nil {
					t.Fatal(err)
				}
				frame, tag := f.buf[:HeaderSize+f.n], f.buf[HeaderSize+f.n:HeaderSize+f.n+TagSize]
				var want []byte
				var nonce [12]byte
				binary.BigEndian.PutUint64(nonce[4:], seq)
				switch s.MAC {
				case suite.HMACSHA256:
					want = refTag(&k, seq, frame[HeaderSize:])
				case suite.GMAC:
					want = refGMAC(k.MAC, nonce[:], frame)
				case suite.Poly1305:
					want = refPoly1305(k.MAC, nonce[:], frame, nil)
				case suite.NHPoly1305:
					want = refNHMAC(k.MAC, seq, frame)
				}
				if !bytes.Equal(tag, want) {
					t.Errorf("seq %d: tag %x, reference %x", seq, tag, want)
				}
				putFrame(f)
			}
		})
	}
}

// TestMACMismatch: two ends with the same keys but other MACs fail the
// link with ErrAuth on the first frame.
func TestMACMismatch(t *testing.T) {
	c1, c2 := tcpPair(t)
	ka, kb := keyPair(t, ctr256)
	gm := suite.Suite{Cipher: ctr256.Cipher, MAC: suite.GMAC}
	pm := suite.Suite{Cipher: ctr256.Cipher, MAC: suite.Poly1305}
	a, err := New(c1, ka, gm, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(c2, kb, pm, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Read(make([]byte, 16)); !errors.Is(err, ErrAuth) {
		t.Fatalf("read: %v, want ErrAuth", err)
	}
}

// BenchmarkMAC is one frame's tag per MAC and frame size.
func BenchmarkMAC(b *testing.B) {
	for _, mac := range suite.MACs {
		for _, n := range []int{16, 64, 256, 1024, 1500, 8192, 16384, 16384 + 3} {
			b.Run(fmt.Sprintf("%s/%d", mac, n), func(b *testing.B) {
				m := mustMAC(b, mac, make([]byte, 32))
				frame := make([]byte, HeaderSize+n)
				var tag [TagSize]byte
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					m.Sum(&tag, uint64(i), frame)
				}
			})
		}
	}
}
