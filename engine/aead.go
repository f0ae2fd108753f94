package engine

import (
	"errors"
	"fmt"
)

// AFALGAEADName is the spec of the AF_ALG aead engine;
// "afalg-aead:"+driver binds a cipher driver inside authenc.
const AFALGAEADName = "afalg-aead"

// FrameTagSize is the tag a FrameSealer appends: HMAC-SHA256 truncated to
// 16 bytes, the record layer's tag.
const FrameTagSize = 16

// FrameMACKeySize is the HMAC-SHA256 key length a FrameSealer takes.
const FrameMACKeySize = 32

// MaxFrameRequest is the largest plaintext a FrameSealer takes in one call.
// A frame's tag covers the whole frame, so unlike Crypters a sealer cannot
// split it into kernel requests; larger frames are the caller's to seal
// with a Crypter and a MAC of its own (the record layer does).
const MaxFrameRequest = kernelChunkSize

// ErrAuth means a FrameSealer's Open found a tag that does not verify (the
// kernel answered EBADMSG): the frame is forged or corrupted, not the
// engine broken. Callers treat it exactly like their own tag mismatch.
var ErrAuth = errors.New("frame authentication failed")

// ErrFrameSize means a FrameSealer got a frame larger than MaxFrameRequest
// or a sealed frame shorter than its tag. It is an argument error.
var ErrFrameSize = errors.New("frame size not supported by the frame sealer")

// FrameEngine is an Engine that can also do a whole encrypt-then-MAC frame
// in one request: the cipher and HMAC-SHA256 over aad | ciphertext. The
// record layer uses it for frames of *-hmac-sha256 suites when the policy
// picks the engine; everything else goes through its Crypters.
type FrameEngine interface {
	Engine
	// NewFrameSealer returns a FrameSealer for cipher c keyed with encKey
	// (c.KeySize() bytes) and the HMAC-SHA256 key macKey
	// (FrameMACKeySize bytes). The caller owns it and must Close it.
	NewFrameSealer(c Cipher, encKey, macKey []byte) (FrameSealer, error)
}

// FrameSealer seals and opens whole frames:
//
//	Seal: dst[:len(pt)+16] = ciphertext | HMAC-SHA256(macKey, aad | ciphertext)[:16]
//	Open: checks the tag at the end of sealed, then dst[:len(sealed)-16] = plaintext
//
// with the cipher in the mode of c and the 16-byte iv (CBC: no padding, so
// plaintexts are multiples of 16). dst must not overlap the inputs except
// by starting at the same address (in place). Open returns an error
// wrapping ErrAuth for a tag that does not verify; after any error dst is
// unspecified. It is not safe for concurrent use.
type FrameSealer interface {
	Seal(dst, aad, plaintext, iv []byte) error
	Open(dst, aad, sealed, iv []byte) error
	// Cipher is the cipher this sealer was made for.
	Cipher() Cipher
	// Driver is the implementation that serves whole frames, e.g.
	// authenc(hmac(sha256-generic),cbc-aes-aesni).
	Driver() Driver
	Close() error
}

// maxAAD bounds the associated data of one frame (the record layer's is 12
// bytes: seq | len).
const maxAAD = 64

// checkFrameArgs validates one Seal or Open call; n is the plaintext length.
func checkFrameArgs(c Cipher, dst, aad, in, iv []byte, n int) error {
	if len(iv) != BlockSize {
		return fmt.Errorf("%v: %w: %d bytes, want %d", c, ErrIVSize, len(iv), BlockSize)
	}
	if n < 0 || n > MaxFrameRequest || len(aad) > maxAAD {
		return fmt.Errorf("%v: %w: %d bytes of data, %d of aad (max %d, %d)", c, ErrFrameSize, max(n, len(in)), len(aad), MaxFrameRequest, maxAAD)
	}
	if c.Mode == CBC && n%BlockSize != 0 {
		return fmt.Errorf("%v: %w: %d bytes", c, ErrBlockSize, n)
	}
	out := n + FrameTagSize
	if len(in) > n { // Open: the output is the plaintext
		out = n
	}
	if len(dst) < out {
		return fmt.Errorf("%v: %w: %d < %d", c, ErrShortDst, len(dst), out)
	}
	if inexactOverlap(dst[:out], in) || inexactOverlap(dst[:out], aad) {
		return fmt.Errorf("%v: %w", c, ErrOverlap)
	}
	return nil
}

// IsFrameArgError reports whether err is an argument error of a Crypter or
// of a FrameSealer: the caller's to fix, not an engine fault.
func IsFrameArgError(err error) bool { return IsArgError(err) || errors.Is(err, ErrFrameSize) }
