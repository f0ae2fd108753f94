package engine

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"runtime"

	"golang.org/x/sys/cpu"
)

// SoftwareName is the spec of the software engine.
const SoftwareName = "software"

// Software is the engine backed by Go's crypto/aes: AES-NI on amd64, the
// ARMv8 Cryptography Extensions on arm64, constant-time generic code
// elsewhere (MIPS, 32-bit ARM). It is always available.
type Software struct{}

var _ Engine = Software{}

// Name implements Engine.
func (Software) Name() string { return SoftwareName }

// Driver implements Engine.
func (Software) Driver(c Cipher) (Driver, error) {
	if !c.Measurable() {
		return Driver{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	return softwareDriver(c), nil
}

// NewCrypter implements Engine.
func (Software) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("software: %w", err)
	}
	s := &softCrypter{c: c, b: b, drv: softwareDriver(c)}
	var zero [BlockSize]byte
	if c.Mode == CBC {
		s.cbcEnc = cipher.NewCBCEncrypter(b, zero[:]).(cbcMode)
		s.cbcDec = cipher.NewCBCDecrypter(b, zero[:]).(cbcMode)
	}
	return s, nil
}

// HardwareAES reports whether Go's crypto/aes uses AES instructions on this
// CPU. It honours GODEBUG=cpu.aes=off, which turns them off for crypto/aes
// too.
func HardwareAES() bool {
	switch runtime.GOARCH {
	case "amd64", "386":
		return cpu.X86.HasAES && cpu.X86.HasPCLMULQDQ
	case "arm64":
		return cpu.ARM64.HasAES
	case "s390x":
		return cpu.S390X.HasAES
	case "ppc64", "ppc64le":
		return true
	}
	return false
}

func softwareDriver(c Cipher) Driver {
	impl := "go/generic"
	if HardwareAES() {
		switch runtime.GOARCH {
		case "amd64", "386":
			impl = "go/aes-ni"
		case "arm64":
			impl = "go/armv8-ce"
		default:
			impl = "go/" + runtime.GOARCH + "-asm"
		}
	}
	return Driver{
		Name:        impl,
		Algorithm:   c.KernelName(),
		Hardware:    false,
		HardwareWhy: "Go crypto/aes runs on the CPU",
	}
}

// cbcMode is what crypto/cipher's CBC modes implement: SetIV lets one
// BlockMode serve every call without allocating.
type cbcMode interface {
	cipher.BlockMode
	SetIV([]byte)
}

// ctrStdMin is the size from which CTR uses crypto/cipher's own stream when
// the CPU has AES instructions: its interleaved assembly is about 7x faster
// than one Block.Encrypt per counter, at the price of one 512-byte
// allocation per call (the stream copies the key schedule). Below it, and
// always on CPUs without AES instructions (routers), the allocation-free
// loop below is as fast or faster.
const ctrStdMin = 256

type softCrypter struct {
	c      Cipher
	b      cipher.Block
	drv    Driver
	cbcEnc cbcMode
	cbcDec cbcMode
	ctr    [BlockSize]byte
	ks     [32 * BlockSize]byte
	closed bool
}

func (s *softCrypter) Cipher() Cipher { return s.c }
func (s *softCrypter) Driver() Driver { return s.drv }
func (s *softCrypter) Close() error   { s.closed = true; return nil }

func (s *softCrypter) Encrypt(dst, src, iv []byte) error { return s.crypt(Encrypt, dst, src, iv) }
func (s *softCrypter) Decrypt(dst, src, iv []byte) error { return s.crypt(Decrypt, dst, src, iv) }

func (s *softCrypter) crypt(d Direction, dst, src, iv []byte) error {
	if s.closed {
		return ErrClosed
	}
	if err := CheckArgs(s.c, dst, src, iv); err != nil {
		return err
	}
	if len(src) == 0 {
		return nil
	}
	dst = dst[:len(src)]
	if s.c.Mode == ECB {
		// crypto/aes has no ECB mode (on purpose); block by block is what
		// the kernel's ecb(aes-generic) does too.
		for i := 0; i < len(src); i += BlockSize {
			if d == Decrypt {
				s.b.Decrypt(dst[i:i+BlockSize], src[i:i+BlockSize])
			} else {
				s.b.Encrypt(dst[i:i+BlockSize], src[i:i+BlockSize])
			}
		}
		return nil
	}
	if s.c.Mode == CBC {
		m := s.cbcEnc
		if d == Decrypt {
			m = s.cbcDec
		}
		m.SetIV(iv)
		m.CryptBlocks(dst, src)
		return nil
	}
	if len(src) >= ctrStdMin && HardwareAES() {
		cipher.NewCTR(s.b, iv).XORKeyStream(dst, src)
		return nil
	}
	s.xorCTR(dst, src, iv)
	return nil
}

// xorCTR is CTR mode with a full 128-bit big-endian counter, the way the
// kernel's ctr(aes) and crypto/cipher count.
func (s *softCrypter) xorCTR(dst, src, iv []byte) {
	hi := binary.BigEndian.Uint64(iv[:8])
	lo := binary.BigEndian.Uint64(iv[8:])
	for len(src) > 0 {
		n := min(len(s.ks), (len(src)+BlockSize-1)&^(BlockSize-1))
		for i := 0; i < n; i += BlockSize {
			binary.BigEndian.PutUint64(s.ctr[:8], hi)
			binary.BigEndian.PutUint64(s.ctr[8:], lo)
			s.b.Encrypt(s.ks[i:i+BlockSize], s.ctr[:])
			lo++
			if lo == 0 {
				hi++
			}
		}
		m := min(n, len(src))
		subtle.XORBytes(dst[:m], src[:m], s.ks[:m])
		dst, src = dst[m:], src[m:]
	}
}
