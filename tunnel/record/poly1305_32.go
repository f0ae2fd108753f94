package record

import (
	"crypto/subtle"
	"encoding/binary"
	"math/bits"

	"github.com/offload-dev/offload/tunnel/suite"
)

// poly32MAC is the poly1305 suite's tag (mac.go: ChaCha20-Poly1305 of an
// empty plaintext with the frame as associated data, RFC 8439 §2.8) for
// 32-bit CPUs, where it is most of the CPU a frame costs once a device
// does the AES. x/crypto's Poly1305 keeps its state in 64-bit limbs
// multiplied with bits.Mul64, which a 32-bit CPU emulates with four
// multiplies and carries; this one keeps five 26-bit limbs
// (poly1305-donna-32), so every product is one 32×32→64 multiply
// (MULTU on MIPS, UMULL on ARM). Under qemu-user on mipsle it tags 16 KiB
// 1.8x as fast (221 against 124 MB/s). On MIPS its blocks is assembly
// (poly1305_32_mipsx.s: radix 2^32, MADDU), which tags 64 KiB 1.7x as
// fast again under qemu-user (452 against 263 MB/s, medians of five
// alternating runs; docs/lab/performance.md). The ChaCha20 block that
// makes each frame's one-time key is computed here too, without the
// allocation a new x/crypto chacha20 Cipher per frame would cost. The tags are identical to
// x/crypto's (TestPoly32MatchesAEAD); 64-bit CPUs keep x/crypto's, which
// has assembly there.
type poly32MAC struct {
	key   [8]uint32 // K_mac as ChaCha20 key words
	nonce [3]uint32 // 0 | seq
	want  [TagSize]byte
}

// usePoly32 says whether newPoly1305MAC picks poly32MAC on this CPU.
const usePoly32 = bits.UintSize == 32

func newPoly32(key []byte) *poly32MAC {
	m := new(poly32MAC)
	for i := range m.key {
		m.key[i] = binary.LittleEndian.Uint32(key[4*i:])
	}
	return m
}

func (m *poly32MAC) MAC() suite.MAC { return suite.Poly1305 }

func (m *poly32MAC) Sum(tag *[TagSize]byte, seq uint64, frame []byte) {
	// Nonce 0^32 | seq:u64be, as little-endian ChaCha20 words.
	var nb [12]byte
	binary.BigEndian.PutUint64(nb[4:], seq)
	m.nonce = [3]uint32{binary.LittleEndian.Uint32(nb[0:]), binary.LittleEndian.Uint32(nb[4:]), binary.LittleEndian.Uint32(nb[8:])}
	var otk [32]byte
	chachaKey(&otk, &m.key, &m.nonce)

	var p poly32
	p.init(&otk)
	full := len(frame) &^ 15
	p.blocks(frame[:full], 1<<24)
	if rest := frame[full:]; len(rest) > 0 {
		// pad16 of the associated data: zeros up to a whole block.
		var last [16]byte
		copy(last[:], rest)
		p.blocks(last[:], 1<<24)
	}
	// No ciphertext; then le64(len(aad)) | le64(0).
	var lens [16]byte
	binary.LittleEndian.PutUint64(lens[:8], uint64(len(frame)))
	p.blocks(lens[:], 1<<24)
	p.finish(tag, &otk)
	clear(otk[:])
}

func (m *poly32MAC) Verify(tag []byte, seq uint64, frame []byte) bool {
	m.Sum(&m.want, seq, frame)
	return subtle.ConstantTimeCompare(m.want[:], tag) == 1
}

// chachaKey writes the first 32 bytes of ChaCha20 block 0 under key and
// nonce (RFC 8439 §2.3, §2.6): the frame's one-time Poly1305 key.
func chachaKey(out *[32]byte, key *[8]uint32, nonce *[3]uint32) {
	const c0, c1, c2, c3 = 0x61707865, 0x3320646e, 0x79622d32, 0x6b206574
	x0, x1, x2, x3 := uint32(c0), uint32(c1), uint32(c2), uint32(c3)
	x4, x5, x6, x7 := key[0], key[1], key[2], key[3]
	x8, x9, x10, x11 := key[4], key[5], key[6], key[7]
	x12, x13, x14, x15 := uint32(0), nonce[0], nonce[1], nonce[2]
	qr := func(a, b, c, d uint32) (uint32, uint32, uint32, uint32) {
		a += b
		d = bits.RotateLeft32(d^a, 16)
		c += d
		b = bits.RotateLeft32(b^c, 12)
		a += b
		d = bits.RotateLeft32(d^a, 8)
		c += d
		b = bits.RotateLeft32(b^c, 7)
		return a, b, c, d
	}
	for range 10 {
		x0, x4, x8, x12 = qr(x0, x4, x8, x12)
		x1, x5, x9, x13 = qr(x1, x5, x9, x13)
		x2, x6, x10, x14 = qr(x2, x6, x10, x14)
		x3, x7, x11, x15 = qr(x3, x7, x11, x15)
		x0, x5, x10, x15 = qr(x0, x5, x10, x15)
		x1, x6, x11, x12 = qr(x1, x6, x11, x12)
		x2, x7, x8, x13 = qr(x2, x7, x8, x13)
		x3, x4, x9, x14 = qr(x3, x4, x9, x14)
	}
	// Only words 0..7 are the key; 8..15 are computed by the rounds but
	// not needed past them.
	_, _, _, _, _, _, _, _ = x8, x9, x10, x11, x12, x13, x14, x15
	for i, v := range [8]uint32{x0 + c0, x1 + c1, x2 + c2, x3 + c3, x4 + key[0], x5 + key[1], x6 + key[2], x7 + key[3]} {
		binary.LittleEndian.PutUint32(out[4*i:], v)
	}
}

// poly32 is a Poly1305 state in five 26-bit limbs.
type poly32 struct {
	r0, r1, r2, r3, r4 uint32
	s1, s2, s3, s4     uint32
	h0, h1, h2, h3, h4 uint32
}

func (p *poly32) init(key *[32]byte) {
	p.r0 = binary.LittleEndian.Uint32(key[0:]) & 0x3ffffff
	p.r1 = (binary.LittleEndian.Uint32(key[3:]) >> 2) & 0x3ffff03
	p.r2 = (binary.LittleEndian.Uint32(key[6:]) >> 4) & 0x3ffc0ff
	p.r3 = (binary.LittleEndian.Uint32(key[9:]) >> 6) & 0x3f03fff
	p.r4 = (binary.LittleEndian.Uint32(key[12:]) >> 8) & 0x00fffff
	p.s1, p.s2, p.s3, p.s4 = p.r1*5, p.r2*5, p.r3*5, p.r4*5
	p.h0, p.h1, p.h2, p.h3, p.h4 = 0, 0, 0, 0, 0
}

// blocks absorbs m, a multiple of 16 bytes; hibit is 1<<24 for full
// blocks (the 2^128 term). MIPS has it in assembly
// (poly1305_32_mipsx.s); elsewhere it is blocksGeneric.
func (p *poly32) blocks(m []byte, hibit uint32) { polyBlocks(p, m, hibit) }

// blocksGeneric is blocks in Go, the reference the assembly is tested
// against (TestPoly32BlocksMatchGeneric).
func blocksGeneric(p *poly32, m []byte, hibit uint32) {
	r0, r1, r2, r3, r4 := p.r0, p.r1, p.r2, p.r3, p.r4
	s1, s2, s3, s4 := p.s1, p.s2, p.s3, p.s4
	h0, h1, h2, h3, h4 := p.h0, p.h1, p.h2, p.h3, p.h4
	for len(m) >= 16 {
		h0 += binary.LittleEndian.Uint32(m[0:]) & 0x3ffffff
		h1 += (binary.LittleEndian.Uint32(m[3:]) >> 2) & 0x3ffffff
		h2 += (binary.LittleEndian.Uint32(m[6:]) >> 4) & 0x3ffffff
		h3 += (binary.LittleEndian.Uint32(m[9:]) >> 6) & 0x3ffffff
		h4 += (binary.LittleEndian.Uint32(m[12:]) >> 8) | hibit
		m = m[16:]

		d0 := uint64(h0)*uint64(r0) + uint64(h1)*uint64(s4) + uint64(h2)*uint64(s3) + uint64(h3)*uint64(s2) + uint64(h4)*uint64(s1)
		d1 := uint64(h0)*uint64(r1) + uint64(h1)*uint64(r0) + uint64(h2)*uint64(s4) + uint64(h3)*uint64(s3) + uint64(h4)*uint64(s2)
		d2 := uint64(h0)*uint64(r2) + uint64(h1)*uint64(r1) + uint64(h2)*uint64(r0) + uint64(h3)*uint64(s4) + uint64(h4)*uint64(s3)
		d3 := uint64(h0)*uint64(r3) + uint64(h1)*uint64(r2) + uint64(h2)*uint64(r1) + uint64(h3)*uint64(r0) + uint64(h4)*uint64(s4)
		d4 := uint64(h0)*uint64(r4) + uint64(h1)*uint64(r3) + uint64(h2)*uint64(r2) + uint64(h3)*uint64(r1) + uint64(h4)*uint64(r0)

		c := uint32(d0 >> 26)
		h0 = uint32(d0) & 0x3ffffff
		d1 += uint64(c)
		c = uint32(d1 >> 26)
		h1 = uint32(d1) & 0x3ffffff
		d2 += uint64(c)
		c = uint32(d2 >> 26)
		h2 = uint32(d2) & 0x3ffffff
		d3 += uint64(c)
		c = uint32(d3 >> 26)
		h3 = uint32(d3) & 0x3ffffff
		d4 += uint64(c)
		c = uint32(d4 >> 26)
		h4 = uint32(d4) & 0x3ffffff
		h0 += c * 5
		c = h0 >> 26
		h0 &= 0x3ffffff
		h1 += c
	}
	p.h0, p.h1, p.h2, p.h3, p.h4 = h0, h1, h2, h3, h4
}

// finish reduces h fully, adds s (the key's second half) and writes the
// tag; the comparisons are constant-time.
func (p *poly32) finish(out *[TagSize]byte, key *[32]byte) {
	h0, h1, h2, h3, h4 := p.h0, p.h1, p.h2, p.h3, p.h4
	c := h1 >> 26
	h1 &= 0x3ffffff
	h2 += c
	c = h2 >> 26
	h2 &= 0x3ffffff
	h3 += c
	c = h3 >> 26
	h3 &= 0x3ffffff
	h4 += c
	c = h4 >> 26
	h4 &= 0x3ffffff
	h0 += c * 5
	c = h0 >> 26
	h0 &= 0x3ffffff
	h1 += c

	// g = h + 5 - 2^130: if it does not borrow, h ≥ p and g is h mod p.
	g0 := h0 + 5
	c = g0 >> 26
	g0 &= 0x3ffffff
	g1 := h1 + c
	c = g1 >> 26
	g1 &= 0x3ffffff
	g2 := h2 + c
	c = g2 >> 26
	g2 &= 0x3ffffff
	g3 := h3 + c
	c = g3 >> 26
	g3 &= 0x3ffffff
	g4 := h4 + c - (1 << 26)
	mask := (g4 >> 31) - 1 // all ones if g4 did not borrow
	h0 = (h0 &^ mask) | (g0 & mask)
	h1 = (h1 &^ mask) | (g1 & mask)
	h2 = (h2 &^ mask) | (g2 & mask)
	h3 = (h3 &^ mask) | (g3 & mask)
	h4 = (h4 &^ mask) | (g4 & mask)

	// h mod 2^128, plus s.
	w0 := h0 | h1<<26
	w1 := h1>>6 | h2<<20
	w2 := h2>>12 | h3<<14
	w3 := h3>>18 | h4<<8
	f := uint64(w0) + uint64(binary.LittleEndian.Uint32(key[16:]))
	binary.LittleEndian.PutUint32(out[0:], uint32(f))
	f = uint64(w1) + uint64(binary.LittleEndian.Uint32(key[20:])) + f>>32
	binary.LittleEndian.PutUint32(out[4:], uint32(f))
	f = uint64(w2) + uint64(binary.LittleEndian.Uint32(key[24:])) + f>>32
	binary.LittleEndian.PutUint32(out[8:], uint32(f))
	f = uint64(w3) + uint64(binary.LittleEndian.Uint32(key[28:])) + f>>32
	binary.LittleEndian.PutUint32(out[12:], uint32(f))
}
