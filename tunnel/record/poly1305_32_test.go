package record

import (
	"bytes"
	"fmt"
	"math/rand/v2"
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
			var nonce [12]byte
			nonce[4], nonce[5], nonce[6], nonce[7] = byte(seq>>56), byte(seq>>48), byte(seq>>40), byte(seq>>32)
			nonce[8], nonce[9], nonce[10], nonce[11] = byte(seq>>24), byte(seq>>16), byte(seq>>8), byte(seq)
			want := ref.Seal(nil, nonce[:], nil, frame)
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

func TestPoly32NoAllocs(t *testing.T) {
	m := newPoly32(make([]byte, 32))
	frame := make([]byte, 16<<10)
	var tag [TagSize]byte
	if a := testing.AllocsPerRun(20, func() { m.Sum(&tag, 7, frame) }); a != 0 {
		t.Fatalf("%.1f allocations per tag, want 0", a)
	}
}

// BenchmarkPoly1305 compares the two implementations of the suite's tag on
// this CPU (the record layer uses poly32 on 32-bit CPUs only).
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
