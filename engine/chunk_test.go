package engine

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"testing"
)

// The chunker must give exactly what one whole-buffer call gives. The
// software engine serves both as the piece worker and as the reference; it
// is itself checked against the NIST vectors by the conformance suite.
func TestChunkerMatchesWholeBuffer(t *testing.T) {
	ivs := [][]byte{
		chunkHex("000102030405060708090a0b0c0d0e0f"),
		chunkHex("0000000000000000fffffffffffffffe"), // carries into the high half
		chunkHex("ffffffffffffffffffffffffffffffff"), // wraps the whole block
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	for _, c := range []Cipher{{CBC, 128}, {CBC, 256}, {CTR, 128}, {CTR, 256}, {ECB, 192}} {
		key := make([]byte, c.KeySize())
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		whole, err := Software{}.NewCrypter(c, key)
		if err != nil {
			t.Fatal(err)
		}
		worker, err := Software{}.NewCrypter(c, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, size := range []int{16, 48, 64} {
			var pieces []int
			k, err := newChunker(size, func(d Direction, dst, src, iv []byte) error {
				if len(dst) != len(src) {
					return fmt.Errorf("piece dst %d bytes, src %d", len(dst), len(src))
				}
				pieces = append(pieces, len(src))
				return Crypt(worker, d, dst, src, iv)
			})
			if err != nil {
				t.Fatal(err)
			}
			lens := []int{0, 16, size, size + 16, 3*size - 16, 5*size + 32}
			if c.Mode == CTR {
				lens = append(lens, 1, size+1, 4*size+15)
			}
			for _, n := range lens {
				for _, iv := range ivs {
					for _, d := range []Direction{Encrypt, Decrypt} {
						for _, inPlace := range []bool{false, true} {
							name := fmt.Sprintf("%v/%v/chunk%d/len%d/iv%x/inplace=%v", c, d, size, n, iv, inPlace)
							src := make([]byte, n)
							for i := range src {
								src[i] = byte(rng.Uint32())
							}
							want := make([]byte, n)
							if err := Crypt(whole, d, want, src, iv); err != nil {
								t.Fatalf("%s: reference: %v", name, err)
							}
							ivCopy := bytes.Clone(iv)
							dst := make([]byte, n)
							in := bytes.Clone(src)
							if inPlace {
								dst = in
							}
							pieces = pieces[:0]
							if err := k.run(c.Mode, d, dst, in, iv); err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							if !bytes.Equal(dst, want) {
								t.Fatalf("%s: result differs from one whole-buffer call", name)
							}
							if !bytes.Equal(iv, ivCopy) {
								t.Fatalf("%s: caller's IV modified", name)
							}
							if !inPlace && !bytes.Equal(in, src) {
								t.Fatalf("%s: src modified", name)
							}
							checkPieces(t, name, pieces, n, size)
						}
					}
				}
			}
		}
	}
}

// checkPieces asserts that n bytes went out as full pieces of size bytes
// and one shorter last piece, and that an empty buffer made no call.
func checkPieces(t *testing.T, name string, pieces []int, n, size int) {
	t.Helper()
	total := 0
	for i, p := range pieces {
		if p > size || p == 0 || (i < len(pieces)-1 && p != size) {
			t.Fatalf("%s: pieces %v, want full pieces of %d then the rest", name, pieces, size)
		}
		total += p
	}
	if total != n {
		t.Fatalf("%s: pieces %v cover %d bytes, want %d", name, pieces, total, n)
	}
}

func TestChunkerWrapsPieceError(t *testing.T) {
	errPiece := errors.New("piece failed")
	calls := 0
	k, err := newChunker(32, func(d Direction, dst, src, iv []byte) error {
		calls++
		if calls == 2 {
			return errPiece
		}
		copy(dst, src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 96)
	err = k.run(CBC, Encrypt, buf, buf, make([]byte, BlockSize))
	if !errors.Is(err, errPiece) {
		t.Fatalf("run = %v, want it to wrap the piece's error", err)
	}
	if calls != 2 {
		t.Errorf("%d pieces ran, want the run to stop at the failing second one", calls)
	}
	if want := "bytes 32-64 of 96: piece failed"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

func TestNewChunkerRejectsBadSize(t *testing.T) {
	do := func(Direction, []byte, []byte, []byte) error { return nil }
	for _, size := range []int{0, -16, 8, 17, 65535} {
		if _, err := newChunker(size, do); err == nil {
			t.Errorf("newChunker(%d) succeeded, want an error", size)
		}
	}
	if _, err := newChunker(kernelChunkSize, do); err != nil {
		t.Errorf("newChunker(kernelChunkSize): %v", err)
	}
}

func TestChunkAddCounter(t *testing.T) {
	for _, tc := range []struct {
		iv   string
		n    uint64
		want string
	}{
		{"00000000000000000000000000000000", 1, "00000000000000000000000000000001"},
		{"0000000000000000ffffffffffffffff", 1, "00000000000000010000000000000000"},
		{"ffffffffffffffffffffffffffffffff", 2, "00000000000000000000000000000001"},
		{"0000000000000000fffffffffffffff0", kernelChunkSize / BlockSize, "00000000000000010000000000000ff0" /* ...fff0 + 0x1000 carries */},
	} {
		var got [BlockSize]byte
		addCounter(&got, chunkHex(tc.iv), tc.n)
		if hex.EncodeToString(got[:]) != tc.want {
			t.Errorf("addCounter(%s, %#x) = %x, want %s", tc.iv, tc.n, got, tc.want)
		}
	}
}

func TestChunkerRunAllocatesNothing(t *testing.T) {
	k, err := newChunker(32, func(d Direction, dst, src, iv []byte) error { copy(dst, src); return nil })
	if err != nil {
		t.Fatal(err)
	}
	buf, iv := make([]byte, 160), make([]byte, BlockSize)
	for _, m := range []Mode{CBC, CTR} {
		if n := testing.AllocsPerRun(100, func() { _ = k.run(m, Decrypt, buf, buf, iv) }); n != 0 {
			t.Errorf("%v: %v allocations per run", m, n)
		}
	}
}

func chunkHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
