//go:build !mips && !mipsle

package record

// polyBlocks is poly32.blocks on CPUs without the assembly.
func polyBlocks(p *poly32, m []byte, hibit uint32) { blocksGeneric(p, m, hibit) }
