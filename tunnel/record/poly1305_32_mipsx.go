//go:build mips || mipsle

package record

// polyBlocks is poly32.blocks in MIPS32 assembly (poly1305_32_mipsx.s):
// radix 2^32 inside, 19 products per block summed in HI/LO by MADDU,
// against blocksGeneric's 25, each a multiply, two moves and a 64-bit add
// with carry; the state stays in 26-bit limbs between calls.
//
//go:noescape
func polyBlocks(p *poly32, m []byte, hibit uint32)
