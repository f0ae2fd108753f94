//go:build mips || mipsle

#include "go_asm.h"
#include "textflag.h"

// polyBlocks: Poly1305 blocks for MIPS32 Release 1 (the routers' 4Kc and
// 24Kc). The loop works in radix 2^32, h = h0 + h1·2^32 + h2·2^64 +
// h3·2^96 + h4·2^128 with h4 a few bits: 4×4 products plus three of h4,
// against the 25 of five 26-bit limbs, each summed in HI/LO by MADDU.
// The clamp makes that safe: r0..r3 < 2^28 and r1..r3 divisible by 4, so
// r_j·2^128 ≡ 5·r_j/4 = s_j (mod 2^130-5), s_j < 2^29, and five products
// of a 32-bit word with r or s stay under 2^63. The poly32 struct keeps
// its 26-bit limbs (blocksGeneric, finish): they are converted on entry
// and back on exit, a few dozen instructions per call.
//
// Per block, with d_i summed in HI/LO and the high word of each the first
// addend of the next:
//	h += m + hibit·2^128
//	d0 = h0·r0 + h1·s3 + h2·s2 + h3·s1
//	d1 = h0·r1 + h1·r0 + h2·s3 + h3·s2 + h4·s1 + d0>>32
//	d2 = h0·r2 + h1·r1 + h2·r0 + h3·s3 + h4·s2 + d1>>32
//	d3 = h0·r3 + h1·r2 + h2·r1 + h3·r0 + h4·s3 + d2>>32
//	d4 = h4·r0 + d3>>32 (< 2^32: h4 ≤ 7 and d3 < 2^62)
//	h = d0..d3 (low words) + (d4&3)·2^128 + 5·(d4>>2)
//
// Registers: R2 m, R3 end of m, R5 hibit as 0 or 1, R6-R10 h0-h4, R11-R14
// r0-r3, R15-R17 s1-s3, R18-R21 the message words; R1, R4 scratch; when m
// is unaligned R22 and R24 the shifts, R25 the previous word. R23 is the
// assembler's, R28-R31 the runtime's.
//
// The message words are loaded with LW; when m is not 4-byte aligned
// (frames start anywhere) each is two aligned words shifted together. On
// big-endian mips each word is byte-swapped (MIPS32r1 has no WSBH).

// Go's assembler has MADD but not MADDU: HI|LO += rs·rt, unsigned.
#define MADDU(rs, rt) WORD $(0x70000001 | ((rs)<<21) | ((rt)<<16))

#ifdef GOARCH_mips
// BSWAP(w): w = bytes of w reversed, with R1 and R4 as scratch.
#define BSWAP(w) \
	SLL	$24, w, R1; \
	SRL	$24, w, R4; \
	OR	R4, R1; \
	AND	$0xff00, w, R4; \
	SLL	$8, R4; \
	OR	R4, R1; \
	SRL	$8, w, R4; \
	AND	$0xff00, R4; \
	OR	R4, R1, w
#define LE1(w) BSWAP(w)
#define LE4 BSWAP(R18); BSWAP(R19); BSWAP(R20); BSWAP(R21)
#else
#define LE1(w)
#define LE4
#endif

// ADDC(x, h): h += x + R1 (the carry in, 0 or 1); R1 = the carry out.
// Only one of the two additions can wrap.
#define ADDC(x, h) \
	ADDU	x, h; \
	SGTU	x, h, R4; \
	ADDU	R1, h; \
	SGTU	R1, h, R1; \
	OR	R4, R1

// NEXT(h): h = LO, the low word of d_i; HI:LO = d_i>>32.
#define NEXT(h) \
	MOVW	LO, h; \
	MOVW	HI, R1; \
	MOVW	R1, LO; \
	MOVW	R0, HI

// BLOCK absorbs the message words in R18-R21 (little-endian values).
#define BLOCK \
	ADDU	R18, R6; \
	SGTU	R18, R6, R1; \
	ADDC(R19, R7); \
	ADDC(R20, R8); \
	ADDC(R21, R9); \
	ADDU	R1, R10; \
	ADDU	R5, R10; \
	MULU	R6, R11; \
	MADDU(7, 17); \
	MADDU(8, 16); \
	MADDU(9, 15); \
	NEXT(R18); \
	MADDU(6, 12); \
	MADDU(7, 11); \
	MADDU(8, 17); \
	MADDU(9, 16); \
	MADDU(10, 15); \
	NEXT(R19); \
	MADDU(6, 13); \
	MADDU(7, 12); \
	MADDU(8, 11); \
	MADDU(9, 17); \
	MADDU(10, 16); \
	NEXT(R20); \
	MADDU(6, 14); \
	MADDU(7, 13); \
	MADDU(8, 12); \
	MADDU(9, 11); \
	MADDU(10, 17); \
	MOVW	LO, R21; \
	MOVW	HI, R1; \
	MUL	R10, R11, R4; \
	ADDU	R1, R4; \
	AND	$3, R4, R10; \
	SRL	$2, R4, R1; \
	SUBU	R10, R4; \
	ADDU	R1, R4; \
	ADDU	R4, R18, R6; \
	SGTU	R4, R6, R1; \
	ADDU	R1, R19, R7; \
	SGTU	R1, R7, R1; \
	ADDU	R1, R20, R8; \
	SGTU	R1, R8, R1; \
	ADDU	R1, R21, R9; \
	SGTU	R1, R9, R1; \
	ADDU	R1, R10

// func polyBlocks(p *poly32, m []byte, hibit uint32)
TEXT ·polyBlocks(SB), NOSPLIT, $0-20
	MOVW	m_base+4(FP), R2
	MOVW	m_len+8(FP), R3
	SRL	$4, R3
	SLL	$4, R3
	BEQ	R3, done
	ADDU	R2, R3
	MOVW	hibit+16(FP), R5
	SRL	$24, R5
	MOVW	p+0(FP), R25

	// r in radix 2^32 from the clamped 26-bit limbs (disjoint bits), s.
	MOVW	poly32_r0(R25), R11
	MOVW	poly32_r1(R25), R12
	MOVW	poly32_r2(R25), R13
	MOVW	poly32_r3(R25), R14
	MOVW	poly32_r4(R25), R1
	SLL	$26, R12, R4
	OR	R4, R11
	SRL	$6, R12
	SLL	$20, R13, R4
	OR	R4, R12
	SRL	$12, R13
	SLL	$14, R14, R4
	OR	R4, R13
	SRL	$18, R14
	SLL	$8, R1
	OR	R1, R14
	SRL	$2, R12, R15
	ADDU	R12, R15
	SRL	$2, R13, R16
	ADDU	R13, R16
	SRL	$2, R14, R17
	ADDU	R14, R17

	// h in radix 2^32: the limbs' sum, exact whatever their size.
	MOVW	poly32_h0(R25), R6
	MOVW	poly32_h1(R25), R18
	MOVW	poly32_h2(R25), R19
	MOVW	poly32_h3(R25), R20
	MOVW	poly32_h4(R25), R21
	SLL	$26, R18, R4
	ADDU	R4, R6
	SGTU	R4, R6, R1
	SRL	$6, R18, R7
	ADDU	R1, R7
	SLL	$20, R19, R4
	ADDU	R4, R7
	SGTU	R4, R7, R1
	SRL	$12, R19, R8
	ADDU	R1, R8
	SLL	$14, R20, R4
	ADDU	R4, R8
	SGTU	R4, R8, R1
	SRL	$18, R20, R9
	ADDU	R1, R9
	SLL	$8, R21, R4
	ADDU	R4, R9
	SGTU	R4, R9, R1
	SRL	$24, R21, R10
	ADDU	R1, R10

	AND	$3, R2, R4
	BNE	R4, unaligned

aligned:
	MOVW	0(R2), R18
	MOVW	4(R2), R19
	MOVW	8(R2), R20
	MOVW	12(R2), R21
	LE4
	BLOCK
	ADDU	$16, R2
	BNE	R2, R3, aligned
	JMP	store

unaligned:
	// Aligned loads shifted together: word i of the block is
	// x[i]>>sh | x[i+1]<<(32-sh) with x the aligned words from m&^3 and
	// sh = 8·(m&3). Only the aligned words that hold m's bytes are read
	// (no fault past its ends). Under qemu this costs half what LWL/LWR
	// pairs do.
	SLL	$3, R4, R22
	MOVW	$32, R24
	SUBU	R22, R24
	SUBU	R4, R2
	SUBU	R4, R3
	MOVW	0(R2), R25
	LE1(R25)

unaligned_loop:
	MOVW	4(R2), R18
	MOVW	8(R2), R19
	MOVW	12(R2), R20
	MOVW	16(R2), R21
	LE4
	MOVW	R21, R4
	SLL	R24, R21
	SRL	R22, R20, R1
	OR	R1, R21
	SLL	R24, R20
	SRL	R22, R19, R1
	OR	R1, R20
	SLL	R24, R19
	SRL	R22, R18, R1
	OR	R1, R19
	SLL	R24, R18
	SRL	R22, R25, R1
	OR	R1, R18
	MOVW	R4, R25
	BLOCK
	ADDU	$16, R2
	BNE	R2, R3, unaligned_loop

store:
	// Back to 26-bit limbs; h4 < 2^27 (h4 here ≤ 4).
	MOVW	p+0(FP), R25
	MOVW	$0x3ffffff, R24
	AND	R24, R6, R1
	MOVW	R1, poly32_h0(R25)
	SRL	$26, R6
	SLL	$6, R7, R1
	OR	R1, R6
	AND	R24, R6
	MOVW	R6, poly32_h1(R25)
	SRL	$20, R7
	SLL	$12, R8, R1
	OR	R1, R7
	AND	R24, R7
	MOVW	R7, poly32_h2(R25)
	SRL	$14, R8
	SLL	$18, R9, R1
	OR	R1, R8
	AND	R24, R8
	MOVW	R8, poly32_h3(R25)
	SRL	$8, R9
	SLL	$24, R10
	OR	R10, R9
	MOVW	R9, poly32_h4(R25)

done:
	RET
