package engine

import "unsafe"

// The /dev/crypto ABI of cryptodev-linux (crypto/cryptodev.h, releases up to
// 1.13). The structs are written so that Go's natural alignment gives the C
// layout on every GOARCH: u32 fields, then pointers as uintptr (4 bytes on
// 32-bit, 8 and 8-aligned on 64-bit). cryptodev_abi_linux_test.go checks
// every size and offset against the table in docs/kernel-notes.md, per GOARCH.
//
// Pointer fields are uintptr because the kernel reads them as user
// addresses; the code that fills them pins the Go memory they point to for
// the duration of the ioctl (cryptodev_sys_linux.go).

// Cipher ids of enum cryptodev_crypto_op_t.
const (
	cryptoAESCBC = 11 // CRYPTO_AES_CBC (= CRYPTO_RIJNDAEL128_CBC)
	cryptoAESCTR = 21 // CRYPTO_AES_CTR
	cryptoAESECB = 23 // CRYPTO_AES_ECB (measuring only)
)

// crypt_op.op values.
const (
	copEncrypt = 0 // COP_ENCRYPT
	copDecrypt = 1 // COP_DECRYPT
)

// siopFlagKernelDriverOnly is SIOP_FLAG_KERNEL_DRIVER_ONLY in
// session_info_op.flags: the driver exists only in the kernel (a device),
// i.e. it is neither generic C nor CPU instructions.
const siopFlagKernelDriverOnly = 1

// cryptodevMaxAlgName is CRYPTODEV_MAX_ALG_NAME.
const cryptodevMaxAlgName = 64

// sessionOp is struct session_op, the argument of CIOCGSESSION.
type sessionOp struct {
	cipher    uint32
	mac       uint32
	keylen    uint32
	key       uintptr // __u8 __user *
	mackeylen uint32
	mackey    uintptr // __u8 __user *
	ses       uint32  // out: session id
}

// cryptOp is struct crypt_op, the argument of CIOCCRYPT.
type cryptOp struct {
	ses   uint32
	op    uint16 // copEncrypt or copDecrypt
	flags uint16 // COP_FLAG_*; never COP_FLAG_WRITE_IV
	len   uint32
	src   uintptr // __u8 __user *
	dst   uintptr // __u8 __user *
	mac   uintptr // __u8 __user *
	iv    uintptr // __u8 __user *
}

// algInfo is struct alg_info inside session_info_op.
type algInfo struct {
	craName       [cryptodevMaxAlgName]byte
	craDriverName [cryptodevMaxAlgName]byte
}

// sessionInfoOp is struct session_info_op, the argument of CIOCGSESSINFO.
type sessionInfoOp struct {
	ses        uint32
	cipherInfo algInfo
	hashInfo   algInfo
	alignmask  uint16
	flags      uint32 // SIOP_FLAG_*
}

// The ioctl encoding of the kernel's _IOC macro: nr in bits 0-7, type in
// 8-15, size from bit 16, the direction above the size. The width of the
// size field and the direction values differ by architecture
// (cryptodev_iocdir_*_linux.go).
const (
	iocNRBits    = 8
	iocTypeBits  = 8
	iocNRShift   = 0
	iocTypeShift = iocNRShift + iocNRBits
	iocSizeShift = iocTypeShift + iocTypeBits
	iocDirShift  = iocSizeShift + iocSizeBits
)

// ioc is the kernel's _IOC(dir, type, nr, size).
func ioc(dir, typ, nr, size uintptr) uint32 {
	return uint32(dir<<iocDirShift | size<<iocSizeShift | typ<<iocTypeShift | nr<<iocNRShift)
}

// cryptodevIoctlType is the ioctl type letter of /dev/crypto.
const cryptodevIoctlType = 'c'

// The /dev/crypto requests offload uses, as crypto/cryptodev.h defines them.
var (
	ciocGSession  = ioc(iocRead|iocWrite, cryptodevIoctlType, 102, unsafe.Sizeof(sessionOp{}))     // _IOWR('c', 102, struct session_op)
	ciocFSession  = ioc(iocWrite, cryptodevIoctlType, 103, unsafe.Sizeof(uint32(0)))               // _IOW('c', 103, __u32)
	ciocCrypt     = ioc(iocRead|iocWrite, cryptodevIoctlType, 104, unsafe.Sizeof(cryptOp{}))       // _IOWR('c', 104, struct crypt_op)
	ciocGSessInfo = ioc(iocRead|iocWrite, cryptodevIoctlType, 107, unsafe.Sizeof(sessionInfoOp{})) // _IOWR('c', 107, struct session_info_op)
)

// cString returns the NUL-terminated string at the start of b.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
