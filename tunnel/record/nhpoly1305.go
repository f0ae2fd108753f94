package record

// The nhpoly1305 suites' frame MAC (docs/macs.md has the security
// argument, docs/protocol.md the same definition for reimplementers):
//
//	K_aes | K_T | K_L | K_N = HKDF-SHA256(secret K_mac, salt none,
//	                          info "offload nhpoly1305 mac keys", 1136 bytes)
//	                          (32, 16, 16 and 1072 bytes, Adiantum's order)
//	H_T  = Poly1305_{K_T}(le64(8·len(frame)) | le64(0))
//	H_L  = Poly1305_{K_L}(NH_{K_N}(pad16(frame)))          NHPoly1305, as Linux's "nhpoly1305"
//	tag  = H_T + H_L + AES-256_{K_aes}(0^64 | seq:u64be)   mod 2^128, all little-endian
//
// frame is hdr:u32be | ciphertext as on the wire. Poly1305_K(m) here is
// the polynomial part only: r = K clamped, h = Σ (m_i + 2^128)·r^(n−i+1)
// mod 2^130−5 over 16-byte blocks m_1..m_n, reduced mod 2^128, no s added.
// NH_{K_N}(M) splits M (a multiple of 16 bytes) into 1024-byte chunks, the
// last possibly shorter, and gives 32 bytes per chunk: four passes
// p = 0..3, each the sum mod 2^64 over the chunk's 16-byte units u of
// (m0+k[4u+4p])·(m2+k[4u+4p+2]) + (m1+k[4u+4p+1])·(m3+k[4u+4p+3]), where
// m0..m3 are the unit's little-endian u32 words, k the words of K_N and the
// additions are mod 2^32; written as le64 each. H_T + H_L is Adiantum's
// hash H(T, L) with an empty tweak T and L = frame.

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unsafe"

	"github.com/offload-dev/offload/tunnel/suite"
)

// NH's parameters as Adiantum and Linux's crypto/nhpoly1305.c fix them.
const (
	nhUnit         = 16   // bytes per step: NH_PAIR_STRIDE 2, two pairs of u32
	nhPasses       = 4    // NH_NUM_PASSES: 4 × 2^-32, for 2^-128
	nhMessageBytes = 1024 // NH_MESSAGE_BYTES: one chunk per NH hash
	nhHashBytes    = 8 * nhPasses
	// nhKeyWords is NH_KEY_WORDS: a chunk's words plus 4 more per extra
	// pass (the Toeplitz shift), 1072 bytes.
	nhKeyWords = nhMessageBytes/4 + 4*(nhPasses-1)
	nhKeyBytes = 4 * nhKeyWords

	// nhMACKeyBytes is what HKDF expands K_mac into: K_aes, K_T, K_L, K_N.
	nhMACKeyBytes = 32 + 16 + 16 + nhKeyBytes
	nhMACInfo     = "offload nhpoly1305 mac keys"
)

// nhAdd adds NH of msg (a multiple of nhUnit bytes, at most
// nhMessageBytes) under key, which starts at msg's offset in its chunk, to
// s. On 32-bit CPUs every product is one 32×32→64 multiply (MULTU, UMULL)
// and the sums are 64-bit adds with a carry; that is a third of the
// multiplies Poly1305 needs per byte.
func nhAdd(s *[nhPasses]uint64, key []uint32, msg []byte) {
	if nativeLE && uintptr(unsafe.Pointer(unsafe.SliceData(msg)))&3 == 0 {
		// Go on MIPS and ARM assembles a little-endian u32 from four byte
		// loads, a quarter of NH's instructions; an aligned frame on a
		// little-endian CPU can be read a word at a time.
		nhAddWords(s, key, unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(msg))), len(msg)/4))
		return
	}
	// Unaligned (or big-endian): decode the chunk into words first.
	var w [nhMessageBytes / 4]uint32
	n := len(msg) / 4
	for i := range w[:n] {
		w[i] = binary.LittleEndian.Uint32(msg[4*i:])
	}
	nhAddWords(s, key, w[:n])
}

// nhAddWords is nhAdd on a message already in native (little-endian)
// words. The pass sums are the only state carried between units, so each
// unit's key words are loaded, used and dropped: on MIPS nothing spills.
// Two units per step (then at most one) halve the loop's own instructions:
// ~1.3x under qemu-mipsel. The unit is written out in both loops because a
// helper for it is over Go's inlining budget, and the call cost 1.8x.
func nhAddWords(s *[nhPasses]uint64, key, msg []uint32) {
	s0, s1, s2, s3 := s[0], s[1], s[2], s[3]
	for len(msg) >= 8 {
		k := (*[20]uint32)(key[:20])
		m := (*[8]uint32)(msg[:8])
		m0, m1, m2, m3 := m[0], m[1], m[2], m[3]
		s0 += uint64(m0+k[0])*uint64(m2+k[2]) + uint64(m1+k[1])*uint64(m3+k[3])
		s1 += uint64(m0+k[4])*uint64(m2+k[6]) + uint64(m1+k[5])*uint64(m3+k[7])
		s2 += uint64(m0+k[8])*uint64(m2+k[10]) + uint64(m1+k[9])*uint64(m3+k[11])
		s3 += uint64(m0+k[12])*uint64(m2+k[14]) + uint64(m1+k[13])*uint64(m3+k[15])
		m0, m1, m2, m3 = m[4], m[5], m[6], m[7]
		s0 += uint64(m0+k[4])*uint64(m2+k[6]) + uint64(m1+k[5])*uint64(m3+k[7])
		s1 += uint64(m0+k[8])*uint64(m2+k[10]) + uint64(m1+k[9])*uint64(m3+k[11])
		s2 += uint64(m0+k[12])*uint64(m2+k[14]) + uint64(m1+k[13])*uint64(m3+k[15])
		s3 += uint64(m0+k[16])*uint64(m2+k[18]) + uint64(m1+k[17])*uint64(m3+k[19])
		key = key[8:]
		msg = msg[8:]
	}
	for len(msg) >= 4 {
		k := (*[16]uint32)(key[:16])
		m := (*[4]uint32)(msg[:4])
		m0, m1, m2, m3 := m[0], m[1], m[2], m[3]
		s0 += uint64(m0+k[0])*uint64(m2+k[2]) + uint64(m1+k[1])*uint64(m3+k[3])
		s1 += uint64(m0+k[4])*uint64(m2+k[6]) + uint64(m1+k[5])*uint64(m3+k[7])
		s2 += uint64(m0+k[8])*uint64(m2+k[10]) + uint64(m1+k[9])*uint64(m3+k[11])
		s3 += uint64(m0+k[12])*uint64(m2+k[14]) + uint64(m1+k[13])*uint64(m3+k[15])
		key = key[4:]
		msg = msg[4:]
	}
	s[0], s[1], s[2], s[3] = s0, s1, s2, s3
}

// nativeLE says whether this CPU stores words little-endian, as NH reads them.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// nhPoly1305 is NHPoly1305 under one key, as Linux's crypto/nhpoly1305.c
// (the "nhpoly1305" shash) computes it.
type nhPoly1305 struct {
	polyKey [32]byte // K_L, then 16 zero bytes: no s
	nhKey   [nhKeyWords]uint32
}

// setKey takes the kernel's 1088-byte key layout: K_L (the Poly1305 r,
// clamped on use), then K_N as little-endian u32 words.
func (h *nhPoly1305) setKey(key []byte) {
	copy(h.polyKey[:16], key[:16])
	for i := range h.nhKey {
		h.nhKey[i] = binary.LittleEndian.Uint32(key[16+4*i:])
	}
}

// hash absorbs NHPoly1305's Poly1305 input for msg into p (initialised
// with polyKey): msg zero-padded to 16 bytes, in 1024-byte chunks.
func (h *nhPoly1305) hash(p *poly32, msg []byte) {
	var out [nhHashBytes]byte
	for len(msg) > 0 {
		n := min(len(msg), nhMessageBytes)
		var s [nhPasses]uint64
		full := n &^ (nhUnit - 1)
		nhAdd(&s, h.nhKey[:], msg[:full])
		if full < n {
			var last [nhUnit]byte
			copy(last[:], msg[full:n])
			nhAdd(&s, h.nhKey[full/4:], last[:])
		}
		for i, v := range s {
			binary.LittleEndian.PutUint64(out[8*i:], v)
		}
		p.blocks(out[:], 1<<24)
		msg = msg[n:]
	}
}

// sum writes NHPoly1305(msg) into out: the kernel's digest.
func (h *nhPoly1305) sum(out *[16]byte, msg []byte) {
	var p poly32
	p.init(&h.polyKey)
	h.hash(&p, msg)
	p.finish(out, &h.polyKey)
}

// nhMAC is the nhpoly1305 suites' frame MAC (the definition at the top of
// this file). The hash key is reused for every frame of the epoch; the
// AES-encrypted seq is the one-time pad that hides it (Wegman–Carter–
// Shoup), so a frame costs one AES block beyond the hash.
type nhMAC struct {
	aes  cipher.Block
	lenK [32]byte // K_T, then zeros
	nh   nhPoly1305
	pad  [32]byte // zeros, then H_T + AES(nonce): finish's "s"
	blk  [16]byte
	want [TagSize]byte
}

func newNHMAC(kmac []byte) (*nhMAC, error) {
	okm, err := hkdf.Key(sha256.New, kmac, nil, nhMACInfo, nhMACKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("record: nhpoly1305 subkeys: %w", err)
	}
	defer clear(okm)
	b, err := aes.NewCipher(okm[:32])
	if err != nil {
		return nil, fmt.Errorf("record: nhpoly1305: %w", err)
	}
	m := &nhMAC{aes: b}
	copy(m.lenK[:16], okm[32:48])
	m.nh.setKey(okm[48:])
	return m, nil
}

func (m *nhMAC) MAC() suite.MAC { return suite.NHPoly1305 }

func (m *nhMAC) Sum(tag *[TagSize]byte, seq uint64, frame []byte) {
	// AES_{K_aes}(0^64 | seq:u64be), the frame's pad.
	clear(m.blk[:8])
	binary.BigEndian.PutUint64(m.blk[8:], seq)
	m.aes.Encrypt(m.blk[:], m.blk[:])

	// H_T: one Poly1305 block, the frame's length in bits.
	var p poly32
	var ht [16]byte
	p.init(&m.lenK)
	var lb [16]byte
	binary.LittleEndian.PutUint64(lb[:8], 8*uint64(len(frame)))
	p.blocks(lb[:], 1<<24)
	p.finish(&ht, &m.lenK)

	// pad = H_T + AES(nonce) mod 2^128; finish adds it to H_L.
	lo, c := bits.Add64(binary.LittleEndian.Uint64(ht[:8]), binary.LittleEndian.Uint64(m.blk[:8]), 0)
	hi, _ := bits.Add64(binary.LittleEndian.Uint64(ht[8:]), binary.LittleEndian.Uint64(m.blk[8:]), c)
	binary.LittleEndian.PutUint64(m.pad[16:], lo)
	binary.LittleEndian.PutUint64(m.pad[24:], hi)

	p.init(&m.nh.polyKey)
	m.nh.hash(&p, frame)
	p.finish(tag, &m.pad)
}

func (m *nhMAC) Verify(tag []byte, seq uint64, frame []byte) bool {
	m.Sum(&m.want, seq, frame)
	return subtle.ConstantTimeCompare(m.want[:], tag) == 1
}
