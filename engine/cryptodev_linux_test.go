package engine_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

// skipWithoutCryptodev skips a test that needs the cryptodev-linux module.
func skipWithoutCryptodev(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/crypto"); err != nil {
		t.Skipf("no /dev/crypto (%v): the cryptodev-linux module is not loaded; Debian does not package it, so this runs only where it is built and loaded", err)
	}
}

func TestKernelCryptodev(t *testing.T) {
	skipWithoutCryptodev(t)
	e := engine.NewCryptodev(engine.Options{})
	for _, c := range engine.Ciphers {
		if d, err := e.Driver(c); err != nil {
			t.Logf("%v: %v", c, err)
		} else {
			t.Logf("%v: %s (hardware %v: %s)", c, d.Name, d.Hardware, d.HardwareWhy)
		}
	}
	enginetest.Run(t, e, enginetest.Options{})
}

// Beyond the suite: in-place operation across several kernel requests
// (the chunk boundaries, where CBC decrypt must chain from a ciphertext
// block that the in-place request has already overwritten), and the IV is
// never written back.
func TestKernelCryptodevInPlaceChunks(t *testing.T) {
	skipWithoutCryptodev(t)
	e := engine.NewCryptodev(engine.Options{})
	for _, c := range engine.Ciphers {
		if _, err := e.Driver(c); err != nil {
			t.Logf("skip %v: %v", c, err)
			continue
		}
		key := bytes.Repeat([]byte{0x5a}, c.KeySize())
		cr, err := e.NewCrypter(c, key)
		if err != nil {
			t.Fatal(err)
		}
		sw, err := engine.Software{}.NewCrypter(c, key)
		if err != nil {
			t.Fatal(err)
		}
		n := 3*64<<10 + 48 // three full requests and a short one
		if c.Mode == engine.CTR {
			n += 5
		}
		plain := make([]byte, n)
		for i := range plain {
			plain[i] = byte(i * 7)
		}
		iv := enginetest.CarryIVs[0]
		ivCopy := bytes.Clone(iv)
		for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
			want := make([]byte, n)
			if err := engine.Crypt(sw, d, want, plain, iv); err != nil {
				t.Fatal(err)
			}
			buf := bytes.Clone(plain)
			if err := engine.Crypt(cr, d, buf, buf, iv); err != nil {
				t.Fatalf("%v %v in place: %v", c, d, err)
			}
			if !bytes.Equal(buf, want) {
				t.Errorf("%v %v in place of %d bytes differs from software", c, d, n)
			}
			if !bytes.Equal(iv, ivCopy) {
				t.Fatalf("%v %v: IV written back", c, d)
			}
		}
		if err := cr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := cr.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := cr.Encrypt(plain[:16], plain[:16], iv); !errors.Is(err, engine.ErrClosed) {
			t.Errorf("Encrypt after Close = %v, want ErrClosed", err)
		}
	}
}

// cryptodev:hw serves a cipher only on a kernel-driver-only driver and then
// passes the conformance suite on it; where the module binds a CPU driver it
// refuses with ErrNoAlgorithm and names that driver, so both cases are
// checked against what the plain engine binds. OFFLOAD_CRYPTODEV_HW=DRIVER
// (set by the CI run that takes the CPU's AES drivers out) makes the test
// fail unless every CBC cipher is served by DRIVER through cryptodev:hw.
func TestKernelCryptodevHardware(t *testing.T) {
	skipWithoutCryptodev(t)
	want := os.Getenv("OFFLOAD_CRYPTODEV_HW")
	plain := engine.NewCryptodev(engine.Options{})
	hw, err := engine.Open("cryptodev:hw", engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	served := 0
	for _, c := range engine.Ciphers {
		bound, err := plain.Driver(c)
		if err != nil {
			t.Logf("%v: %v", c, err)
			continue
		}
		d, err := hw.Driver(c)
		switch {
		case bound.Hardware && (err != nil || d.Name != bound.Name || !d.Hardware):
			t.Errorf("%v: cryptodev binds hardware driver %s, cryptodev:hw gives %+v, %v", c, bound.Name, d, err)
		case !bound.Hardware && (!errors.Is(err, engine.ErrNoAlgorithm) || !strings.Contains(err.Error(), bound.Name)):
			t.Errorf("%v: cryptodev binds CPU driver %s, cryptodev:hw gives %+v, %v; want ErrNoAlgorithm naming it", c, bound.Name, d, err)
		case err == nil:
			t.Logf("%v: cryptodev:hw serves with %s (%s)", c, d.Name, d.HardwareWhy)
			served++
		default:
			t.Logf("%v: cryptodev:hw refuses: %v", c, err)
		}
		if want != "" && c.Mode == engine.CBC && (err != nil || d.Name != want) {
			t.Errorf("%v: OFFLOAD_CRYPTODEV_HW=%s, cryptodev:hw gives %+v, %v", c, want, d, err)
		}
	}
	if served > 0 {
		enginetest.Run(t, hw, enginetest.Options{})
	}
}

// On a machine without /dev/crypto (this one, CI) every cipher is
// unavailable, and the error says what to do.
func TestCryptodevUnavailableWithoutDevice(t *testing.T) {
	if _, err := os.Stat("/dev/crypto"); err == nil {
		t.Skip("/dev/crypto exists here: TestKernelCryptodev covers this machine")
	}
	e := engine.NewCryptodev(engine.Options{})
	if e.Name() != engine.CryptodevName || e.Name() != "cryptodev" {
		t.Errorf("Name() = %q", e.Name())
	}
	// cryptodev:hw says the same: the device is missing, not a driver.
	if _, err := engine.NewCryptodevHardware(engine.Options{}).Driver(engine.Ciphers[0]); !errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrNoAlgorithm) {
		t.Errorf("cryptodev:hw Driver = %v, want ErrUnavailable for the missing device", err)
	}
	for _, c := range engine.Ciphers {
		_, err := e.Driver(c)
		if !errors.Is(err, engine.ErrUnavailable) {
			t.Fatalf("Driver(%v) = %v, want an error wrapping ErrUnavailable", c, err)
		}
		if errors.Is(err, engine.ErrNoAlgorithm) {
			t.Errorf("Driver(%v) = %v: a missing device is not a missing algorithm", c, err)
		}
		if !strings.Contains(err.Error(), "no /dev/crypto: load the cryptodev module (cryptodev-linux)") {
			t.Errorf("Driver(%v) = %q, want it to name /dev/crypto and the module", c, err)
		}
		if _, err := e.NewCrypter(c, make([]byte, c.KeySize())); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("NewCrypter(%v) = %v, want an error wrapping ErrUnavailable", c, err)
		}
	}
}
