//go:build linux

package engine

// This file owns every file descriptor and system call of the AF_ALG engine
// (the mdlayher/socket pattern): each fd operation goes through sysOp and
// comes back as an *os.SyscallError; afalg_linux.go is plain Go on top.

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxEINTR bounds how often one syscall is restarted after EINTR. Go
// installs its handlers with SA_RESTART, so the kernel restarts AF_ALG
// waits itself; an EINTR that still reaches us is rare, and a loop of them
// means something is wrong.
const maxEINTR = 8

// algType is the AF_ALG socket type for symmetric ciphers.
const algType = "skcipher"

// maxAlgName is the longest name sockaddr_alg can carry (salg_name is 64
// bytes, NUL included).
const maxAlgName = 63

// sysOp runs one system call, restarting it on EINTR (bounded), and names
// the failure with os.NewSyscallError(op, errno).
func sysOp(op string, f func() (int, error)) (int, error) {
	for i := 0; ; i++ {
		n, err := f()
		if err == nil {
			return n, nil
		}
		if err == unix.EINTR && i < maxEINTR {
			continue
		}
		return n, os.NewSyscallError(op, err)
	}
}

// algSocket opens an AF_ALG socket of type typ ("skcipher", "aead") and
// binds it to name, an algorithm ("cbc(aes)") or driver ("cbc-aes-aesni")
// name. The caller closes the returned fd.
func algSocket(typ, name string) (int, error) {
	fd, err := sysOp("socket", func() (int, error) {
		return unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	})
	if err != nil {
		return -1, err
	}
	if len(name) > maxAlgName {
		algClose(fd)
		return -1, os.NewSyscallError("bind", unix.ENAMETOOLONG)
	}
	_, err = sysOp("bind", func() (int, error) {
		return 0, unix.Bind(fd, &unix.SockaddrALG{Type: typ, Name: name})
	})
	if err != nil {
		algClose(fd)
		return -1, err
	}
	return fd, nil
}

// algProbe reports whether socket(AF_ALG) works at all.
func algProbe() error {
	fd, err := sysOp("socket", func() (int, error) {
		return unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	})
	if err == nil {
		algClose(fd)
	}
	return err
}

func algSetKey(fd int, key []byte) error {
	_, err := sysOp("setsockopt", func() (int, error) {
		return 0, unix.SetsockoptString(fd, unix.SOL_ALG, unix.ALG_SET_KEY, string(key))
	})
	return err
}

// algAccept makes an operation socket from a bound, keyed socket. It is a
// raw accept4(fd, NULL, NULL): unix.Accept wants a peer address, which
// AF_ALG has not, and fails with ECONNABORTED.
func algAccept(fd int) (int, error) {
	return sysOp("accept4", func() (int, error) {
		r, _, errno := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), 0, 0, unix.SOCK_CLOEXEC, 0, 0)
		if errno != 0 {
			return -1, errno
		}
		return int(r), nil
	})
}

func algClose(fd int) error {
	_, err := sysOp("close", func() (int, error) { return 0, unix.Close(fd) })
	return err
}

// Control buffer layout, derived from the platform's cmsghdr (16 bytes on
// 64-bit, 12 on 32-bit arm and mips): an ALG_SET_OP message carrying a u32,
// then an ALG_SET_IV message carrying struct af_alg_iv {u32 ivlen; u8 iv[16]}.
var (
	cmsgHdrLen   = unix.CmsgLen(0)
	cmsgOpSpace  = unix.CmsgSpace(4)
	cmsgIVSpace  = unix.CmsgSpace(4 + BlockSize)
	cmsgCtrlSize = cmsgOpSpace + cmsgIVSpace
)

// ctrlWords sizes the control buffer in uint64s (for cmsghdr alignment):
// 64 bytes, exactly what 64-bit platforms need; 32-bit ones need 48.
const ctrlWords = 8

// algOp is one AF_ALG operation socket with its preallocated sendmsg
// header, so that a request costs no allocation: sendmsg(op, IV, data) and
// read(dst), two syscalls. It must not be copied (msg points into it).
type algOp struct {
	algSockets
	msg    unix.Msghdr
	iov    unix.Iovec
	ctrl   [ctrlWords]uint64
	opData []byte // the u32 of ALG_SET_OP, inside ctrl
	ivData []byte // the 16 IV bytes of ALG_SET_IV, inside ctrl

	// syscalls counts the syscalls of send and recv (tests check the
	// per-request budget).
	syscalls uint64
	// fault, set by tests only, is asked before each sendmsg and read; an
	// errno it returns stands for the syscall's result.
	fault func(syscall string) error
}

// openOp binds a socket of type typ to name, sets key, runs setup on it
// (more socket options) and accepts an operation socket: the keyed
// transform socket and the operation socket, or an error with nothing
// left open.
func openOp(typ, name string, key []byte, setup func(tfm int) error) (tfm, fd int, err error) {
	if tfm, err = algSocket(typ, name); err != nil {
		return -1, -1, err
	}
	if err = algSetKey(tfm, key); err == nil && setup != nil {
		err = setup(tfm)
	}
	if err == nil {
		fd, err = algAccept(tfm)
	}
	if err != nil {
		algClose(tfm)
		return -1, -1, err
	}
	return tfm, fd, nil
}

// putOpIV lays out, at the start of buf, the ALG_SET_OP control message
// (a u32) and the ALG_SET_IV one (struct af_alg_iv with a 16-byte IV), and
// returns where the op value and the IV go; both request kinds start their
// control data with these two.
func putOpIV(buf []byte) (opData, ivData []byte) {
	op := (*unix.Cmsghdr)(unsafe.Pointer(&buf[0]))
	op.Level, op.Type = unix.SOL_ALG, unix.ALG_SET_OP
	op.SetLen(unix.CmsgLen(4))
	iv := (*unix.Cmsghdr)(unsafe.Pointer(&buf[cmsgOpSpace]))
	iv.Level, iv.Type = unix.SOL_ALG, unix.ALG_SET_IV
	iv.SetLen(unix.CmsgLen(4 + BlockSize))
	ivlen := buf[cmsgOpSpace+cmsgHdrLen:]
	binary.NativeEndian.PutUint32(ivlen, BlockSize)
	return buf[cmsgHdrLen : cmsgHdrLen+4], ivlen[4 : 4+BlockSize]
}

// newAlgOp binds name, sets key and accepts an operation socket. withIV
// false leaves ALG_SET_IV out of every request, for algorithms without an
// IV (ecb(aes)): the kernel refuses an IV whose length is not the
// algorithm's with EINVAL.
func newAlgOp(name string, key []byte, withIV bool) (*algOp, error) {
	if cmsgCtrlSize > ctrlWords*8 {
		return nil, fmt.Errorf("afalg: control messages need %d bytes, buffer has %d", cmsgCtrlSize, ctrlWords*8)
	}
	tfm, fd, err := openOp(algType, name, key, nil)
	if err != nil {
		return nil, err
	}
	o := &algOp{algSockets: algSockets{tfm: tfm, fd: fd}}
	o.initMsg()
	if !withIV {
		o.dropIV()
	}
	return o, nil
}

// dropIV shortens the control data to the ALG_SET_OP message alone.
func (o *algOp) dropIV() { o.msg.SetControllen(cmsgOpSpace) }

// initMsg lays out the sendmsg header and the two control messages; only
// the op value, the IV bytes and the iovec change per request.
func (o *algOp) initMsg() {
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&o.ctrl[0])), ctrlWords*8)
	o.opData, o.ivData = putOpIV(buf)
	o.msg.Control = &buf[0]
	o.msg.SetControllen(cmsgCtrlSize)
	o.msg.Iov = &o.iov
	o.msg.SetIovlen(1)
}

// send queues one whole request: ALG_SET_OP, ALG_SET_IV and src in a single
// sendmsg without MSG_MORE. src must not be empty.
func (o *algOp) send(encrypt bool, iv, src []byte) error {
	if o.fd < 0 {
		fd, err := algAccept(o.tfm)
		o.syscalls++
		if err != nil {
			return err
		}
		o.fd = fd
	}
	op := uint32(unix.ALG_OP_DECRYPT)
	if encrypt {
		op = unix.ALG_OP_ENCRYPT
	}
	if o.fault != nil {
		if err := o.fault("sendmsg"); err != nil {
			return os.NewSyscallError("sendmsg", err)
		}
	}
	binary.NativeEndian.PutUint32(o.opData, op)
	copy(o.ivData, iv)
	o.iov.Base = &src[0]
	o.iov.SetLen(len(src))
	n, err := sysOp("sendmsg", func() (int, error) {
		o.syscalls++
		r, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(o.fd), uintptr(unsafe.Pointer(&o.msg)), 0)
		if errno != 0 {
			return 0, errno
		}
		return int(r), nil
	})
	o.iov.Base = nil // don't keep the caller's buffer alive
	if err != nil {
		return err
	}
	if n != len(src) {
		return fmt.Errorf("afalg: sendmsg queued %d of %d bytes", n, len(src))
	}
	return nil
}

// recv reads the result of the queued request into dst, which must be as
// long as the request.
func (o *algOp) recv(dst []byte) error {
	if o.fault != nil {
		if err := o.fault("read"); err != nil {
			return os.NewSyscallError("read", err)
		}
	}
	for done := 0; done < len(dst); {
		n, err := sysOp("read", func() (int, error) {
			o.syscalls++
			return unix.Read(o.fd, dst[done:])
		})
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("afalg: read %d of %d bytes: %w", done, len(dst), io.ErrUnexpectedEOF)
		}
		done += n
	}
	return nil
}

// algSockets are a request socket pair: the bound, keyed transform socket
// and the operation socket accepted from it.
type algSockets struct {
	tfm int // bound and keyed; kept to accept a fresh op socket
	fd  int // operation socket, -1 until accepted
}

// reset drops the operation socket and whatever the kernel still holds for
// it; the next request accepts a fresh one from the keyed socket.
func (o *algSockets) reset() {
	if o.fd >= 0 {
		algClose(o.fd)
		o.fd = -1
	}
}

// close releases both sockets.
func (o *algSockets) close() error {
	o.reset()
	if o.tfm < 0 {
		return nil
	}
	err := algClose(o.tfm)
	o.tfm = -1
	return err
}
