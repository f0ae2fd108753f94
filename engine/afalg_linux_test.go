//go:build linux

package engine_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

var (
	cbc256 = engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	ctr256 = engine.Cipher{Mode: engine.CTR, KeyBits: 256}
)

// requireAFALG skips t where the kernel has no AF_ALG (this development
// machine); the harness VM has it.
func requireAFALG(t testing.TB) {
	t.Helper()
	_, err := engine.NewAFALG("", engine.Options{}).Driver(cbc256)
	if errors.Is(err, engine.ErrUnavailable) && !errors.Is(err, engine.ErrNoAlgorithm) {
		t.Skipf("no AF_ALG here; run in the VM (go run ./harness/vm -virtio-crypto -test ./engine -run Kernel): %v", err)
	}
	if err != nil {
		t.Fatalf("AF_ALG probe: %v", err)
	}
}

// TestAFALGNoKernelSupport checks the error on this machine's kernel, whose
// socket(AF_ALG) fails with EAFNOSUPPORT.
func TestAFALGNoKernelSupport(t *testing.T) {
	_, err := engine.NewAFALG("virtio_crypto", engine.Options{}).Driver(cbc256)
	if !errors.Is(err, syscall.EAFNOSUPPORT) {
		t.Skipf("socket(AF_ALG) does not fail with EAFNOSUPPORT here (%v)", err)
	}
	if !errors.Is(err, engine.ErrUnavailable) || !strings.Contains(err.Error(), "CONFIG_CRYPTO_USER_API_SKCIPHER") {
		t.Errorf("Driver = %v; want ErrUnavailable naming CONFIG_CRYPTO_USER_API_SKCIPHER", err)
	}
}

// driverCase is an AF_ALG driver to test, with the ciphers of its mode.
type driverCase struct {
	name    string
	ciphers []engine.Cipher
}

// kernelDriverCases lists every driver /proc/crypto registers for cbc(aes),
// ctr(aes) and ecb(aes), plus the generic template instances, which bind
// creates.
func kernelDriverCases(t testing.TB) []driverCase {
	t.Helper()
	var out []driverCase
	for _, m := range []engine.Mode{engine.CBC, engine.CTR, engine.ECB} {
		var cs []engine.Cipher
		for _, c := range engine.MeasureCiphers {
			if c.Mode == m {
				cs = append(cs, c)
			}
		}
		ds, err := engine.KernelDrivers(cs[0])
		if err != nil {
			t.Fatal(err)
		}
		names := []string{m.String() + "(aes-generic)"}
		for _, d := range ds {
			if !slices.Contains(names, d.Name) {
				names = append(names, d.Name)
			}
		}
		for _, n := range names {
			out = append(out, driverCase{n, cs})
		}
	}
	return out
}

func TestKernelAFALG(t *testing.T) {
	requireAFALG(t)
	t.Run("default", func(t *testing.T) {
		enginetest.Run(t, engine.NewAFALG("", engine.Options{Logger: zaptest.NewLogger(t)}), enginetest.Options{})
	})
	for _, dc := range kernelDriverCases(t) {
		t.Run(dc.name, func(t *testing.T) {
			e := engine.NewAFALG(dc.name, engine.Options{Logger: zaptest.NewLogger(t)})
			enginetest.Run(t, e, enginetest.Options{Ciphers: dc.ciphers})
			for _, c := range dc.ciphers {
				d, err := e.Driver(c)
				if err != nil {
					continue // skipped by Run with the reason
				}
				if d.Name != dc.name {
					t.Errorf("Driver(%v) = %s, want %s", c, d.Name, dc.name)
				}
				t.Logf("%v: %s, priority %d, async %v, hardware %v (%s)", c, d, d.Priority, d.Async, d.Hardware, d.HardwareWhy)
			}
		})
	}
}

// TestKernelAFALGDriverReport checks which driver the engine reports, and
// the errors of driver names that resolve to nothing.
func TestKernelAFALGDriverReport(t *testing.T) {
	requireAFALG(t)
	for _, c := range []engine.Cipher{cbc256, ctr256} {
		ds, err := engine.KernelDrivers(c)
		if err != nil || len(ds) == 0 {
			t.Fatalf("KernelDrivers(%v) = %v, %v", c, ds, err)
		}
		// A plain name binds the highest-priority driver.
		e := engine.NewAFALG("", engine.Options{})
		d, err := e.Driver(c)
		if err != nil || d.Name != ds[0].Name || d.Priority != ds[0].Priority || d.Module == "" {
			t.Errorf("default Driver(%v) = %+v, %v; want %s", c, d, err, ds[0].Name)
		}
		cr, err := e.NewCrypter(c, make([]byte, c.KeySize()))
		if err != nil {
			t.Fatal(err)
		}
		if cr.Driver() != d {
			t.Errorf("Crypter.Driver() = %+v, engine says %+v", cr.Driver(), d)
		}
		cr.Close()
		// Every listed driver, and a prefix of it, resolves to a driver
		// with that name or prefix.
		for _, want := range ds {
			prefix := want.Name[:len(want.Name)-1]
			got, err := engine.NewAFALG(prefix, engine.Options{}).Driver(c)
			if err != nil || !strings.HasPrefix(got.Name, prefix) {
				t.Errorf("prefix %q: %+v, %v", prefix, got, err)
			}
		}
		// No match: ErrNoAlgorithm listing what exists.
		_, err = engine.NewAFALG("no-such-driver", engine.Options{}).Driver(c)
		if !errors.Is(err, engine.ErrNoAlgorithm) {
			t.Errorf("no-such-driver: %v, want ErrNoAlgorithm", err)
		} else {
			for _, d := range ds {
				if !strings.Contains(err.Error(), d.Name) {
					t.Errorf("error %q does not list %s", err, d.Name)
				}
			}
		}
		// A template the kernel cannot build: bind says ENOENT.
		_, err = engine.NewAFALG(c.Mode.String()+"(no-such-cipher)", engine.Options{}).Driver(c)
		if !errors.Is(err, engine.ErrNoAlgorithm) || !errors.Is(err, syscall.ENOENT) {
			t.Errorf("unknown template: %v, want ErrNoAlgorithm wrapping ENOENT", err)
		}
	}
	// A driver of the other mode is refused, not bound.
	cbcDrivers, _ := engine.KernelDrivers(cbc256)
	for _, d := range cbcDrivers {
		if _, err := engine.NewAFALG(d.Name, engine.Options{}).Driver(ctr256); !errors.Is(err, engine.ErrNoAlgorithm) {
			t.Errorf("%s for %v: %v, want ErrNoAlgorithm", d.Name, ctr256, err)
		}
	}
	if _, err := engine.NewAFALG("ctr(aes-generic)", engine.Options{}).Driver(cbc256); !errors.Is(err, engine.ErrNoAlgorithm) {
		t.Errorf("ctr(aes-generic) for %v: %v, want ErrNoAlgorithm", cbc256, err)
	}
}

// virtioCryptoDevices returns the virtio device names (virtio0, ...) bound
// to the virtio_crypto driver.
func virtioCryptoDevices(t testing.TB) []string {
	t.Helper()
	paths, err := filepath.Glob("/sys/bus/virtio/drivers/virtio_crypto/virtio*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range paths {
		out = append(out, filepath.Base(p))
	}
	return out
}

// TestKernelVirtioInterrupts proves from /proc/interrupts that the
// virtio-crypto device served the requests of afalg:virtio_crypto_aes_cbc,
// and that a CPU driver's requests did not reach it.
func TestKernelVirtioInterrupts(t *testing.T) {
	requireAFALG(t)
	ds, err := engine.KernelDrivers(cbc256)
	if err != nil {
		t.Fatal(err)
	}
	var virtio, cpu string
	for _, d := range ds {
		switch {
		case strings.HasPrefix(d.Name, "virtio_crypto") && virtio == "":
			virtio = d.Name
		case !d.Hardware && cpu == "":
			cpu = d.Name
		}
	}
	devs := virtioCryptoDevices(t)
	if virtio == "" || len(devs) == 0 {
		t.Skipf("no virtio_crypto driver for cbc(aes) (drivers %v, devices %v); run the VM with -virtio-crypto", ds, devs)
	}
	if pol := engine.ReadAFALGPolicy(); pol.SoftwareOnly {
		// Linux 7.2 and later: AF_ALG must refuse the device, and say why.
		_, err := engine.NewAFALG(virtio, engine.Options{}).Driver(cbc256)
		if !errors.Is(err, engine.ErrAFALGRefused) || !strings.Contains(err.Error(), "cryptodev") {
			t.Fatalf("afalg:%s on %s: %v; want ErrAFALGRefused pointing at cryptodev", virtio, pol.Release, err)
		}
		if note := engine.KernelAFALGNote(); !strings.Contains(note, "reaches only CPU implementations") || !strings.Contains(note, virtio) {
			t.Errorf("note = %q, want it to name %s", note, virtio)
		}
		t.Logf("%s refuses the device as it should: %v", pol.Release, err)
		return
	}
	if cpu == "" {
		cpu = "cbc(aes-generic)"
	}
	irqs := func() uint64 {
		in, err := engine.ReadInterrupts()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, dev := range devs {
			n += in.Device(dev)
		}
		return n
	}
	const requests = 200
	run := func(driver string) (engine.Driver, uint64) {
		e := engine.NewAFALG(driver, engine.Options{})
		cr, err := e.NewCrypter(cbc256, make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		defer cr.Close()
		buf, iv := make([]byte, 1024), make([]byte, 16)
		before := irqs()
		for range requests {
			if err := cr.Encrypt(buf, buf, iv); err != nil {
				t.Fatal(err)
			}
		}
		return cr.Driver(), irqs() - before
	}
	d, n := run(virtio)
	t.Logf("%d requests on %s: %d interrupts on %v", requests, d.Name, n, devs)
	if !d.Hardware || !strings.HasPrefix(d.Name, "virtio_crypto") {
		t.Errorf("crypter driver %+v, want hardware virtio_crypto", d)
	}
	if n < requests*9/10 {
		t.Errorf("%d requests through %s raised only %d virtio interrupts", requests, d.Name, n)
	}
	d, n = run(cpu)
	t.Logf("%d requests on %s: %d interrupts on %v", requests, d.Name, n, devs)
	if d.Hardware || n > requests/10 {
		t.Errorf("CPU driver %s (hardware=%v) raised %d virtio interrupts for %d requests", d.Name, d.Hardware, n, requests)
	}
}

func BenchmarkKernelAFALG(b *testing.B) {
	requireAFALG(b)
	for _, dc := range kernelDriverCases(b) {
		c := dc.ciphers[len(dc.ciphers)-1] // 256-bit key
		e := engine.NewAFALG(dc.name, engine.Options{})
		if _, err := e.Driver(c); err != nil {
			b.Logf("%s: %v", dc.name, err)
			continue
		}
		cr, err := e.NewCrypter(c, make([]byte, c.KeySize()))
		if err != nil {
			b.Fatal(err)
		}
		for _, size := range []int{16, 64, 256, 1024, 1472, 1500, 4096, 8192, 16384, 16400, 32768, 65536} {
			if c.Mode == engine.CBC && size%engine.BlockSize != 0 {
				continue
			}
			buf, iv := make([]byte, size), make([]byte, 16)
			b.Run(fmt.Sprintf("%s/%d", dc.name, size), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := cr.Encrypt(buf, buf, iv); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		cr.Close()
	}
}

func TestKernelAFALGSyscallCount(t *testing.T) {
	requireAFALG(t)
	cr, err := engine.NewAFALG("", engine.Options{}).NewCrypter(cbc256, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	defer cr.Close()
	sc, ok := cr.(interface{ Syscalls() uint64 })
	if !ok {
		t.Fatalf("%T does not count its syscalls", cr)
	}
	buf, iv := make([]byte, 4096), make([]byte, 16)
	before := sc.Syscalls()
	for range 10 {
		if err := cr.Encrypt(buf, buf, iv); err != nil {
			t.Fatal(err)
		}
	}
	if n := sc.Syscalls() - before; n != 20 {
		t.Errorf("10 requests of 4 KiB made %d syscalls, want 20", n)
	}
}
