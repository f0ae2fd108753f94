//go:build !linux

package engine

import (
	"fmt"

	"go.uber.org/zap"
)

// AFALGName is the spec of the AF_ALG engine; "afalg:"+driver binds a driver.
const AFALGName = "afalg"

// AFALG is the engine backed by the kernel's AF_ALG sockets. AF_ALG exists
// only on Linux; here every cipher is unavailable with an error wrapping
// ErrUnsupported.
type AFALG struct {
	driver string
	log    *zap.Logger
}

var _ Engine = (*AFALG)(nil)

// NewAFALG returns the AF_ALG engine. It never fails: availability is
// reported per cipher by Driver(c), here always ErrUnsupported.
func NewAFALG(driver string, o Options) *AFALG {
	return &AFALG{driver: driver, log: o.logger("afalg")}
}

// Name implements Engine: "afalg" or "afalg:"+driver.
func (a *AFALG) Name() string {
	if a.driver == "" {
		return AFALGName
	}
	return AFALGName + ":" + a.driver
}

// Driver implements Engine: always unavailable outside Linux.
func (a *AFALG) Driver(c Cipher) (Driver, error) {
	if !c.Measurable() {
		return Driver{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	return Driver{}, a.unsupported(c)
}

// NewCrypter implements Engine: always unavailable outside Linux.
func (a *AFALG) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	return nil, a.unsupported(c)
}

func (a *AFALG) unsupported(c Cipher) error {
	a.log.Debug("AF_ALG unsupported on this platform", zap.Stringer("cipher", c))
	return fmt.Errorf("%s %v: %w: AF_ALG sockets exist only on Linux", a.Name(), c, ErrUnsupported)
}

// KernelDrivers lists the kernel's drivers for c; outside Linux there is no
// kernel crypto API to ask.
func KernelDrivers(c Cipher) ([]Driver, error) {
	if !c.Measurable() {
		return nil, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	return nil, fmt.Errorf("kernel drivers for %s: %w: /proc/crypto and AF_ALG exist only on Linux", c.KernelName(), ErrUnsupported)
}

// ReadAFALGPolicy describes the running kernel's AF_ALG: outside Linux
// there is none, so nothing restricts it.
func ReadAFALGPolicy() AFALGPolicy { return NewAFALGPolicy("", "") }

// KernelAFALGNote is "" outside Linux (see the Linux version).
func KernelAFALGNote() string { return "" }
