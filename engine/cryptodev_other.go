//go:build !linux

package engine

import "fmt"

// Cryptodev is the engine backed by /dev/crypto, the character device of
// the cryptodev-linux module. It exists only on Linux; here every cipher is
// unavailable with an error wrapping ErrUnsupported.
type Cryptodev struct{ hwOnly bool }

var _ Engine = (*Cryptodev)(nil)

// NewCryptodev returns the cryptodev engine. It never fails: whether a
// cipher can be served is asked per cipher with Driver.
func NewCryptodev(o Options) *Cryptodev { return &Cryptodev{} }

// NewCryptodevHardware returns the "cryptodev:hw" engine, unavailable here
// like the plain one.
func NewCryptodevHardware(o Options) *Cryptodev { return &Cryptodev{hwOnly: true} }

// Name implements Engine: "cryptodev" or "cryptodev:hw".
func (e *Cryptodev) Name() string {
	if e.hwOnly {
		return CryptodevHardwareName
	}
	return CryptodevName
}

// Driver implements Engine: always unavailable outside Linux.
func (*Cryptodev) Driver(c Cipher) (Driver, error) {
	if !c.Measurable() {
		return Driver{}, fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	return Driver{}, errCryptodevUnsupported(c)
}

// NewCrypter implements Engine: always unavailable outside Linux.
func (*Cryptodev) NewCrypter(c Cipher, key []byte) (Crypter, error) {
	if err := CheckKey(c, key); err != nil {
		return nil, err
	}
	return nil, errCryptodevUnsupported(c)
}

func errCryptodevUnsupported(c Cipher) error {
	return fmt.Errorf("cryptodev: %v: %w: /dev/crypto (cryptodev-linux) exists only on Linux", c, ErrUnsupported)
}
