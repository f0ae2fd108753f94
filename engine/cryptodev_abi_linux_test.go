package engine

import (
	"runtime"
	"testing"
	"unsafe"
)

// These tests pin the /dev/crypto ABI to the numbers in docs/kernel-notes.md
// ("/dev/crypto (cryptodev-linux) facts"), which were checked in C on each
// architecture. They mean something only when run under each GOARCH:
//
//	for a in arm:qemu-arm-static mipsle:qemu-mipsel-static mips:qemu-mips-static \
//	         arm64:qemu-aarch64-static 386:qemu-i386-static; do
//	  GOARCH=${a%%:*} GOMIPS=softfloat GOARM=7 go test -c -o /tmp/e.${a%%:*} ./engine &&
//	  ${a#*:} /tmp/e.${a%%:*} -test.run 'TestCryptodev(Layout|Ioctl)' -test.v
//	done

// cryptodevLayout is one column of the struct table in docs/kernel-notes.md.
type cryptodevLayout struct {
	sessionOp     [8]uintptr // size, cipher, mac, keylen, key, mackeylen, mackey, ses
	cryptOp       [9]uintptr // size, ses, op, flags, len, src, dst, mac, iv
	sessionInfoOp [6]uintptr // size, ses, cipher_info, hash_info, alignmask, flags
}

var (
	cryptodevLayout64 = cryptodevLayout{
		sessionOp:     [8]uintptr{48, 0, 4, 8, 16, 24, 32, 40},
		cryptOp:       [9]uintptr{48, 0, 4, 6, 8, 16, 24, 32, 40},
		sessionInfoOp: [6]uintptr{268, 0, 4, 132, 260, 264},
	}
	cryptodevLayout32 = cryptodevLayout{
		sessionOp:     [8]uintptr{28, 0, 4, 8, 12, 16, 20, 24},
		cryptOp:       [9]uintptr{28, 0, 4, 6, 8, 12, 16, 20, 24},
		sessionInfoOp: [6]uintptr{268, 0, 4, 132, 260, 264},
	}
)

// cryptodevLayouts maps the GOARCHes of the kernel-notes table to their column.
var cryptodevLayouts = map[string]cryptodevLayout{
	"amd64":  cryptodevLayout64,
	"arm64":  cryptodevLayout64,
	"arm":    cryptodevLayout32,
	"mips":   cryptodevLayout32,
	"mipsle": cryptodevLayout32,
	// 386 is not in the kernel-notes table: i386's ABI aligns u32 and pointers
	// to 4 bytes like arm's, so its layout is the 32-bit column.
	"386": cryptodevLayout32,
}

func TestCryptodevLayout(t *testing.T) {
	want, ok := cryptodevLayouts[runtime.GOARCH]
	if !ok {
		want = cryptodevLayout32
		if unsafe.Sizeof(uintptr(0)) == 8 {
			want = cryptodevLayout64
		}
		t.Logf("%s is not in the kernel-notes table; checking it against the %d-bit column", runtime.GOARCH, 8*unsafe.Sizeof(uintptr(0)))
	}
	var s sessionOp
	var c cryptOp
	var i sessionInfoOp
	got := cryptodevLayout{
		sessionOp: [8]uintptr{unsafe.Sizeof(s), unsafe.Offsetof(s.cipher), unsafe.Offsetof(s.mac),
			unsafe.Offsetof(s.keylen), unsafe.Offsetof(s.key), unsafe.Offsetof(s.mackeylen),
			unsafe.Offsetof(s.mackey), unsafe.Offsetof(s.ses)},
		cryptOp: [9]uintptr{unsafe.Sizeof(c), unsafe.Offsetof(c.ses), unsafe.Offsetof(c.op),
			unsafe.Offsetof(c.flags), unsafe.Offsetof(c.len), unsafe.Offsetof(c.src),
			unsafe.Offsetof(c.dst), unsafe.Offsetof(c.mac), unsafe.Offsetof(c.iv)},
		sessionInfoOp: [6]uintptr{unsafe.Sizeof(i), unsafe.Offsetof(i.ses), unsafe.Offsetof(i.cipherInfo),
			unsafe.Offsetof(i.hashInfo), unsafe.Offsetof(i.alignmask), unsafe.Offsetof(i.flags)},
	}
	if got.sessionOp != want.sessionOp {
		t.Errorf("%s session_op size, offsets = %v, want %v", runtime.GOARCH, got.sessionOp, want.sessionOp)
	}
	if got.cryptOp != want.cryptOp {
		t.Errorf("%s crypt_op size, offsets = %v, want %v", runtime.GOARCH, got.cryptOp, want.cryptOp)
	}
	if got.sessionInfoOp != want.sessionInfoOp {
		t.Errorf("%s session_info_op size, offsets = %v, want %v", runtime.GOARCH, got.sessionInfoOp, want.sessionInfoOp)
	}
	if n := unsafe.Sizeof(algInfo{}); n != 2*cryptodevMaxAlgName {
		t.Errorf("alg_info is %d bytes, want %d", n, 2*cryptodevMaxAlgName)
	}
	t.Logf("%s: session_op %d B, crypt_op %d B, session_info_op %d B", runtime.GOARCH, got.sessionOp[0], got.cryptOp[0], got.sessionInfoOp[0])
}

// cryptodevIoctls is one column of the ioctl table in docs/kernel-notes.md, in the order
// CIOCGSESSION, CIOCFSESSION, CIOCCRYPT, CIOCGSESSINFO, CIOCASYNCCRYPT,
// CIOCASYNCFETCH. offload does not use the async ioctls; they are checked
// because they are the only _IOW with a struct and the only _IOR, so they
// pin down the direction bits.
type cryptodevIoctls [6]uint32

var cryptodevIoctlTable = map[string]cryptodevIoctls{
	"amd64":  {0xc0306366, 0x40046367, 0xc0306368, 0xc10c636b, 0x4030636e, 0x8030636f},
	"arm64":  {0xc0306366, 0x40046367, 0xc0306368, 0xc10c636b, 0x4030636e, 0x8030636f},
	"arm":    {0xc01c6366, 0x40046367, 0xc01c6368, 0xc10c636b, 0x401c636e, 0x801c636f},
	"mips":   {0xc01c6366, 0x80046367, 0xc01c6368, 0xc10c636b, 0x801c636e, 0x401c636f},
	"mipsle": {0xc01c6366, 0x80046367, 0xc01c6368, 0xc10c636b, 0x801c636e, 0x401c636f},
	// 386 is not in the kernel-notes table: asm-generic encoding with the
	// 32-bit struct sizes, the same numbers as arm.
	"386": {0xc01c6366, 0x40046367, 0xc01c6368, 0xc10c636b, 0x401c636e, 0x801c636f},
}

func TestCryptodevIoctlNumbers(t *testing.T) {
	want, ok := cryptodevIoctlTable[runtime.GOARCH]
	if !ok {
		t.Skipf("no reference ioctl numbers for GOARCH=%s in docs/kernel-notes.md", runtime.GOARCH)
	}
	opSize := unsafe.Sizeof(cryptOp{})
	got := cryptodevIoctls{
		ciocGSession, ciocFSession, ciocCrypt, ciocGSessInfo,
		ioc(iocWrite, cryptodevIoctlType, 110, opSize), // _IOW('c', 110, struct crypt_op)
		ioc(iocRead, cryptodevIoctlType, 111, opSize),  // _IOR('c', 111, struct crypt_op)
	}
	names := [...]string{"CIOCGSESSION", "CIOCFSESSION", "CIOCCRYPT", "CIOCGSESSINFO", "CIOCASYNCCRYPT", "CIOCASYNCFETCH"}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s %s = %#08x, want %#08x", runtime.GOARCH, names[i], got[i], want[i])
		}
	}
	t.Logf("%s: CIOCGSESSION %#08x CIOCFSESSION %#08x CIOCCRYPT %#08x CIOCGSESSINFO %#08x", runtime.GOARCH, got[0], got[1], got[2], got[3])
}

// Every struct must fit in the size field of the encoding, or ioc would
// silently spill the size into the direction bits.
func TestCryptodevIoctlSizesFit(t *testing.T) {
	for name, size := range map[string]uintptr{
		"session_op":      unsafe.Sizeof(sessionOp{}),
		"crypt_op":        unsafe.Sizeof(cryptOp{}),
		"session_info_op": unsafe.Sizeof(sessionInfoOp{}),
	} {
		if size >= 1<<iocSizeBits {
			t.Errorf("%s is %d bytes, more than %d size bits hold", name, size, iocSizeBits)
		}
	}
}

func TestCString(t *testing.T) {
	var b [8]byte
	copy(b[:], "cbc-aes\x00")
	if got := cString(b[:]); got != "cbc-aes" {
		t.Errorf("cString = %q", got)
	}
	copy(b[:], "12345678")
	if got := cString(b[:]); got != "12345678" {
		t.Errorf("unterminated cString = %q", got)
	}
	if got := cString(nil); got != "" {
		t.Errorf("cString(nil) = %q", got)
	}
}
