package engine

import (
	"encoding/binary"
	"fmt"
)

// kernelChunkSize is the largest piece a kernel engine hands to the kernel in
// one request. Bigger buffers are split and the IV is chained from piece to
// piece, so the result equals one request over the whole buffer. 64 KiB
// stays well below the sizes where AF_ALG requests were seen to hang
// (docs/kernel-notes.md: 256 KiB hung, 128 KiB worked) and is where device throughput
// has levelled off; the AF_ALG and cryptodev engines share it so that they
// split identically.
const kernelChunkSize = 64 << 10

// chunkFunc processes one piece: all of src into dst (same length, possibly
// the same buffer) starting from iv, which it must not modify.
type chunkFunc func(d Direction, dst, src, iv []byte) error

// chunker splits one Encrypt/Decrypt call into pieces of at most size
// bytes, chaining the IV the way one request over the whole buffer would.
// It owns the IV scratch space, so a call allocates nothing; like a Crypter
// it is not safe for concurrent use.
type chunker struct {
	size int
	do   chunkFunc
	next [BlockSize]byte // IV of the next piece
	last [BlockSize]byte // CBC decrypt: last ciphertext block of the piece
}

// newChunker returns a chunker that calls do for each piece of at most size
// bytes; size must be a positive multiple of BlockSize.
func newChunker(size int, do chunkFunc) (*chunker, error) {
	if size <= 0 || size%BlockSize != 0 {
		return nil, fmt.Errorf("engine: chunk size %d is not a positive multiple of %d", size, BlockSize)
	}
	return &chunker{size: size, do: do}, nil
}

// run processes src into dst[:len(src)] as one call with IV iv would. The
// arguments must already have passed CheckArgs. iv is never modified: the
// first piece gets it as is, later pieces get the chained IV:
//   - CBC encrypt: the last ciphertext block the previous piece wrote;
//   - CBC decrypt: the last ciphertext block of the previous piece's input,
//     saved before the piece runs because an in-place decrypt overwrites it;
//   - CTR: iv plus the blocks consumed so far, as a 128-bit big-endian
//     counter (so it carries across the 64-bit boundary like ctr(aes));
//   - ECB: nothing (the IV is ignored).
func (k *chunker) run(m Mode, d Direction, dst, src, iv []byte) error {
	if len(src) <= k.size {
		if len(src) == 0 {
			return nil
		}
		return k.do(d, dst[:len(src)], src, iv)
	}
	cur := iv
	for off := 0; off < len(src); off += k.size {
		end := min(off+k.size, len(src))
		in, out := src[off:end], dst[off:end]
		if m == CBC && d == Decrypt {
			copy(k.last[:], in[len(in)-BlockSize:])
		}
		if err := k.do(d, out, in, cur); err != nil {
			return fmt.Errorf("bytes %d-%d of %d: %w", off, end, len(src), err)
		}
		if end == len(src) {
			break
		}
		switch {
		case m == ECB:
			// Every block stands alone: nothing to chain.
		case m == CTR:
			addCounter(&k.next, cur, uint64(len(in)/BlockSize))
		case d == Encrypt:
			copy(k.next[:], out[len(out)-BlockSize:])
		default:
			k.next = k.last
		}
		cur = k.next[:]
	}
	return nil
}

// addCounter sets dst to the 128-bit big-endian counter iv + n. dst may
// share memory with iv.
func addCounter(dst *[BlockSize]byte, iv []byte, n uint64) {
	hi := binary.BigEndian.Uint64(iv[:8])
	lo := binary.BigEndian.Uint64(iv[8:BlockSize])
	sum := lo + n
	if sum < lo {
		hi++
	}
	binary.BigEndian.PutUint64(dst[:8], hi)
	binary.BigEndian.PutUint64(dst[8:], sum)
}
