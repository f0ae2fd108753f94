//go:build linux

package engine

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// AFALGName is the spec of the AF_ALG engine; "afalg:"+driver binds a driver.
const AFALGName = "afalg"

// afalgMaxRetries bounds how often a request that failed with EBUSY or
// EAGAIN (a device queue full) is redone on a fresh operation socket.
const afalgMaxRetries = 3

// afalgRetryDelay is the first pause before such a retry; it doubles.
const afalgRetryDelay = 200 * time.Microsecond

// AFALG is the engine backed by the kernel's AF_ALG skcipher sockets. It is
// safe for concurrent use; its Crypters are not.
type AFALG struct {
	driver string
	log    *zap.Logger

	mu    sync.Mutex
	bound map[Cipher]afalgBinding // successful resolutions only
}

// afalgBinding is what a cipher binds to: the name given to bind(2) and the
// driver that serves it.
type afalgBinding struct {
	name string
	drv  Driver
}

var _ Engine = (*AFALG)(nil)

// NewAFALG returns the AF_ALG engine. driver "" binds the plain algorithm
// name (cbc(aes)), so the kernel picks its highest-priority driver;
// otherwise driver is a cra_driver_name (e.g. "virtio_crypto_aes_cbc") or a
// prefix of one (e.g. "virtio_crypto" matches virtio_crypto_aes_cbc for
// cbc(aes)), resolved per cipher from /proc/crypto. A name that /proc/crypto
// does not list yet, such as the template instance "cbc(aes-generic)", is
// handed to the kernel as it is. It never fails: availability is reported
// per cipher by Driver(c).
func NewAFALG(driver string, o Options) *AFALG {
	return &AFALG{driver: driver, log: o.logger("afalg"), bound: map[Cipher]afalgBinding{}}
}

// Name implements Engine: "afalg" or "afalg:"+driver.
func (a *AFALG) Name() string {
	if a.driver == "" {
		return AFALGName
	}
	return AFALGName + ":" + a.driver
}

// Driver implements Engine. The error wraps ErrUnavailable when the kernel
// has no AF_ALG, and ErrNoAlgorithm when it has no driver for c (or none
// matching the engine's driver name).
func (a *AFALG) Driver(c Cipher) (Driver, error) {
	b, err := a.resolve(c)
	return b.drv, err
}

// NewCrypter implements Engine. Each Crypter owns one keyed AF_ALG socket and
// one operation socket.
func (a *AFALG) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	b, err := a.resolve(c)
	if err != nil {
		return nil, err
	}
	op, err := newAlgOp(b.name, key, c.Mode != ECB)
	if err != nil {
		return nil, openError(a.Name(), c, b, fmt.Sprintf("driver %s rejects a %d-bit key", b.drv.Name, c.KeyBits), err)
	}
	if ce := a.log.Check(zapcore.DebugLevel, "crypter"); ce != nil {
		ce.Write(zap.Stringer("cipher", c), zap.String("driver", b.drv.Name))
	}
	x := &afalgCrypter{c: c, drv: b.drv, engine: a.Name(), op: op, log: a.log}
	if x.chunks, err = newChunker(kernelChunkSize, x.request); err != nil {
		op.close()
		return nil, err
	}
	return x, nil
}

// openError explains why an operation socket could not be opened on
// binding b of engine for c: the key (or tag size) set with setsockopt
// was refused, which rejected says; the driver is gone; or else.
func openError(engine string, c Cipher, b afalgBinding, rejected string, err error) error {
	switch {
	case errors.Is(err, unix.EINVAL) && isSyscall(err, "setsockopt"):
		return fmt.Errorf("%s %v: %w: %s: %w", engine, c, ErrUnavailable, rejected, err)
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("%s %v: %w: %s disappeared (module unloaded?): %w", engine, c, ErrNoAlgorithm, b.name, err)
	}
	return fmt.Errorf("%s %v: opening %s: %w", engine, c, b.name, err)
}

// KernelDrivers lists what /proc/crypto registers for c.KernelName()
// (skcipher types, excluding internal ones), highest priority first. A
// template instance (cbc(aes-generic)) is listed only once something has
// instantiated it.
func KernelDrivers(c Cipher) ([]Driver, error) {
	if !c.Measurable() {
		return nil, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	algs, err := ReadProcCrypto()
	if err != nil {
		return nil, fmt.Errorf("kernel drivers for %s: %w", c.KernelName(), err)
	}
	return SkcipherDrivers(algs, c.KernelName()), nil
}

func isSyscall(err error, name string) bool {
	var se *os.SyscallError
	return errors.As(err, &se) && se.Syscall == name
}

// resolve finds, binds once and describes the driver serving c.
func (a *AFALG) resolve(c Cipher) (afalgBinding, error) {
	if !c.Measurable() {
		return afalgBinding{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	a.mu.Lock()
	b, ok := a.bound[c]
	a.mu.Unlock()
	if ok {
		return b, nil
	}
	if err := algProbe(); err != nil {
		return afalgBinding{}, a.socketError(c, err)
	}
	alg := c.KernelName()
	b.name = alg
	if a.driver != "" {
		algs, err := ReadProcCrypto()
		if err != nil {
			// Without the list only an exact driver name can work; the
			// kernel says whether it exists.
			a.log.Warn("cannot read /proc/crypto, binding the driver name as given", zap.Error(err))
			b.name = a.driver
		} else if b.name, err = a.pickDriver(c, algs); err != nil {
			return afalgBinding{}, err
		}
	}
	fd, err := algSocket(algType, b.name)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return afalgBinding{}, a.noAlgorithm(c, b.name, err)
		}
		if isSyscall(err, "socket") {
			return afalgBinding{}, a.socketError(c, err)
		}
		return afalgBinding{}, fmt.Errorf("%s %v: bind %q: %w", a.Name(), c, b.name, err)
	}
	algClose(fd)
	// Read after bind: binding instantiates templates, which only then
	// appear in /proc/crypto.
	algs, procErr := ReadProcCrypto()
	if procErr != nil {
		a.log.Warn("cannot read /proc/crypto, driver unknown", zap.Error(procErr))
	}
	switch {
	case a.driver == "":
		d, ok := BoundDriverUnder(algs, alg, ReadAFALGPolicy())
		if !ok {
			d = unknownDriver(alg, alg, procErr)
		}
		b.drv = d
	default:
		b.drv = unknownDriver(b.name, alg, procErr)
		for _, x := range algs {
			if x.Driver != b.name || !x.IsSkcipher() {
				continue
			}
			if x.Name != alg {
				return afalgBinding{}, fmt.Errorf("%s %v: %w: driver %s implements %s, not %s",
					a.Name(), c, ErrNoAlgorithm, b.name, x.Name, alg)
			}
			b.drv = x.Describe()
			break
		}
	}
	a.log.Debug("bound", zap.Stringer("cipher", c), zap.String("name", b.name),
		zap.String("driver", b.drv.Name), zap.Bool("hardware", b.drv.Hardware), zap.String("why", b.drv.HardwareWhy))
	a.mu.Lock()
	a.bound[c] = b
	a.mu.Unlock()
	return b, nil
}

// unknownDriver describes a binding when /proc/crypto cannot tell which
// driver serves it: named by what was bound, not hardware (so nothing is
// routed to it as a device on a guess), with the reason.
func unknownDriver(name, alg string, procErr error) Driver {
	why := "driver not listed in " + ProcCryptoPath
	if procErr != nil {
		why = "driver unknown: " + procErr.Error()
	}
	return Driver{Name: name, Algorithm: alg, HardwareWhy: why}
}

// pickDriver resolves the engine's driver name for c: an exact
// cra_driver_name, else the highest-priority driver it prefixes, else the
// name as given (for template instances not yet listed) when it cannot be
// a prefix of anything listed.
func (a *AFALG) pickDriver(c Cipher, algs []CryptoAlg) (string, error) {
	drivers := SkcipherDrivers(algs, c.KernelName())
	for _, d := range drivers {
		if d.Name == a.driver {
			return d.Name, nil
		}
	}
	for _, d := range drivers {
		if strings.HasPrefix(d.Name, a.driver) {
			return d.Name, nil
		}
	}
	if strings.Contains(a.driver, "(") {
		return a.driver, nil // a template instance; bind tells
	}
	for _, x := range algs {
		if x.Driver == a.driver && x.IsSkcipher() {
			return "", fmt.Errorf("%s %v: %w: driver %s implements %s, not %s",
				a.Name(), c, ErrNoAlgorithm, a.driver, x.Name, c.KernelName())
		}
	}
	return "", fmt.Errorf("%s %v: %w: no %s driver named %q or starting with it; registered: %s",
		a.Name(), c, ErrNoAlgorithm, c.KernelName(), a.driver, driverList(drivers))
}

func driverList(ds []Driver) string {
	if len(ds) == 0 {
		return "none"
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}

func (a *AFALG) socketError(c Cipher, err error) error {
	switch {
	case errors.Is(err, unix.EAFNOSUPPORT):
		return fmt.Errorf("%s %v: %w: kernel without AF_ALG (CONFIG_CRYPTO_USER_API_SKCIPHER): %w", a.Name(), c, ErrUnavailable, err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%s %v: %w: AF_ALG sockets not permitted (seccomp or LSM policy): %w", a.Name(), c, ErrUnavailable, err)
	}
	return fmt.Errorf("%s %v: %w: AF_ALG socket: %w", a.Name(), c, ErrUnavailable, err)
}

// noAlgorithm explains a bind of name that failed with ENOENT.
func (a *AFALG) noAlgorithm(c Cipher, name string, err error) error {
	algs, procErr := ReadProcCrypto()
	pol := ReadAFALGPolicy()
	e := bindENOENT(a.Name(), a.driver, name, c, algs, procErr, pol, err)
	if errors.Is(e, ErrAFALGRefused) {
		a.log.Warn("AF_ALG refuses the driver", zap.Stringer("cipher", c), zap.String("driver", name),
			zap.String("kernel", pol.Release), zap.Error(e))
	}
	return e
}

// bindENOENT explains why binding name (for the engine's driver, "" for the
// plain algorithm name) failed with ENOENT, given /proc/crypto (algs, or
// procErr) and the kernel's AF_ALG policy: a listed driver that AF_ALG
// refuses (a device on Linux 7.2 and later, or crypto.af_alg_restrict),
// an interface module missing, or no driver at all.
func bindENOENT(engine, driver, name string, c Cipher, algs []CryptoAlg, procErr error, pol AFALGPolicy, err error) error {
	drivers := SkcipherDrivers(algs, c.KernelName())
	if driver == "" {
		if len(drivers) > 0 {
			if pol.Restrict > 0 {
				return fmt.Errorf("%s %v: %w: /proc/crypto lists %s (%s) but AF_ALG cannot bind it: the allowlist of %s (%d) does not hold it (%s=0 lifts it): %w",
					engine, c, ErrAFALGRefused, c.KernelName(), driverList(drivers), AFALGRestrictSysctl, pol.Restrict, AFALGRestrictPath, err)
			}
			if !slices.ContainsFunc(drivers, pol.Admits) {
				return fmt.Errorf("%s %v: %w: /proc/crypto lists %s only from devices (%s): %s: %w",
					engine, c, ErrAFALGRefused, c.KernelName(), driverList(drivers), pol.Reason(), err)
			}
			return fmt.Errorf("%s %v: %w: /proc/crypto lists %s (%s) but AF_ALG cannot bind it: skcipher interface missing (load algif_skcipher, CONFIG_CRYPTO_USER_API_SKCIPHER): %w",
				engine, c, ErrNoAlgorithm, c.KernelName(), driverList(drivers), err)
		}
		return fmt.Errorf("%s %v: %w: no driver for %s (load its module, e.g. aes or ctr): %w", engine, c, ErrNoAlgorithm, c.KernelName(), err)
	}
	for _, d := range drivers {
		if d.Name == name {
			if e := refusedError(engine, c, pol, d, err); e != nil {
				return e
			}
		}
	}
	list := driverList(drivers)
	if procErr != nil {
		list = "unknown (" + procErr.Error() + ")"
	}
	return fmt.Errorf("%s %v: %w: no driver %q for %s; registered: %s: %w", engine, c, ErrNoAlgorithm, driver, c.KernelName(), list, err)
}

// ReadAFALGPolicy describes the running kernel: its release (uname) and
// crypto.af_alg_restrict where the sysctl exists.
func ReadAFALGPolicy() AFALGPolicy {
	var u unix.Utsname
	release := ""
	if unix.Uname(&u) == nil {
		release = unix.ByteSliceToString(u.Release[:])
	}
	restrict, _ := os.ReadFile(AFALGRestrictPath)
	return NewAFALGPolicy(release, string(restrict))
}

// afalgCrypter owns one keyed AF_ALG socket and one operation socket.
type afalgCrypter struct {
	c      Cipher
	drv    Driver
	engine string
	op     *algOp
	log    *zap.Logger
	chunks *chunker
	closed bool
}

func (x *afalgCrypter) Cipher() Cipher { return x.c }
func (x *afalgCrypter) Driver() Driver { return x.drv }

func (x *afalgCrypter) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	if err := x.op.close(); err != nil {
		return fmt.Errorf("%s %v: %w", x.engine, x.c, err)
	}
	return nil
}

// Syscalls is how many system calls the Crypter's requests made (two per
// request below the split size); offload frame-cost reports it per frame.
func (x *afalgCrypter) Syscalls() uint64 { return x.op.syscalls }

func (x *afalgCrypter) Encrypt(dst, src, iv []byte) error { return x.crypt(Encrypt, dst, src, iv) }
func (x *afalgCrypter) Decrypt(dst, src, iv []byte) error { return x.crypt(Decrypt, dst, src, iv) }

func (x *afalgCrypter) crypt(d Direction, dst, src, iv []byte) error {
	if x.closed {
		return ErrClosed
	}
	if err := CheckArgs(x.c, dst, src, iv); err != nil {
		return err
	}
	return x.chunks.run(x.c.Mode, d, dst, src, iv)
}

// request runs one piece of at most kernelChunkSize bytes: one sendmsg that
// carries operation, IV and data, then one read (the kernel queues the whole
// piece in the socket's send buffer, about 208 KiB, before the read
// processes it; a 256 KiB request hung in the VM).
//
// A device that answers EBUSY or EAGAIN gets the request again on a fresh
// operation socket, unless the failed read may have overwritten the input
// already (in place).
//
// Zero copy was measured and not kept: sendmsg(MSG_MORE) with the control
// messages only, vmsplice of src into a pipe, splice into the op socket,
// read — four syscalls and a pipe per crypter instead of two. In the x86 VM
// (TCG, host load ~11 on 2 cores, aes-256-cbc encrypt, MB/s sendmsg vs
// splice) two runs gave
//
//	cbc-aes-aesni          8 KiB 1.9 vs 12.8, 4.3 vs 2.9; 16 KiB 5.3 vs 5.5, 3.6 vs 12.7; 64 KiB 10.0 vs 10.9, 6.6 vs 4.6
//	virtio_crypto_aes_cbc  8 KiB 2.8 vs 2.5,  0.9 vs 1.4;  16 KiB 2.9 vs 4.8, 1.7 vs 2.7;  64 KiB 7.6 vs 14.2, 5.6 vs 6.5
//
// swings of 3-7x between runs and no direction that holds in both, as
// docs/kernel-notes.md found before. Measured again on the emulated MIPS
// router (mipsel malta, virtio_crypto_aes_cbc; BenchmarkKernelAFALGSplice
// of commit 90e7436, each method a separate process timed by qemu's CPU
// seconds on the host, 4 alternated rounds): splice over sendmsg 0.96x at
// 64 KiB, 0.91x at 16 KiB (docs/lab/router-anchor.md). There too the copy it
// saves costs less than its two extra system calls.
func (x *afalgCrypter) request(d Direction, dst, src, iv []byte) error {
	for attempt := 0; ; attempt++ {
		err := x.op.send(d == Encrypt, iv, src)
		sent := err == nil
		if sent {
			err = x.op.recv(dst)
		}
		if err == nil {
			return nil
		}
		// Whatever the kernel still holds for this request would be taken
		// as the start of the next one: drop the op socket.
		x.op.reset()
		busy := errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EAGAIN)
		inPlace := &dst[0] == &src[0]
		if busy && attempt < afalgMaxRetries && (!sent || !inPlace) {
			if ce := x.log.Check(zapcore.DebugLevel, "retrying busy request"); ce != nil {
				ce.Write(zap.String("driver", x.drv.Name), zap.Int("bytes", len(src)), zap.Int("attempt", attempt+1), zap.Error(err))
			}
			time.Sleep(afalgRetryDelay << attempt)
			continue
		}
		what := "sendmsg"
		if sent {
			what = "read"
		}
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("%s %v: %s %s of %d bytes: driver %s rejected the request (EINVAL): %w",
				x.engine, x.c, d, what, len(src), x.drv.Name, err)
		}
		if busy && sent && inPlace {
			return fmt.Errorf("%s %v: %s of %d bytes: driver %s busy after the in-place input may have been overwritten, not retried: %w",
				x.engine, x.c, d, len(src), x.drv.Name, err)
		}
		if busy {
			return fmt.Errorf("%s %v: %s of %d bytes: driver %s still busy after %d attempts: %w",
				x.engine, x.c, d, len(src), x.drv.Name, attempt+1, err)
		}
		return fmt.Errorf("%s %v: %s %s of %d bytes on driver %s: %w", x.engine, x.c, d, what, len(src), x.drv.Name, err)
	}
}

// KernelAFALGNote is what listings say about AF_ALG on the running kernel
// (AFALGPolicy.AFALGNote with /proc/crypto): "" where AF_ALG reaches
// devices as it always did.
func KernelAFALGNote() string {
	algs, _ := ReadProcCrypto()
	return ReadAFALGPolicy().AFALGNote(algs)
}
