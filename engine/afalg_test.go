package engine_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// TestAFALGUnavailable runs for real where AF_ALG is missing (this
// development machine, every non-Linux system): the engine must say so with
// an error wrapping ErrUnavailable that names AF_ALG, never fall back.
func TestAFALGUnavailable(t *testing.T) {
	a := engine.NewAFALG("", engine.Options{})
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	d, err := a.Driver(c)
	if err == nil {
		t.Skipf("AF_ALG works on this kernel (%v binds %s): TestKernelAFALG covers it", c, d)
	}
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "AF_ALG") {
		t.Fatalf("Driver(%v) = %v; want an ErrUnavailable error that mentions AF_ALG", c, err)
	}
	if runtime.GOOS != "linux" && !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("on %s: %v, want ErrUnsupported", runtime.GOOS, err)
	}
	t.Logf("Driver(%v): %v", c, err)
	for _, cc := range engine.Ciphers {
		if _, err := a.Driver(cc); !errors.Is(err, engine.ErrUnavailable) {
			t.Errorf("Driver(%v) = %v, want ErrUnavailable", cc, err)
		}
		cr, err := a.NewCrypter(cc, make([]byte, cc.KeySize()))
		if cr != nil || !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "AF_ALG") {
			t.Errorf("NewCrypter(%v) = %v, %v; want ErrUnavailable naming AF_ALG", cc, cr, err)
		}
	}
	// Argument errors come first, as on every engine.
	if _, err := a.NewCrypter(c, make([]byte, 17)); !errors.Is(err, engine.ErrKeySize) {
		t.Errorf("17-byte key: %v, want ErrKeySize", err)
	}
	if _, err := a.Driver(engine.Cipher{Mode: engine.CTR, KeyBits: 64}); !errors.Is(err, engine.ErrUnknownCipher) {
		t.Errorf("aes-64-ctr: %v, want ErrUnknownCipher", err)
	}
}

func TestAFALGName(t *testing.T) {
	for driver, want := range map[string]string{"": "afalg", "virtio_crypto": "afalg:virtio_crypto", "cbc(aes-generic)": "afalg:cbc(aes-generic)"} {
		if got := engine.NewAFALG(driver, engine.Options{}).Name(); got != want {
			t.Errorf("NewAFALG(%q).Name() = %q, want %q", driver, got, want)
		}
	}
}

func TestKernelDriversPlatform(t *testing.T) {
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 128}
	ds, err := engine.KernelDrivers(c)
	if runtime.GOOS != "linux" {
		if ds != nil || !errors.Is(err, engine.ErrUnsupported) {
			t.Fatalf("KernelDrivers = %v, %v; want nil and ErrUnsupported", ds, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("KernelDrivers: %v", err)
	}
	for i, d := range ds {
		if d.Algorithm != "cbc(aes)" || d.Name == "" || (i > 0 && d.Priority > ds[i-1].Priority) {
			t.Errorf("driver %d: %+v (list %v)", i, d, ds)
		}
	}
	t.Logf("cbc(aes) drivers here: %v", ds)
	if _, err := engine.KernelDrivers(engine.Cipher{}); !errors.Is(err, engine.ErrUnknownCipher) {
		t.Errorf("KernelDrivers(zero cipher) = %v, want ErrUnknownCipher", err)
	}
}
