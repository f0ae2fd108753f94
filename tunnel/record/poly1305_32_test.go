package record

import (
	"bytes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"golang.org/x/crypto/chacha20poly1305"
)

// The 32-bit Poly1305 tags every frame exactly as x/crypto's
// ChaCha20-Poly1305 does (the suite's definition), whatever the CPU the
// test runs on: every length around the block and padding edges, large
// frames, seqs that use all nonce bytes, random keys.
func TestPoly32MatchesAEAD(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := []int{0, 1, 15, 16, 17, 31, 32, 33, 100, 1500, 16<<10 + 4, 64<<10 + 4}
	for i := range 64 {
		lengths = append(lengths, i)
	}
	for trial := range 20 {
		key := make([]byte, 32)
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		if trial == 0 {
			clear(key) // r = 0
		}
		if trial == 1 {
			for i := range key {
				key[i] = 0xff // the clamp and the final carry at their edge
			}
		}
		ref, err := chacha20poly1305.New(key)
		if err != nil {
			t.Fatal(err)
		}
		m := newPoly32(key)
		for _, n := range lengths {
			frame := make([]byte, n)
			for i := range frame {
				frame[i] = byte(rng.Uint32())
			}
			if trial == 2 {
				for i := range frame {
					frame[i] = 0xff
				}
			}
			seq := rng.Uint64()
			if trial == 3 {
				seq = ^uint64(0)
			}
			want := aeadTag(ref, seq, frame)
			var got [TagSize]byte
			m.Sum(&got, seq, frame)
			if !bytes.Equal(got[:], want) {
				t.Fatalf("trial %d, %d bytes, seq %#x: tag %x, x/crypto %x", trial, n, seq, got, want)
			}
			if !m.Verify(want, seq, frame) {
				t.Fatalf("trial %d, %d bytes: Verify refused the right tag", trial, n)
			}
			want[rng.IntN(TagSize)] ^= 1 << rng.IntN(8)
			if m.Verify(want, seq, frame) {
				t.Fatalf("trial %d, %d bytes: Verify took a flipped tag", trial, n)
			}
		}
	}
}

// aeadTag is the suite's tag by its definition: x/crypto's
// ChaCha20-Poly1305 sealing nothing, with frame as associated data under
// nonce 0^32 | seq:u64be.
func aeadTag(ref cipher.AEAD, seq uint64, frame []byte) []byte {
	var nonce [12]byte
	binary.BigEndian.PutUint64(nonce[4:], seq)
	return ref.Seal(nil, nonce[:], nil, frame)
}

// fill sets b to random bytes, or to all 0xff if ff, and returns it.
func fill(rng *rand.Rand, b []byte, ff bool) []byte {
	for i := range b {
		b[i] = byte(rng.Uint32())
		if ff {
			b[i] = 0xff
		}
	}
	return b
}

// Frames start at any offset in a buffer, and the assembly (MIPS) has an
// aligned and an unaligned loop: every length 0..300 at every alignment,
// with random keys and messages and all-0xff ones (every limb of r and of
// the message at its largest, so every carry is taken).
func TestPoly32Misaligned(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 300+4)
	for trial := range 4 {
		key := make([]byte, 32)
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		ff := trial == 0
		if ff {
			for i := range key {
				key[i] = 0xff
			}
		}
		ref, err := chacha20poly1305.New(key)
		if err != nil {
			t.Fatal(err)
		}
		m := newPoly32(key)
		for off := range 4 {
			for n := 0; n <= 300; n++ {
				frame := fill(rng, buf[off:off+n], ff)
				seq := rng.Uint64()
				want := aeadTag(ref, seq, frame)
				var got [TagSize]byte
				m.Sum(&got, seq, frame)
				if !bytes.Equal(got[:], want) {
					t.Fatalf("trial %d, offset %d, %d bytes: tag %x, x/crypto %x", trial, off, n, got, want)
				}
			}
		}
	}
}

// The assembly's blocks (radix 2^32 inside, 26-bit limbs in and out)
// leaves a state worth what blocksGeneric's is: the same h mod 2^130-5,
// compared through finish (which reduces fully), with r and s untouched.
// Every length 0..300 (a tail under 16 bytes is left alone), at every
// alignment, both hibits, the message cut in two calls at every block
// boundary in turn (the conversions on entry and exit), from four kinds
// of state: random reduced limbs; limbs at 2^26-1 but h1 at the 2^26+44
// a partial reduction can leave, with all-0xff keys and messages (every
// carry of the conversion taken); zero; and h4 = 3·2^104 with r = 1 and
// all-0xff messages, where h+m is 2^130-1, r·h ≡ h, and the reduction's
// carry runs through all four words (chance 2^-96 at random).
func TestPoly32BlocksMatchGeneric(t *testing.T) {
	if runtime.GOARCH != "mips" && runtime.GOARCH != "mipsle" {
		t.Skip("blocks is blocksGeneric on " + runtime.GOARCH)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 300+4)
	for trial := range 8 {
		kind := trial % 4
		var key [32]byte
		for i := range key {
			key[i] = byte(rng.Uint32())
			if kind == 1 {
				key[i] = 0xff
			}
		}
		if kind == 3 {
			clear(key[:16])
			key[0] = 1
		}
		var start poly32
		start.init(&key)
		switch kind {
		case 0:
			for _, h := range []*uint32{&start.h0, &start.h1, &start.h2, &start.h3, &start.h4} {
				*h = rng.Uint32() & (1<<26 - 1)
			}
		case 1:
			start.h0, start.h1, start.h2, start.h3, start.h4 = 1<<26-1, 1<<26+44, 1<<26-1, 1<<26-1, 1<<26-1
		case 3:
			start.h4 = 3 << 24
		}
		ff := kind == 1 || kind == 3
		for _, hibit := range []uint32{0, 1 << 24} {
			for off := range 4 {
				for n := 0; n <= 300; n++ {
					msg := fill(rng, buf[off:off+n], ff)
					want := start
					blocksGeneric(&want, msg, hibit)
					var wantTag [TagSize]byte
					want.finish(&wantTag, &key)
					for cut := 0; cut <= n/16; cut++ {
						got := start
						got.blocks(msg[:16*cut], hibit)
						got.blocks(msg[16*cut:], hibit)
						var gotTag [TagSize]byte
						got.finish(&gotTag, &key)
						if gotTag != wantTag {
							t.Fatalf("trial %d, hibit %#x, offset %d, %d bytes cut at %d from %+v:\nasm     %+v %x\ngeneric %+v %x", trial, hibit, off, n, 16*cut, start, got, gotTag, want, wantTag)
						}
						got.h0, got.h1, got.h2, got.h3, got.h4 = start.h0, start.h1, start.h2, start.h3, start.h4
						if got != start {
							t.Fatalf("blocks changed r or s: %+v, was %+v", got, start)
						}
					}
				}
			}
		}
	}
}

// FuzzPoly32 compares the tag with x/crypto's for any key, seq, frame and
// offset of the frame in its buffer.
func FuzzPoly32(f *testing.F) {
	f.Add(make([]byte, 32), uint64(0), []byte{}, uint8(0))
	f.Add(bytes.Repeat([]byte{0xff}, 32), ^uint64(0), bytes.Repeat([]byte{0xff}, 67), uint8(3))
	f.Fuzz(func(t *testing.T, key []byte, seq uint64, frame []byte, off uint8) {
		if len(key) != 32 {
			return
		}
		ref, err := chacha20poly1305.New(key)
		if err != nil {
			t.Fatal(err)
		}
		o := int(off % 4)
		buf := make([]byte, o+len(frame))
		copy(buf[o:], frame)
		want := aeadTag(ref, seq, frame)
		var got [TagSize]byte
		newPoly32(key).Sum(&got, seq, buf[o:])
		if !bytes.Equal(got[:], want) {
			t.Fatalf("%d bytes at offset %d: tag %x, x/crypto %x", len(frame), o, got, want)
		}
	})
}

func TestPoly32NoAllocs(t *testing.T) {
	m := newPoly32(make([]byte, 32))
	frame := make([]byte, 16<<10)
	var tag [TagSize]byte
	if a := testing.AllocsPerRun(20, func() { m.Sum(&tag, 7, frame) }); a != 0 {
		t.Fatalf("%.1f allocations per tag, want 0", a)
	}
}

// BenchmarkPoly1305 compares the two implementations of the suite's tag on
// this CPU (the record layer uses poly32 on 32-bit CPUs only), and poly32's
// blocks with its Go version.
func BenchmarkPoly1305(b *testing.B) {
	key := make([]byte, 32)
	for _, n := range []int{1500, 16 << 10, 64 << 10} {
		frame := make([]byte, n)
		var tag [TagSize]byte
		b.Run(fmt.Sprintf("poly32/%d", n), func(b *testing.B) {
			m := newPoly32(key)
			b.SetBytes(int64(n))
			for b.Loop() {
				m.Sum(&tag, 1, frame)
			}
		})
		// blocks alone: the assembly (on MIPS; elsewhere this is the Go
		// code too) against the Go code, same state and frame.
		b.Run(fmt.Sprintf("blocks/%d", n), func(b *testing.B) {
			var p poly32
			p.init((*[32]byte)(key))
			b.SetBytes(int64(n))
			for b.Loop() {
				p.blocks(frame, 1<<24)
			}
		})
		b.Run(fmt.Sprintf("blocks-offset1/%d", n), func(b *testing.B) {
			var p poly32
			p.init((*[32]byte)(key))
			buf := make([]byte, n+16)
			b.SetBytes(int64(n))
			for b.Loop() {
				p.blocks(buf[1:1+n], 1<<24)
			}
		})
		b.Run(fmt.Sprintf("blocks-go/%d", n), func(b *testing.B) {
			var p poly32
			p.init((*[32]byte)(key))
			b.SetBytes(int64(n))
			for b.Loop() {
				blocksGeneric(&p, frame, 1<<24)
			}
		})
		b.Run(fmt.Sprintf("x-crypto/%d", n), func(b *testing.B) {
			a, _ := chacha20poly1305.New(key)
			m := &aeadMAC{a: a}
			b.SetBytes(int64(n))
			for b.Loop() {
				m.Sum(&tag, 1, frame)
			}
		})
	}
}
