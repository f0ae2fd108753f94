//go:build linux

package engine

// The fds and system calls of the AF_ALG aead engine, on the helpers of
// afalg_sys_linux.go (sysOp, algSetKey, algAccept, algClose): every fd
// operation comes back as an *os.SyscallError.

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// aeadAlgType is the AF_ALG socket type for AEAD ciphers.
const aeadAlgType = "aead"

// authencKeyParam is CRYPTO_AUTHENC_KEYA_PARAM, the rtattr type of the
// authenc key blob (include/crypto/authenc.h).
const authencKeyParam = 1

// authencKey lays out the key blob authenc's setkey takes: an rtattr
// {u16 rta_len; u16 rta_type} (host order) around
// struct crypto_authenc_key_param {__be32 enckeylen}, then the
// authentication key, then the encryption key.
func authencKey(encKey, macKey []byte) []byte {
	b := make([]byte, 8, 8+len(macKey)+len(encKey))
	binary.NativeEndian.PutUint16(b[0:], 8) // RTA_LENGTH(4)
	binary.NativeEndian.PutUint16(b[2:], authencKeyParam)
	binary.BigEndian.PutUint32(b[4:], uint32(len(encKey)))
	b = append(b, macKey...)
	return append(b, encKey...)
}

// aeadSetAuthsize is setsockopt(fd, SOL_ALG, ALG_SET_AEAD_AUTHSIZE, NULL,
// n): the tag length travels in optlen, with no option value.
func aeadSetAuthsize(fd, n int) error {
	_, err := sysOp("setsockopt", func() (int, error) {
		_, _, errno := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_ALG, unix.ALG_SET_AEAD_AUTHSIZE, 0, uintptr(n), 0)
		if errno != 0 {
			return 0, errno
		}
		return 0, nil
	})
	return err
}

// Control buffer of an aead request: ALG_SET_OP (u32), ALG_SET_IV
// (struct af_alg_iv with 16 bytes) and ALG_SET_AEAD_ASSOCLEN (u32). 88
// bytes on 64-bit platforms, 64 on 32-bit ones (12-byte cmsghdr).
var (
	aeadAssocOff = cmsgOpSpace + cmsgIVSpace
	aeadCtrlSize = aeadAssocOff + unix.CmsgSpace(4)
)

// aeadCtrlWords sizes the control buffer in uint64s (cmsghdr alignment).
const aeadCtrlWords = 12

// aeadOp is one aead operation socket with preallocated sendmsg and readv
// vectors: a request is sendmsg(op, IV, assoclen; aad | data) and
// readv(aad scratch | out), two syscalls and no allocation. It must not
// be copied (msg points into it).
type aeadOp struct {
	algSockets
	msg    unix.Msghdr
	iov    [2]unix.Iovec // sendmsg: aad, data
	riov   [2]unix.Iovec // readv: aad scratch, out
	ctrl   [aeadCtrlWords]uint64
	opData []byte
	ivData []byte
	assoc  []byte
	aadOut [maxAAD]byte // the kernel writes the aad back here

	syscalls uint64
	// fault, set by tests only, is asked before each sendmsg and readv; an
	// errno it returns stands for the syscall's result.
	fault func(syscall string) error
}

// newAEADOp binds name, sets the authenc key and the tag size, and accepts
// an operation socket.
func newAEADOp(name string, key []byte, authsize int) (*aeadOp, error) {
	if aeadCtrlSize > aeadCtrlWords*8 {
		return nil, fmt.Errorf("afalg-aead: control messages need %d bytes, buffer has %d", aeadCtrlSize, aeadCtrlWords*8)
	}
	tfm, fd, err := openOp(aeadAlgType, name, key, func(tfm int) error { return aeadSetAuthsize(tfm, authsize) })
	if err != nil {
		return nil, err
	}
	o := &aeadOp{algSockets: algSockets{tfm: tfm, fd: fd}}
	o.initMsg()
	return o, nil
}

func (o *aeadOp) initMsg() {
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&o.ctrl[0])), aeadCtrlWords*8)
	o.opData, o.ivData = putOpIV(buf)
	as := (*unix.Cmsghdr)(unsafe.Pointer(&buf[aeadAssocOff]))
	as.Level, as.Type = unix.SOL_ALG, unix.ALG_SET_AEAD_ASSOCLEN
	as.SetLen(unix.CmsgLen(4))
	o.assoc = buf[aeadAssocOff+cmsgHdrLen : aeadAssocOff+cmsgHdrLen+4]
	o.msg.Control = &buf[0]
	o.msg.SetControllen(aeadCtrlSize)
	o.msg.Iov = &o.iov[0]
	o.msg.SetIovlen(2)
}

func setIov(v *unix.Iovec, b []byte) {
	if len(b) == 0 {
		v.Base = nil
		v.SetLen(0)
		return
	}
	v.Base = &b[0]
	v.SetLen(len(b))
}

// do runs one request: aad | in goes to the kernel, aad | out comes back.
// out is as long as the kernel's result (ciphertext | tag when sealing,
// plaintext when opening).
func (o *aeadOp) do(encrypt bool, iv, aad, in, out []byte) error {
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
	binary.NativeEndian.PutUint32(o.opData, op)
	copy(o.ivData, iv)
	binary.NativeEndian.PutUint32(o.assoc, uint32(len(aad)))
	setIov(&o.iov[0], aad)
	setIov(&o.iov[1], in)
	defer func() {
		// don't keep the caller's buffers alive
		setIov(&o.iov[0], nil)
		setIov(&o.iov[1], nil)
		setIov(&o.riov[1], nil)
	}()
	if o.fault != nil {
		if err := o.fault("sendmsg"); err != nil {
			return os.NewSyscallError("sendmsg", err)
		}
	}
	n, err := sysOp("sendmsg", func() (int, error) {
		o.syscalls++
		r, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(o.fd), uintptr(unsafe.Pointer(&o.msg)), 0)
		if errno != 0 {
			return 0, errno
		}
		return int(r), nil
	})
	if err != nil {
		return err
	}
	if n != len(aad)+len(in) {
		return fmt.Errorf("afalg-aead: sendmsg queued %d of %d bytes", n, len(aad)+len(in))
	}
	if o.fault != nil {
		if err := o.fault("readv"); err != nil {
			return os.NewSyscallError("readv", err)
		}
	}
	setIov(&o.riov[0], o.aadOut[:len(aad)])
	setIov(&o.riov[1], out)
	n, err = sysOp("readv", func() (int, error) {
		o.syscalls++
		r, _, errno := unix.Syscall(unix.SYS_READV, uintptr(o.fd), uintptr(unsafe.Pointer(&o.riov[0])), 2)
		if errno != 0 {
			return 0, errno
		}
		return int(r), nil
	})
	if err != nil {
		return err
	}
	if n != len(aad)+len(out) {
		return fmt.Errorf("afalg-aead: readv returned %d of %d bytes", n, len(aad)+len(out))
	}
	return nil
}
