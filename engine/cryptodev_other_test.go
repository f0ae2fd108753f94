//go:build !linux

package engine_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

func TestCryptodevUnsupportedHere(t *testing.T) {
	if n := engine.NewCryptodevHardware(engine.Options{}).Name(); n != "cryptodev:hw" {
		t.Errorf("hardware Name() = %q", n)
	}
	e := engine.NewCryptodev(engine.Options{})
	if e.Name() != engine.CryptodevName {
		t.Errorf("Name() = %q", e.Name())
	}
	for _, c := range engine.Ciphers {
		_, err := e.Driver(c)
		if !errors.Is(err, engine.ErrUnsupported) || !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("Driver(%v) = %v, want an error wrapping ErrUnsupported", c, err)
		}
		if err != nil && !strings.Contains(err.Error(), "/dev/crypto") {
			t.Errorf("Driver(%v) = %q: should name /dev/crypto", c, err)
		}
		if _, err := e.NewCrypter(c, make([]byte, c.KeySize())); !errors.Is(err, engine.ErrUnsupported) {
			t.Errorf("NewCrypter(%v) = %v, want an error wrapping ErrUnsupported", c, err)
		}
		if _, err := e.NewCrypter(c, make([]byte, 5)); !errors.Is(err, engine.ErrKeySize) {
			t.Errorf("NewCrypter(%v, 5-byte key) = %v, want ErrKeySize first", c, err)
		}
	}
	if _, err := e.Driver(engine.Cipher{Mode: engine.CBC, KeyBits: 64}); !errors.Is(err, engine.ErrUnknownCipher) {
		t.Errorf("Driver(aes-64-cbc) = %v, want ErrUnknownCipher", err)
	}
}
