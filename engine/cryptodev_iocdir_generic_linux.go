//go:build linux && !(mips || mipsle || mips64 || mips64le || ppc64 || ppc64le)

package engine

// ioctl direction bits and size width of include/uapi/asm-generic/ioctl.h,
// used by x86, arm, arm64, riscv64, loong64 and s390x.
const (
	iocWrite    = 1
	iocRead     = 2
	iocSizeBits = 14
)
