//go:build linux && (mips || mipsle || mips64 || mips64le || ppc64 || ppc64le)

package engine

// MIPS (arch/mips/include/uapi/asm/ioctl.h) and PowerPC
// (arch/powerpc/include/uapi/asm/ioctl.h) encode the direction the other way
// round from asm-generic, in 3 bits, and leave 13 bits for the size.
const (
	iocRead     = 2
	iocWrite    = 4
	iocSizeBits = 13
)
