//go:build !linux

package engine

import (
	"fmt"

	"go.uber.org/zap"
)

// AFALGAEAD is the AF_ALG engine that does whole frames (cipher and
// HMAC-SHA256) in one kernel request. AF_ALG exists only on Linux; here
// every cipher is unavailable with an error wrapping ErrUnsupported.
type AFALGAEAD struct {
	driver string
	log    *zap.Logger
}

var (
	_ Engine      = (*AFALGAEAD)(nil)
	_ FrameEngine = (*AFALGAEAD)(nil)
)

// NewAFALGAEAD returns the AF_ALG aead engine; outside Linux it serves
// nothing.
func NewAFALGAEAD(driver string, o Options) *AFALGAEAD {
	return &AFALGAEAD{driver: driver, log: o.logger("afalg-aead")}
}

// Name implements Engine: "afalg-aead" or "afalg-aead:"+driver.
func (a *AFALGAEAD) Name() string {
	if a.driver == "" {
		return AFALGAEADName
	}
	return AFALGAEADName + ":" + a.driver
}

// AuthencName is the kernel algorithm name of c's frames.
func AuthencName(c Cipher) string { return "authenc(hmac(sha256)," + c.KernelName() + ")" }

// Driver implements Engine: always unavailable outside Linux.
func (a *AFALGAEAD) Driver(c Cipher) (Driver, error) {
	if !c.Valid() {
		return Driver{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	return Driver{}, a.unsupported(c)
}

// NewCrypter implements Engine: always unavailable outside Linux.
func (a *AFALGAEAD) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	return nil, a.unsupported(c)
}

// NewFrameSealer implements FrameEngine: always unavailable outside Linux.
func (a *AFALGAEAD) NewFrameSealer(c Cipher, encKey, macKey []byte) (FrameSealer, error) {
	if err := CheckKey(c, encKey); err != nil {
		return nil, err
	}
	return nil, a.unsupported(c)
}

func (a *AFALGAEAD) unsupported(c Cipher) error {
	a.log.Debug("AF_ALG unsupported on this platform", zap.Stringer("cipher", c))
	return fmt.Errorf("%s %v: %w: AF_ALG sockets exist only on Linux", a.Name(), c, ErrUnsupported)
}
