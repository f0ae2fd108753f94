package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
)

// The errno → sentinel table. The errnos arrive wrapped the way
// cryptodev_sys_linux.go returns them (*os.PathError for open,
// *os.SyscallError for ioctls) and must stay reachable after mapping.
func TestCryptodevErrorMapping(t *testing.T) {
	c := Cipher{CBC, 192}
	for _, tc := range []struct {
		step        cryptodevStep
		errno       syscall.Errno
		unavailable bool
		noAlgorithm bool
		mention     string
	}{
		{stepOpen, syscall.ENOENT, true, false, "no /dev/crypto: load the cryptodev module (cryptodev-linux)"},
		{stepOpen, syscall.ENODEV, true, false, "no /dev/crypto: load the cryptodev module"},
		{stepOpen, syscall.ENXIO, true, false, "no /dev/crypto: load the cryptodev module"},
		{stepOpen, syscall.EACCES, true, false, "permission denied opening /dev/crypto"},
		{stepOpen, syscall.EPERM, true, false, "permission denied opening /dev/crypto"},
		{stepOpen, syscall.EMFILE, false, false, "too many open files"},
		{stepSession, syscall.EINVAL, true, true, "no kernel driver for aes-192-cbc (cbc(aes) with a 192-bit key)"},
		{stepSession, syscall.ENOENT, true, true, "no kernel driver for aes-192-cbc"},
		{stepSession, syscall.ENOTTY, true, false, "/dev/crypto does not take cryptodev ioctls (not a cryptodev-linux device"},
		{stepSession, syscall.ENOSYS, true, false, "/dev/crypto does not take cryptodev ioctls"},
		{stepSession, syscall.ENOMEM, false, false, "cannot allocate memory"},
		{stepSession, syscall.EFAULT, false, false, "bad address"},
		{stepInfo, syscall.EINVAL, false, false, "invalid argument"},
		{stepInfo, syscall.ENOTTY, true, false, "does not take cryptodev ioctls"},
		{stepCrypt, syscall.ENOSYS, true, false, "does not take cryptodev ioctls"},
		{stepCrypt, syscall.EINVAL, false, false, "invalid argument"},
		{stepCrypt, syscall.EFAULT, false, false, "bad address"},
		{stepFree, syscall.ENOENT, false, false, "no such file"},
	} {
		var raw error = os.NewSyscallError("ioctl X", tc.errno)
		if tc.step == stepOpen {
			raw = &os.PathError{Op: "open", Path: cryptodevPath, Err: tc.errno}
		}
		err := cryptodevError(cryptodevPath, tc.step, c, raw)
		name := fmt.Sprintf("step %d %v", tc.step, tc.errno)
		if got := errors.Is(err, ErrUnavailable); got != tc.unavailable {
			t.Errorf("%s: %q: wraps ErrUnavailable = %v, want %v", name, err, got, tc.unavailable)
		}
		if got := errors.Is(err, ErrNoAlgorithm); got != tc.noAlgorithm {
			t.Errorf("%s: %q: wraps ErrNoAlgorithm = %v, want %v", name, err, got, tc.noAlgorithm)
		}
		if !errors.Is(err, tc.errno) {
			t.Errorf("%s: %q: errno no longer reachable", name, err)
		}
		if IsArgError(err) {
			t.Errorf("%s: %q: mapped to an argument error", name, err)
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %q: should say %q", name, err, tc.mention)
		}
	}
	// An error without an errno is passed through, wrapped.
	plain := errors.New("boom")
	if err := cryptodevError(cryptodevPath, stepCrypt, c, plain); !errors.Is(err, plain) || errors.Is(err, ErrUnavailable) {
		t.Errorf("plain error mapped to %v", err)
	}
}

func TestCryptodevDriverFromSessionInfo(t *testing.T) {
	info := func(name, driver string, flags uint32) *sessionInfoOp {
		var i sessionInfoOp
		copy(i.cipherInfo.craName[:], name)
		copy(i.cipherInfo.craDriverName[:], driver)
		i.flags = flags
		return &i
	}
	cbc, ctr := Cipher{CBC, 256}, Cipher{CTR, 128}

	d, err := cryptodevDriver(cbc, info("cbc(aes)", "cbc-aes-eip93", siopFlagKernelDriverOnly), false)
	if err != nil {
		t.Fatal(err)
	}
	want := Driver{Name: "cbc-aes-eip93", Algorithm: "cbc(aes)", Hardware: true, HardwareWhy: "CIOCGSESSINFO: kernel-driver-only"}
	if d != want {
		t.Errorf("kernel-driver-only: %+v, want %+v", d, want)
	}

	d, err = cryptodevDriver(ctr, info("ctr(aes)", "ctr(aes-generic)", 0), false)
	if err != nil {
		t.Fatal(err)
	}
	want = Driver{Name: "ctr(aes-generic)", Algorithm: "ctr(aes)"}
	if why := d.HardwareWhy; !strings.HasPrefix(why, "CIOCGSESSINFO: not kernel-driver-only; ") {
		t.Errorf("software: HardwareWhy %q, want the flag and the name rule", why)
	}
	if d.HardwareWhy = ""; d != want {
		t.Errorf("software: %+v, want %+v", d, want)
	}
	// virtio_crypto does not set CRYPTO_ALG_KERN_DRIVER_ONLY; its name
	// still makes it a device.
	d, err = cryptodevDriver(cbc, info("cbc(aes)", "virtio_crypto_aes_cbc", 0), true)
	if err != nil || !d.Hardware || !strings.Contains(d.HardwareWhy, "virtio-crypto device") {
		t.Errorf("virtio_crypto without the flag: %+v, %v; want a device", d, err)
	}

	// The session must be the algorithm offload asked for, with a driver.
	for _, bad := range []*sessionInfoOp{
		info("ctr(aes)", "ctr-aes-aesni", 0), // another mode
		info("cbc(aes)", "", 0),              // no driver name
		info("", "", 0),                      // nothing filled in (structs out of step with the module)
	} {
		for _, hw := range []bool{false, true} {
			if d, err := cryptodevDriver(cbc, bad, hw); err == nil {
				t.Errorf("cryptodevDriver(%v, %q/%q, hw %v) = %+v, want an error", cbc, cString(bad.cipherInfo.craName[:]), cString(bad.cipherInfo.craDriverName[:]), hw, d)
			}
		}
	}

	// cryptodev:hw takes the kernel-driver-only driver as it is and refuses
	// a CPU driver, naming it.
	d, err = cryptodevDriver(cbc, info("cbc(aes)", "cbc-aes-eip93", siopFlagKernelDriverOnly), true)
	if err != nil || d.Name != "cbc-aes-eip93" || !d.Hardware {
		t.Errorf("hw, kernel-driver-only: %+v, %v; want the driver", d, err)
	}
	d, err = cryptodevDriver(cbc, info("cbc(aes)", "cbc-aes-aesni", 0), true)
	if !errors.Is(err, ErrNoAlgorithm) || !strings.Contains(fmt.Sprint(err), "cbc-aes-aesni") || d != (Driver{}) {
		t.Errorf("hw, CPU driver: %+v, %v; want ErrNoAlgorithm naming cbc-aes-aesni", d, err)
	}
}

func TestCryptodevProcCryptoDetails(t *testing.T) {
	const proc = `name         : cbc(aes)
driver       : cbc-aes-aesni
module       : aesni_intel
priority     : 400
type         : skcipher
async        : no

name         : cbc(aes)
driver       : virtio_crypto_aes_cbc
module       : virtio_crypto
priority     : 150
type         : skcipher
async        : yes

name         : ctr(aes)
driver       : virtio_crypto_aes_cbc
module       : wrong
priority     : 1
type         : skcipher
async        : no
`
	algs, err := ParseProcCrypto(strings.NewReader(proc))
	if err != nil {
		t.Fatal(err)
	}
	in := Driver{Name: "virtio_crypto_aes_cbc", Algorithm: "cbc(aes)", HardwareWhy: "CIOCGSESSINFO: software-capable driver"}
	want := in
	want.Module, want.Priority, want.Async = "virtio_crypto", 150, true
	if got := procCryptoDetails(in, algs); got != want {
		t.Errorf("procCryptoDetails = %+v, want %+v", got, want)
	}
	// A driver /proc/crypto does not list keeps what the session said.
	other := Driver{Name: "cbc-aes-eip93", Algorithm: "cbc(aes)", Hardware: true}
	if got := procCryptoDetails(other, algs); got != other {
		t.Errorf("procCryptoDetails of an unlisted driver = %+v, want it unchanged", got)
	}
}

func TestCryptodevCipherIDs(t *testing.T) {
	// crypto/cryptodev.h: CRYPTO_AES_CBC 11, CRYPTO_AES_CTR 21, CRYPTO_AES_ECB 23.
	for _, c := range MeasureCiphers {
		want := map[Mode]uint32{CBC: 11, CTR: 21, ECB: 23}[c.Mode]
		if got := cryptodevCipher(c); got != want {
			t.Errorf("%v: cipher id %d, want %d", c, got, want)
		}
	}
}

// A missing device node: every cipher is unavailable, with the reason.
func TestCryptodevMissingDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crypto")
	e := &Cryptodev{log: zap.NewNop(), path: path}
	for _, c := range Ciphers {
		if _, err := e.Driver(c); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "no "+path) {
			t.Errorf("Driver(%v) = %v, want unavailable: no %s", c, err, path)
		}
		if _, err := e.NewCrypter(c, make([]byte, c.KeySize())); !errors.Is(err, ErrUnavailable) {
			t.Errorf("NewCrypter(%v) = %v, want unavailable", c, err)
		}
	}
}

// /dev/null is a device that opens but knows no cryptodev ioctl (ENOTTY;
// ENOSYS under qemu-user, which does not forward ioctls it does not know):
// this drives the real open and ioctl code on a machine without
// /dev/crypto.
func TestCryptodevNotACryptodevDevice(t *testing.T) {
	e := &Cryptodev{log: zap.NewNop(), path: os.DevNull}
	c := Cipher{CTR, 256}
	_, err := e.Driver(c)
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoAlgorithm) || !(errors.Is(err, syscall.ENOTTY) || errors.Is(err, syscall.ENOSYS)) {
		t.Fatalf("Driver on %s = %v, want unavailable (ENOTTY)", os.DevNull, err)
	}
	if want := os.DevNull + " does not take cryptodev ioctls"; !strings.Contains(err.Error(), want) {
		t.Errorf("Driver on %s = %q, want it to say %q", os.DevNull, err, want)
	}
	if !strings.Contains(err.Error(), "ioctl CIOCGSESSION") {
		t.Errorf("Driver on %s = %q, want it to name the ioctl", os.DevNull, err)
	}
	if _, err := e.NewCrypter(c, make([]byte, 32)); !errors.Is(err, ErrUnavailable) {
		t.Errorf("NewCrypter on %s = %v, want unavailable", os.DevNull, err)
	}
	t.Logf("%v", err)
}

// Arguments are checked before the device is touched, the same way on
// every engine.
func TestCryptodevChecksArgsFirst(t *testing.T) {
	e := &Cryptodev{log: zap.NewNop(), path: filepath.Join(t.TempDir(), "absent")}
	if _, err := e.NewCrypter(Cipher{CBC, 128}, make([]byte, 17)); !errors.Is(err, ErrKeySize) {
		t.Errorf("NewCrypter with a 17-byte key = %v, want ErrKeySize", err)
	}
	if _, err := e.NewCrypter(Cipher{CBC, 64}, make([]byte, 8)); !errors.Is(err, ErrUnknownCipher) {
		t.Errorf("NewCrypter(aes-64-cbc) = %v, want ErrUnknownCipher", err)
	}
	if _, err := e.Driver(Cipher{Mode: 9, KeyBits: 128}); !errors.Is(err, ErrUnknownCipher) {
		t.Errorf("Driver(mode 9) = %v, want ErrUnknownCipher", err)
	}
}

func TestCryptodevOpenPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root opens any file: the EACCES path is covered by TestCryptodevErrorMapping")
	}
	path := filepath.Join(t.TempDir(), "crypto")
	if err := os.WriteFile(path, nil, 0o000); err != nil {
		t.Fatal(err)
	}
	e := &Cryptodev{log: zap.NewNop(), path: path}
	if _, err := e.Driver(Cipher{CBC, 128}); !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.EACCES) {
		t.Errorf("Driver on a mode-000 node = %v, want unavailable (EACCES)", err)
	}
}
