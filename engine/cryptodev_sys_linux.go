package engine

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// This file is the only one of the cryptodev engine that touches the file
// descriptor: open, the four ioctls, close. Every failure comes back as an
// *os.PathError or *os.SyscallError around the errno; cryptodev_linux.go
// maps them to the engine's errors.

// cryptodevPath is the device node cryptodev-linux registers.
const cryptodevPath = "/dev/crypto"

// cryptodevRetries bounds how many times one open or ioctl is repeated after
// EINTR, EAGAIN or EBUSY. cryptodev waits for a request's completion
// uninterruptibly (cryptlib.c, waitfor), so these errors come before the
// kernel touched the buffers and a repeat is safe, in place too.
const cryptodevRetries = 8

// cryptodevRetryBackoff is the first pause before repeating after EAGAIN or
// EBUSY (a device queue that is full); it doubles per attempt, so the worst
// case stays around 13 ms. EINTR is repeated at once.
const cryptodevRetryBackoff = 50 * time.Microsecond

// cryptodevFD is one open /dev/crypto. It is not safe for concurrent use.
type cryptodevFD struct {
	fd  int
	log *zap.Logger
	// pin keeps the buffers whose addresses sit inside the ioctl structs in
	// place for the duration of the call (reused: it caches its state).
	pin runtime.Pinner
}

func openCryptodev(path string, log *zap.Logger) (*cryptodevFD, error) {
	for attempt := 0; ; attempt++ {
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err == nil {
			return &cryptodevFD{fd: fd, log: log}, nil
		}
		if !cryptodevRetry(log, "open", err, attempt) {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
}

// cryptodevRetry reports whether a call that failed with err on the given
// attempt (0 for the first) should be made again, after pausing if needed.
func cryptodevRetry(log *zap.Logger, op string, err error, attempt int) bool {
	if attempt >= cryptodevRetries {
		return false
	}
	switch {
	case errors.Is(err, unix.EINTR):
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EBUSY):
		time.Sleep(cryptodevRetryBackoff << attempt)
	default:
		return false
	}
	if ce := log.Check(zapcore.DebugLevel, "retrying"); ce != nil {
		ce.Write(zap.String("op", op), zap.Error(err), zap.Int("attempt", attempt+1))
	}
	return true
}

// ioctl issues one request. arg points to the request's struct; the
// conversion to uintptr happens in the Syscall expression itself, so the
// runtime keeps that struct alive and in place for the call.
func (f *cryptodevFD) ioctl(name string, req uint32, arg unsafe.Pointer) error {
	for attempt := 0; ; attempt++ {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(f.fd), uintptr(req), uintptr(arg))
		if errno == 0 {
			return nil
		}
		if !cryptodevRetry(f.log, name, errno, attempt) {
			return os.NewSyscallError("ioctl "+name, errno)
		}
	}
}

// newSession creates a cipher session (CIOCGSESSION) keyed with key.
func (f *cryptodevFD) newSession(cipher uint32, key []byte) (uint32, error) {
	if len(key) == 0 {
		return 0, fmt.Errorf("cryptodev: empty key")
	}
	f.pin.Pin(&key[0])
	defer f.pin.Unpin()
	sop := sessionOp{
		cipher: cipher,
		keylen: uint32(len(key)),
		key:    uintptr(unsafe.Pointer(&key[0])),
	}
	err := f.ioctl("CIOCGSESSION", ciocGSession, unsafe.Pointer(&sop))
	runtime.KeepAlive(key)
	if err != nil {
		return 0, err
	}
	return sop.ses, nil
}

// sessionInfo asks which kernel driver serves session ses (CIOCGSESSINFO).
func (f *cryptodevFD) sessionInfo(ses uint32) (*sessionInfoOp, error) {
	info := &sessionInfoOp{ses: ses}
	if err := f.ioctl("CIOCGSESSINFO", ciocGSessInfo, unsafe.Pointer(info)); err != nil {
		return nil, err
	}
	return info, nil
}

// crypt runs one request (CIOCCRYPT) over src into dst, which have the same
// length (at least 1) and are either the same buffer or disjoint, with the
// 16-byte iv. The kernel reads iv and does not write it back: the request
// carries no COP_FLAG_WRITE_IV.
func (f *cryptodevFD) crypt(ses uint32, op uint16, dst, src, iv []byte) error {
	if len(src) == 0 || len(dst) != len(src) || len(iv) != BlockSize {
		return fmt.Errorf("cryptodev: crypt with dst %d, src %d, iv %d bytes", len(dst), len(src), len(iv))
	}
	if uint64(len(src)) > math.MaxUint32 {
		return fmt.Errorf("cryptodev: request of %d bytes exceeds crypt_op.len", len(src))
	}
	f.pin.Pin(&src[0])
	f.pin.Pin(&dst[0])
	f.pin.Pin(&iv[0])
	defer f.pin.Unpin()
	cop := cryptOp{
		ses: ses,
		op:  op,
		len: uint32(len(src)),
		src: uintptr(unsafe.Pointer(&src[0])),
		dst: uintptr(unsafe.Pointer(&dst[0])),
		iv:  uintptr(unsafe.Pointer(&iv[0])),
	}
	err := f.ioctl("CIOCCRYPT", ciocCrypt, unsafe.Pointer(&cop))
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	runtime.KeepAlive(iv)
	return err
}

// freeSession ends session ses (CIOCFSESSION).
func (f *cryptodevFD) freeSession(ses uint32) error {
	return f.ioctl("CIOCFSESSION", ciocFSession, unsafe.Pointer(&ses))
}

// close closes the descriptor, which also ends any session still open on
// it. It is not repeated on EINTR: Linux has released the descriptor even
// then.
func (f *cryptodevFD) close() error {
	if f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	if err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}
