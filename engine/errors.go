package engine

import (
	"errors"
	"fmt"
	"unsafe"
)

// ErrUnavailable is wrapped by every error that says an engine, or a cipher
// on an engine, cannot be used on this system; the wrapping error says why.
// Callers pick another engine explicitly: engines never fall back silently.
var ErrUnavailable = errors.New("engine unavailable")

// ErrUnsupported means the engine does not exist on this platform (for
// example AF_ALG outside Linux). It wraps ErrUnavailable.
var ErrUnsupported = fmt.Errorf("%w: not supported on this platform", ErrUnavailable)

// ErrNoAlgorithm means the kernel has no driver registered for the requested
// algorithm or driver name. It wraps ErrUnavailable; load the driver's
// module or choose another engine.
var ErrNoAlgorithm = fmt.Errorf("%w: algorithm not registered", ErrUnavailable)

// ErrUnknownEngine means an engine spec names no engine. Fix the spec.
var ErrUnknownEngine = errors.New("unknown engine")

// ErrUnknownCipher means a cipher name is not one of Ciphers. Fix the name.
var ErrUnknownCipher = errors.New("unknown cipher")

// Argument errors: the caller passed a buffer or key of the wrong shape.
// They are programming or protocol errors, not engine faults, and retrying
// on another engine will not help.
var (
	ErrKeySize   = errors.New("wrong key length")
	ErrIVSize    = errors.New("wrong IV length")
	ErrBlockSize = errors.New("CBC input not a multiple of the block size")
	ErrShortDst  = errors.New("destination shorter than source")
	ErrOverlap   = errors.New("destination and source overlap")
	ErrClosed    = errors.New("crypter closed")
)

// IsArgError reports whether err is one of the argument errors, which are
// the caller's to fix, rather than a fault of the engine.
func IsArgError(err error) bool {
	for _, e := range []error{ErrKeySize, ErrIVSize, ErrBlockSize, ErrShortDst, ErrOverlap, ErrUnknownCipher} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// CheckKey validates a key for c.
func CheckKey(c Cipher, key []byte) error {
	if !c.Measurable() {
		return fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	if len(key) != c.KeySize() {
		return fmt.Errorf("%v: %w: %d bytes, want %d", c, ErrKeySize, len(key), c.KeySize())
	}
	return nil
}

// CheckArgs validates the arguments of one Encrypt/Decrypt call. Every
// engine calls it first, so all engines reject the same inputs the same way.
func CheckArgs(c Cipher, dst, src, iv []byte) error {
	if len(iv) != BlockSize {
		return fmt.Errorf("%v: %w: %d bytes, want %d", c, ErrIVSize, len(iv), BlockSize)
	}
	if c.Blocks() && len(src)%BlockSize != 0 {
		return fmt.Errorf("%v: %w: %d bytes", c, ErrBlockSize, len(src))
	}
	if len(dst) < len(src) {
		return fmt.Errorf("%v: %w: %d < %d", c, ErrShortDst, len(dst), len(src))
	}
	if inexactOverlap(dst[:len(src)], src) {
		return fmt.Errorf("%v: %w", c, ErrOverlap)
	}
	return nil
}

// inexactOverlap reports whether x and y share memory at any
// non-corresponding index (the rule of crypto/cipher).
func inexactOverlap(x, y []byte) bool {
	if len(x) == 0 || len(y) == 0 || &x[0] == &y[0] {
		return false
	}
	xs, ys := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	return xs < ys+uintptr(len(y)) && ys < xs+uintptr(len(x))
}
