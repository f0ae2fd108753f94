package engine

import (
	"errors"
	"fmt"
	"syscall"

	"go.uber.org/zap"
)

// Cryptodev is the engine backed by /dev/crypto, the character device of
// the out-of-tree cryptodev-linux module (OpenWrt's kmod-cryptodev). Each
// Crypter owns its own descriptor and one session, created by NewCrypter and
// ended by Close; every call passes its IV, which the kernel never writes
// back. Buffers above kernelChunkSize are split with the IV chained, like
// the AF_ALG engine does.
type Cryptodev struct {
	log  *zap.Logger
	path string
	// hwOnly refuses sessions that the module bound to a driver without
	// the kernel-driver-only flag (cryptodev:hw).
	hwOnly bool
}

var _ Engine = (*Cryptodev)(nil)

// NewCryptodev returns the cryptodev engine. It never fails: whether a
// cipher can be served is asked per cipher with Driver.
func NewCryptodev(o Options) *Cryptodev {
	return &Cryptodev{log: o.logger(CryptodevName), path: cryptodevPath}
}

// NewCryptodevHardware returns the cryptodev engine that serves a cipher
// only when the driver the module binds is a device (CIOCGSESSINFO's
// kernel-driver-only flag, or a device driver name where the flag is
// missing), the spec "cryptodev:hw". cryptodev-linux has
// no way to ask for a driver: a session always gets the kernel's
// highest-priority one, so this engine refuses (ErrNoAlgorithm, naming the
// driver it got) where a CPU driver outranks the device.
func NewCryptodevHardware(o Options) *Cryptodev {
	return &Cryptodev{log: o.logger(CryptodevHardwareName), path: cryptodevPath, hwOnly: true}
}

// Name implements Engine: "cryptodev" or "cryptodev:hw".
func (e *Cryptodev) Name() string {
	if e.hwOnly {
		return CryptodevHardwareName
	}
	return CryptodevName
}

// Driver implements Engine. It opens a throwaway session with a zero key and
// asks the kernel (CIOCGSESSINFO) which driver serves it and whether that
// driver exists only in the kernel, i.e. is a device.
func (e *Cryptodev) Driver(c Cipher) (Driver, error) {
	if !c.Measurable() {
		return Driver{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	f, err := openCryptodev(e.path, e.log)
	if err != nil {
		return Driver{}, cryptodevError(e.path, stepOpen, c, err)
	}
	defer f.close()
	var zero [32]byte
	ses, err := f.newSession(cryptodevCipher(c), zero[:c.KeySize()])
	if err != nil {
		return Driver{}, cryptodevError(e.path, stepSession, c, err)
	}
	defer f.freeSession(ses)
	info, err := f.sessionInfo(ses)
	if err != nil {
		return Driver{}, cryptodevError(e.path, stepInfo, c, err)
	}
	drv, err := cryptodevDriver(c, info, e.hwOnly)
	if err != nil {
		return Driver{}, err
	}
	return e.withProcCrypto(drv), nil
}

// NewCrypter implements Engine.
func (e *Cryptodev) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	f, err := openCryptodev(e.path, e.log)
	if err != nil {
		return nil, cryptodevError(e.path, stepOpen, c, err)
	}
	ses, err := f.newSession(cryptodevCipher(c), key)
	if err != nil {
		f.close()
		return nil, cryptodevError(e.path, stepSession, c, err)
	}
	info, err := f.sessionInfo(ses)
	if err != nil {
		f.close() // ends the session too
		return nil, cryptodevError(e.path, stepInfo, c, err)
	}
	drv, err := cryptodevDriver(c, info, e.hwOnly)
	if err != nil {
		f.close()
		return nil, err
	}
	drv = e.withProcCrypto(drv)
	cr := &cryptodevCrypter{c: c, path: e.path, f: f, ses: ses, drv: drv}
	if cr.chunks, err = newChunker(kernelChunkSize, cr.piece); err != nil {
		f.close()
		return nil, err
	}
	e.log.Debug("session opened", zap.Stringer("cipher", c), zap.String("driver", drv.Name), zap.Bool("hardware", drv.Hardware))
	return cr, nil
}

// cryptodevCipher is the cryptodev_crypto_op_t of c's mode; the key size is
// given by the key length.
func cryptodevCipher(c Cipher) uint32 {
	switch c.Mode {
	case CTR:
		return cryptoAESCTR
	case ECB:
		return cryptoAESECB
	}
	return cryptoAESCBC
}

// cryptodevDriver describes the driver CIOCGSESSINFO reported for a session
// of c. The kernel's own name for the algorithm must be c's: anything else
// means the session is not what offload asked for (or the structs do not
// match the module's), and nothing may be routed to it. A driver is
// hardware when the module flags it kernel-driver-only or, without the
// flag, when ClassifyDriver names it a device. With hwOnly a CPU driver is
// refused with ErrNoAlgorithm.
func cryptodevDriver(c Cipher, info *sessionInfoOp, hwOnly bool) (Driver, error) {
	name := cString(info.cipherInfo.craName[:])
	drv := cString(info.cipherInfo.craDriverName[:])
	if name != c.KernelName() || drv == "" {
		return Driver{}, fmt.Errorf("cryptodev: %v: CIOCGSESSINFO reports algorithm %q driver %q, want algorithm %q", c, name, drv, c.KernelName())
	}
	d := Driver{Name: drv, Algorithm: c.KernelName()}
	if info.flags&siopFlagKernelDriverOnly != 0 {
		d.Hardware, d.HardwareWhy = true, "CIOCGSESSINFO: kernel-driver-only"
	} else {
		// Not every device driver sets CRYPTO_ALG_KERN_DRIVER_ONLY
		// (virtio_crypto does not), so the flag's absence is decided by the
		// driver name, as AF_ALG's drivers are. Async is not known here:
		// an unknown name counts as CPU code.
		hw, why := ClassifyDriver(drv, false)
		d.Hardware, d.HardwareWhy = hw, "CIOCGSESSINFO: not kernel-driver-only; "+why
	}
	if hwOnly && !d.Hardware {
		return Driver{}, fmt.Errorf("%w: %s: %v: cryptodev-linux bound %s, a CPU driver (%s); the module always binds the highest-priority driver for %s, so a device serves cryptodev only where it outranks the CPU's drivers (use afalg:DRIVER to pick a driver by name)",
			ErrNoAlgorithm, CryptodevHardwareName, c, drv, d.HardwareWhy, c.KernelName())
	}
	return d, nil
}

// withProcCrypto adds what CIOCGSESSINFO does not tell, the driver's
// priority, module and whether it is async, from /proc/crypto. Without a
// readable /proc/crypto those stay empty; the driver name and the hardware
// flag come from the session itself and are enough to route by.
func (e *Cryptodev) withProcCrypto(d Driver) Driver {
	algs, err := ReadProcCrypto()
	if err != nil {
		e.log.Debug("no /proc/crypto details for the cryptodev driver", zap.String("driver", d.Name), zap.Error(err))
		return d
	}
	return procCryptoDetails(d, algs)
}

// procCryptoDetails fills d's Priority, Module and Async from the
// /proc/crypto record of the same driver and algorithm, if there is one.
func procCryptoDetails(d Driver, algs []CryptoAlg) Driver {
	for _, a := range algs {
		if a.Driver == d.Name && a.Name == d.Algorithm {
			d.Priority, d.Module, d.Async = a.Priority, a.Module, a.Async
			break
		}
	}
	return d
}

// cryptodevStep names what the engine was doing when a call failed, which
// decides what an errno means.
type cryptodevStep uint8

const (
	stepOpen    cryptodevStep = iota // open(/dev/crypto)
	stepSession                      // CIOCGSESSION
	stepInfo                         // CIOCGSESSINFO
	stepCrypt                        // CIOCCRYPT
	stepFree                         // CIOCFSESSION
)

// cryptodevError turns a failure at step on the device at path into the
// engine's errors: the device missing or not accessible and a cipher the
// kernel cannot serve wrap ErrUnavailable (ErrNoAlgorithm for the latter);
// anything else is a fault of this one call. The errno stays reachable with
// errors.Is/As.
func cryptodevError(path string, step cryptodevStep, c Cipher, err error) error {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("cryptodev: %v: %w", c, err)
	}
	switch {
	case step == stepOpen && (errno == syscall.ENOENT || errno == syscall.ENODEV || errno == syscall.ENXIO):
		return fmt.Errorf("%w: no %s: load the cryptodev module (cryptodev-linux): %w", ErrUnavailable, path, err)
	case step == stepOpen && (errno == syscall.EACCES || errno == syscall.EPERM):
		return fmt.Errorf("%w: permission denied opening %s read-write: give the user access to the device (its mode or group): %w", ErrUnavailable, path, err)
	case step != stepOpen && (errno == syscall.ENOTTY || errno == syscall.ENOSYS):
		// ENOTTY: another driver owns the node. ENOSYS: an emulator such as
		// qemu-user, which answers ioctls it cannot translate with ENOSYS.
		return fmt.Errorf("%w: %s does not take cryptodev ioctls (not a cryptodev-linux device, or an emulator that does not pass them through): %w", ErrUnavailable, path, err)
	case step == stepSession && (errno == syscall.EINVAL || errno == syscall.ENOENT):
		return fmt.Errorf("%w: cryptodev has no kernel driver for %v (%s with a %d-bit key): %w", ErrNoAlgorithm, c, c.KernelName(), c.KeyBits, err)
	}
	return fmt.Errorf("cryptodev: %v: %w", c, err)
}

// cryptodevCrypter is one session on its own descriptor.
type cryptodevCrypter struct {
	c      Cipher
	path   string
	f      *cryptodevFD
	ses    uint32
	drv    Driver
	chunks *chunker
	closed bool
}

func (cr *cryptodevCrypter) Cipher() Cipher { return cr.c }
func (cr *cryptodevCrypter) Driver() Driver { return cr.drv }

func (cr *cryptodevCrypter) Encrypt(dst, src, iv []byte) error {
	return cr.crypt(Encrypt, dst, src, iv)
}
func (cr *cryptodevCrypter) Decrypt(dst, src, iv []byte) error {
	return cr.crypt(Decrypt, dst, src, iv)
}

func (cr *cryptodevCrypter) crypt(d Direction, dst, src, iv []byte) error {
	if cr.closed {
		return fmt.Errorf("cryptodev: %v: %w", cr.c, ErrClosed)
	}
	if err := CheckArgs(cr.c, dst, src, iv); err != nil {
		return err
	}
	return cr.chunks.run(cr.c.Mode, d, dst, src, iv)
}

// piece runs one kernel request; the chunker calls it per piece.
func (cr *cryptodevCrypter) piece(d Direction, dst, src, iv []byte) error {
	op := uint16(copEncrypt)
	if d == Decrypt {
		op = copDecrypt
	}
	if err := cr.f.crypt(cr.ses, op, dst, src, iv); err != nil {
		return cryptodevError(cr.path, stepCrypt, cr.c, fmt.Errorf("%v of %d bytes: %w", d, len(src), err))
	}
	return nil
}

// Close ends the session and closes the descriptor. Closing twice is a
// no-op.
func (cr *cryptodevCrypter) Close() error {
	if cr.closed {
		return nil
	}
	cr.closed = true
	errFree := cr.f.freeSession(cr.ses)
	if errFree != nil {
		errFree = cryptodevError(cr.path, stepFree, cr.c, errFree)
	}
	errClose := cr.f.close()
	if errClose != nil {
		errClose = fmt.Errorf("cryptodev: %v: %w", cr.c, errClose)
	}
	return errors.Join(errFree, errClose)
}
