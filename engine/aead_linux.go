//go:build linux

package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// AFALGAEAD is the AF_ALG engine that does whole frames in one request:
// the kernel's authenc(hmac(sha256),cbc(aes)) or authenc(hmac(sha256),
// ctr(aes)) template, cipher and HMAC-SHA256 together, so a device that
// the kernel drives for AES (and, where it has one, for SHA-256) serves
// the frame without the tag costing the CPU a pass over it in user space.
//
// It is an AFALG engine too: its Crypters are plain skcipher sockets on
// the same cipher driver, for suites whose MAC the kernel does not do.
// Driver reports the authenc instance; if the kernel cannot make one
// (authenc not loaded, no AF_ALG aead interface), the engine is
// unavailable, it never silently becomes the skcipher engine.
type AFALGAEAD struct {
	driver string
	sk     *AFALG
	log    *zap.Logger

	mu    sync.Mutex
	bound map[Cipher]afalgBinding
}

var (
	_ Engine      = (*AFALGAEAD)(nil)
	_ FrameEngine = (*AFALGAEAD)(nil)
)

// NewAFALGAEAD returns the AF_ALG aead engine. driver "" binds
// authenc(hmac(sha256),MODE(aes)), so the kernel builds it from its
// highest-priority drivers; otherwise driver names the cipher driver, or a
// prefix of one, as for NewAFALG (e.g. "virtio_crypto" binds
// authenc(hmac(sha256),virtio_crypto_aes_cbc)). It never fails:
// availability is reported per cipher by Driver(c).
func NewAFALGAEAD(driver string, o Options) *AFALGAEAD {
	return &AFALGAEAD{driver: driver, sk: NewAFALG(driver, o), log: o.logger("afalg-aead"), bound: map[Cipher]afalgBinding{}}
}

// Name implements Engine: "afalg-aead" or "afalg-aead:"+driver.
func (a *AFALGAEAD) Name() string {
	if a.driver == "" {
		return AFALGAEADName
	}
	return AFALGAEADName + ":" + a.driver
}

// AuthencName is the kernel algorithm name of c's frames:
// authenc(hmac(sha256),cbc(aes)) or authenc(hmac(sha256),ctr(aes)).
func AuthencName(c Cipher) string { return authencOf(c.KernelName()) }

func authencOf(cipher string) string { return "authenc(hmac(sha256)," + cipher + ")" }

// Driver implements Engine: the authenc instance that serves c's frames.
func (a *AFALGAEAD) Driver(c Cipher) (Driver, error) {
	b, err := a.resolve(c)
	return b.drv, err
}

// NewCrypter implements Engine: a skcipher Crypter on the same cipher
// driver as the frames, once the engine is available for c.
func (a *AFALGAEAD) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	if _, err := a.resolve(c); err != nil {
		return nil, err
	}
	return a.sk.NewCrypter(c, key)
}

// NewFrameSealer implements FrameEngine.
func (a *AFALGAEAD) NewFrameSealer(c Cipher, encKey, macKey []byte) (FrameSealer, error) {
	if err := CheckKey(c, encKey); err != nil {
		return nil, err
	}
	if len(macKey) != FrameMACKeySize {
		return nil, fmt.Errorf("%s %v: MAC key: %w: %d bytes, want %d", a.Name(), c, ErrKeySize, len(macKey), FrameMACKeySize)
	}
	b, err := a.resolve(c)
	if err != nil {
		return nil, err
	}
	key := authencKey(encKey, macKey)
	defer clear(key)
	op, err := newAEADOp(b.name, key, FrameTagSize)
	if err != nil {
		return nil, openError(a.Name(), c, b, fmt.Sprintf("%s rejects the key or a %d-byte tag", b.drv.Name, FrameTagSize), err)
	}
	if ce := a.log.Check(zapcore.DebugLevel, "frame sealer"); ce != nil {
		ce.Write(zap.Stringer("cipher", c), zap.String("driver", b.drv.Name))
	}
	return &aeadSealer{c: c, drv: b.drv, engine: a.Name(), op: op, log: a.log}, nil
}

// resolve binds c's authenc instance once and describes it.
func (a *AFALGAEAD) resolve(c Cipher) (afalgBinding, error) {
	if !c.Valid() {
		return afalgBinding{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	a.mu.Lock()
	b, ok := a.bound[c]
	a.mu.Unlock()
	if ok {
		return b, nil
	}
	// The cipher inside: the skcipher engine resolves a driver name or
	// prefix exactly as afalg:DRIVER does, and says why when it cannot.
	inner := c.KernelName()
	var innerDrv Driver
	if a.driver != "" {
		d, err := a.sk.Driver(c)
		if err != nil {
			return afalgBinding{}, fmt.Errorf("%s: %w", a.Name(), err)
		}
		inner, innerDrv = d.Name, d
	} else if err := algProbe(); err != nil {
		return afalgBinding{}, a.sk.socketError(c, err)
	}
	b.name = authencOf(inner)
	if a.driver != "" {
		// A driver name inside a template binds only under the exact
		// driver name of the instance, which names the hash driver too:
		// authenc(hmac(sha256-generic),virtio_crypto_aes_cbc).
		b.name = "authenc(hmac(" + sha256Driver() + ")," + inner + ")"
	}
	fd, err := algSocket(aeadAlgType, b.name)
	if err != nil {
		pol := ReadAFALGPolicy()
		switch {
		case errors.Is(err, unix.ENOENT) && pol.Restrict > 0:
			return afalgBinding{}, fmt.Errorf("%s %v: %w: cannot bind %s: the allowlist of %s (%d) may not hold it (%s=0 lifts it): %w",
				a.Name(), c, ErrAFALGRefused, b.name, AFALGRestrictSysctl, pol.Restrict, AFALGRestrictPath, err)
		case errors.Is(err, unix.ENOENT):
			return afalgBinding{}, fmt.Errorf("%s %v: %w: cannot bind %s: load the authenc module and the AF_ALG aead interface (algif_aead, CONFIG_CRYPTO_USER_API_AEAD): %w",
				a.Name(), c, ErrNoAlgorithm, b.name, err)
		case isSyscall(err, "socket"):
			return afalgBinding{}, a.sk.socketError(c, err)
		}
		return afalgBinding{}, fmt.Errorf("%s %v: bind %q: %w", a.Name(), c, b.name, err)
	}
	algClose(fd)
	algs, procErr := ReadProcCrypto()
	if procErr != nil {
		a.log.Warn("cannot read /proc/crypto, driver unknown", zap.Error(procErr))
	}
	b.drv = unknownDriver(b.name, AuthencName(c), procErr)
	if d, ok := boundAEAD(algs, AuthencName(c), innerDrv.Name, ReadAFALGPolicy()); ok {
		b.drv = d
	}
	a.log.Debug("bound", zap.Stringer("cipher", c), zap.String("name", b.name),
		zap.String("driver", b.drv.Name), zap.Bool("hardware", b.drv.Hardware))
	a.mu.Lock()
	a.bound[c] = b
	a.mu.Unlock()
	return b, nil
}

// sha256Driver is the driver the kernel picks for sha256 (the
// highest-priority hash whose self-test passed), "sha256-generic" when
// /proc/crypto cannot tell.
func sha256Driver() string {
	algs, err := ReadProcCrypto()
	if err != nil {
		return "sha256-generic"
	}
	return pickSHA256(algs)
}

func pickSHA256(algs []CryptoAlg) string {
	best, found := CryptoAlg{}, false
	for _, x := range algs {
		if x.Name != "sha256" || x.Internal || (x.Type != "shash" && x.Type != "ahash") || (x.SelfTest != "" && x.SelfTest != "passed") {
			continue
		}
		if !found || x.Priority > best.Priority {
			best, found = x, true
		}
	}
	if !found {
		return "sha256-generic"
	}
	return best.Driver
}

// boundAEAD finds the aead driver serving name in /proc/crypto: the
// highest-priority one AF_ALG admits under p, or, when the cipher driver
// inside is given, the one built on it
// (authenc(hmac(sha256-generic),virtio_crypto_aes_cbc)).
func boundAEAD(algs []CryptoAlg, name, inner string, p AFALGPolicy) (Driver, bool) {
	best, found := CryptoAlg{}, false
	for _, x := range algs {
		if x.Name != name || x.Type != "aead" || x.Internal || (x.SelfTest != "" && x.SelfTest != "passed") || !p.Admits(x.Describe()) {
			continue
		}
		if inner != "" && !strings.HasSuffix(x.Driver, ","+inner+")") {
			continue
		}
		if !found || x.Priority > best.Priority {
			best, found = x, true
		}
	}
	return best.Describe(), found
}

// aeadSealer owns one keyed authenc socket and one operation socket.
type aeadSealer struct {
	c      Cipher
	drv    Driver
	engine string
	op     *aeadOp
	log    *zap.Logger
	closed bool
}

var _ FrameSealer = (*aeadSealer)(nil)

func (x *aeadSealer) Cipher() Cipher { return x.c }
func (x *aeadSealer) Driver() Driver { return x.drv }

// Syscalls counts the system calls made so far (speed.SyscallCounter).
func (x *aeadSealer) Syscalls() uint64 { return x.op.syscalls }

func (x *aeadSealer) Close() error {
	if x.closed {
		return nil
	}
	x.closed = true
	if err := x.op.close(); err != nil {
		return fmt.Errorf("%s %v: %w", x.engine, x.c, err)
	}
	return nil
}

// Seal implements FrameSealer.
func (x *aeadSealer) Seal(dst, aad, plaintext, iv []byte) error {
	if x.closed {
		return ErrClosed
	}
	if err := checkFrameArgs(x.c, dst, aad, plaintext, iv, len(plaintext)); err != nil {
		return err
	}
	return x.request(Encrypt, dst[:len(plaintext)+FrameTagSize], aad, plaintext, iv)
}

// Open implements FrameSealer.
func (x *aeadSealer) Open(dst, aad, sealed, iv []byte) error {
	if x.closed {
		return ErrClosed
	}
	n := len(sealed) - FrameTagSize
	if err := checkFrameArgs(x.c, dst, aad, sealed, iv, n); err != nil {
		return err
	}
	return x.request(Decrypt, dst[:n], aad, sealed, iv)
}

// request runs one frame. EBADMSG on opening is the tag check failing:
// ErrAuth, not an engine fault. A device that answers EBUSY or EAGAIN gets
// the request again on a fresh operation socket, unless the failed readv
// may have overwritten an in-place input already.
func (x *aeadSealer) request(d Direction, out, aad, in, iv []byte) error {
	for attempt := 0; ; attempt++ {
		err := x.op.do(d == Encrypt, iv, aad, in, out)
		if err == nil {
			return nil
		}
		x.op.reset()
		if d == Decrypt && errors.Is(err, unix.EBADMSG) {
			return fmt.Errorf("%s %v: %w: %w", x.engine, x.c, ErrAuth, err)
		}
		busy := errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EAGAIN)
		sent := !isSyscall(err, "sendmsg")
		inPlace := len(out) > 0 && len(in) > 0 && &out[0] == &in[0]
		if busy && attempt < afalgMaxRetries && (!sent || !inPlace) {
			if ce := x.log.Check(zapcore.DebugLevel, "retrying busy request"); ce != nil {
				ce.Write(zap.String("driver", x.drv.Name), zap.Int("bytes", len(in)), zap.Int("attempt", attempt+1), zap.Error(err))
			}
			time.Sleep(afalgRetryDelay << attempt)
			continue
		}
		if errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("%s %v: %s of %d bytes: driver %s rejected the request (EINVAL): %w", x.engine, x.c, d, len(in), x.drv.Name, err)
		}
		return fmt.Errorf("%s %v: %s of %d bytes on driver %s: %w", x.engine, x.c, d, len(in), x.drv.Name, err)
	}
}
