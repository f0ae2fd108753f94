//go:build linux

package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestAFALGControlLayout checks the hand-built control messages against
// x/sys's own parser and the sizes the kernel expects on this GOARCH (the
// cmsg header is 12 bytes on 32-bit arm and mips, 16 on 64-bit).
func TestAFALGControlLayout(t *testing.T) {
	o := &algOp{algSockets: algSockets{tfm: -1, fd: -1}}
	o.initMsg()
	want := 64
	if unsafe.Sizeof(uintptr(0)) == 4 {
		want = 48
	}
	if cmsgCtrlSize != want || int(o.msg.Controllen) != want || o.msg.Iovlen != 1 || o.msg.Iov != &o.iov {
		t.Fatalf("control %d bytes (msg says %d, iovlen %d), want %d", cmsgCtrlSize, o.msg.Controllen, o.msg.Iovlen, want)
	}
	iv := []byte("0123456789abcdef")
	binary.NativeEndian.PutUint32(o.opData, unix.ALG_OP_ENCRYPT)
	copy(o.ivData, iv)
	buf := unsafe.Slice(o.msg.Control, o.msg.Controllen)
	msgs, err := unix.ParseSocketControlMessage(buf)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("ParseSocketControlMessage: %d messages, %v", len(msgs), err)
	}
	op, ivm := msgs[0], msgs[1]
	if op.Header.Level != unix.SOL_ALG || op.Header.Type != unix.ALG_SET_OP || len(op.Data) != 4 ||
		binary.NativeEndian.Uint32(op.Data) != unix.ALG_OP_ENCRYPT {
		t.Errorf("ALG_SET_OP message %+v", op)
	}
	if ivm.Header.Level != unix.SOL_ALG || ivm.Header.Type != unix.ALG_SET_IV || len(ivm.Data) != 20 ||
		binary.NativeEndian.Uint32(ivm.Data) != 16 || !bytes.Equal(ivm.Data[4:], iv) {
		t.Errorf("ALG_SET_IV message %+v", ivm)
	}
	// ecb(aes) has no IV, and the kernel refuses an ALG_SET_IV whose length
	// is not the algorithm's: the op message must go alone.
	o.dropIV()
	msgs, err = unix.ParseSocketControlMessage(unsafe.Slice(o.msg.Control, o.msg.Controllen))
	if err != nil || len(msgs) != 1 || msgs[0].Header.Type != unix.ALG_SET_OP {
		t.Errorf("without IV: %d messages %+v, %v; want ALG_SET_OP alone", len(msgs), msgs, err)
	}
}

// kernelCrypter is a Crypter of the default AF_ALG engine for c with a
// zero key, closed at the end of the test; outside the VM the test skips.
func kernelCrypter(t *testing.T, c Cipher) *afalgCrypter {
	t.Helper()
	e := NewAFALG("", Options{})
	if _, err := e.Driver(c); err != nil {
		if errors.Is(err, ErrUnavailable) {
			t.Skipf("no AF_ALG here; runs in the VM: %v", err)
		}
		t.Fatal(err)
	}
	cr, err := e.NewCrypter(c, make([]byte, c.KeySize()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cr.Close() })
	return cr.(*afalgCrypter)
}

// TestKernelAFALGSyscalls checks the per-request budget: one sendmsg and one
// read up to the chunk size (so below 8 KiB too), and no allocation.
func TestKernelAFALGSyscalls(t *testing.T) {
	x := kernelCrypter(t, Cipher{Mode: CTR, KeyBits: 128})
	cr := Crypter(x)
	iv := make([]byte, 16)
	for _, tc := range []struct{ size, calls int }{
		{1, 2}, {16, 2}, {1500, 2}, {8191, 2}, {kernelChunkSize, 2},
		{kernelChunkSize + 1, 4}, {3*kernelChunkSize + 5, 8},
	} {
		buf := make([]byte, tc.size)
		before := x.op.syscalls
		if err := cr.Encrypt(buf, buf, iv); err != nil {
			t.Fatal(err)
		}
		if n := x.op.syscalls - before; n != uint64(tc.calls) {
			t.Errorf("%d bytes: %d syscalls, want %d", tc.size, n, tc.calls)
		}
	}
	for _, size := range []int{16, 4096, kernelChunkSize + 16} {
		buf := make([]byte, size)
		if n := testing.AllocsPerRun(50, func() { _ = cr.Encrypt(buf, buf, iv) }); n != 0 {
			t.Errorf("%d bytes: %v allocations per call", size, n)
		}
	}
	// After a reset (as after a failed request) the next request accepts a
	// fresh operation socket and still works.
	x.op.reset()
	buf := make([]byte, 32)
	before := x.op.syscalls
	if err := cr.Encrypt(buf, buf, iv); err != nil {
		t.Fatalf("after reset: %v", err)
	}
	if n := x.op.syscalls - before; n != 3 {
		t.Errorf("after reset: %d syscalls, want accept4+sendmsg+read", n)
	}
}

// TestKernelAFALGFaults injects errnos before sendmsg and read: EBUSY is
// retried on a fresh op socket (but not after an in-place read), EINVAL is
// explained, a device that stays busy gives up, and the crypter works again
// after every failure.
func TestKernelAFALGFaults(t *testing.T) {
	x := kernelCrypter(t, Cipher{Mode: CBC, KeyBits: 128})
	cr := Crypter(x)
	iv := make([]byte, 16)
	src := bytes.Repeat([]byte{0x5a}, 4096)
	want := make([]byte, len(src))
	if err := cr.Encrypt(want, src, iv); err != nil {
		t.Fatal(err)
	}
	// failN makes the next n calls of syscall fail with errno.
	failN := func(syscall string, n int, errno error) *int {
		calls := 0
		x.op.fault = func(s string) error {
			if s == syscall && calls < n {
				calls++
				return errno
			}
			return nil
		}
		return &calls
	}
	for _, tc := range []struct {
		name    string
		syscall string
		n       int
		errno   error
		inPlace bool
		wantErr error // nil: success with the right result
	}{
		{"busy read retried", "read", 1, unix.EBUSY, false, nil},
		{"again sendmsg retried", "sendmsg", 2, unix.EAGAIN, true, nil},
		{"busy read in place not retried", "read", 1, unix.EBUSY, true, unix.EBUSY},
		{"still busy", "read", afalgMaxRetries + 1, unix.EBUSY, false, unix.EBUSY},
		{"einval", "sendmsg", 1, unix.EINVAL, false, unix.EINVAL},
		{"other", "read", 1, unix.EIO, false, unix.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := failN(tc.syscall, tc.n, tc.errno)
			defer func() { x.op.fault = nil }()
			dst := make([]byte, len(src))
			in := src
			if tc.inPlace {
				copy(dst, src)
				in = dst
			}
			err := cr.Encrypt(dst, in, iv)
			if tc.wantErr == nil {
				if err != nil || !bytes.Equal(dst, want) {
					t.Fatalf("err %v, result equal %v", err, bytes.Equal(dst, want))
				}
			} else {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				t.Logf("%v", err)
			}
			if *calls != tc.n && tc.wantErr == nil {
				t.Errorf("fault hit %d times, want %d", *calls, tc.n)
			}
			x.op.fault = nil
			out := make([]byte, len(src))
			if err := cr.Encrypt(out, src, iv); err != nil || !bytes.Equal(out, want) {
				t.Errorf("next request after the fault: %v, equal %v", err, bytes.Equal(out, want))
			}
		})
	}
}

// TestBindENOENTExplains checks what a bind that failed with ENOENT says,
// from a fake /proc/crypto (Debian 7.2's cbc(aes) drivers in the VM) and
// kernel policy: AF_ALG refusing a listed device names the kernel rule and
// cryptodev, the 7.3 allowlist names its sysctl, a driver that is not
// listed stays ErrNoAlgorithm.
func TestBindENOENTExplains(t *testing.T) {
	algs, err := ParseProcCrypto(strings.NewReader(`name : cbc(aes)
driver : cbc-aes-aesni
priority : 400
type : skcipher
async : no

name : cbc(aes)
driver : virtio_crypto_aes_cbc
priority : 150
type : skcipher
async : yes
`))
	if err != nil {
		t.Fatal(err)
	}
	enoent := os.NewSyscallError("bind", unix.ENOENT)
	c := Cipher{Mode: CBC, KeyBits: 256}
	v72 := NewAFALGPolicy("7.2.13+deb14-amd64", "")
	v73 := NewAFALGPolicy("7.3.0", "1\n")
	v61 := NewAFALGPolicy("6.1.0-57-amd64", "")
	for _, tc := range []struct {
		name, driver, bound string
		pol                 AFALGPolicy
		is                  error
		says                []string
	}{
		{"7.2 device", "virtio_crypto", "virtio_crypto_aes_cbc", v72, ErrAFALGRefused,
			[]string{"afalg:virtio_crypto aes-256-cbc", "AF_ALG refuses the driver: virtio_crypto_aes_cbc is an async device driver", "Linux 7.2.13+deb14-amd64", "cryptodev:hw"}},
		{"7.3 device", "virtio_crypto_aes_cbc", "virtio_crypto_aes_cbc", v73, ErrAFALGRefused,
			[]string{"crypto.af_alg_restrict=1"}},
		{"7.3 plain name", "", "cbc(aes)", v73, ErrAFALGRefused,
			[]string{"allowlist of crypto.af_alg_restrict (1)", AFALGRestrictPath + "=0"}},
		{"6.1 plain name", "", "cbc(aes)", v61, ErrNoAlgorithm,
			[]string{"algif_skcipher"}},
		{"7.2 not listed", "nosuch", "nosuch", v72, ErrNoAlgorithm,
			[]string{`no driver "nosuch"`, "registered: cbc-aes-aesni, virtio_crypto_aes_cbc"}},
	} {
		name := AFALGName
		if tc.driver != "" {
			name += ":" + tc.driver
		}
		got := bindENOENT(name, tc.driver, tc.bound, c, algs, nil, tc.pol, enoent)
		if !errors.Is(got, tc.is) || !errors.Is(got, unix.ENOENT) || !errors.Is(got, ErrUnavailable) {
			t.Errorf("%s: %v; want it to wrap %v and ENOENT", tc.name, got, tc.is)
			continue
		}
		if tc.is == ErrNoAlgorithm && errors.Is(got, ErrAFALGRefused) {
			t.Errorf("%s: %v calls a missing driver a refusal", tc.name, got)
		}
		for _, w := range tc.says {
			if !strings.Contains(got.Error(), w) {
				t.Errorf("%s: %v; want it to say %q", tc.name, got, w)
			}
		}
	}
	// Only devices listed on 7.2 (aesni unloaded): the plain name has
	// nothing AF_ALG admits.
	got := bindENOENT(AFALGName, "", "cbc(aes)", c, algs[1:], nil, v72, enoent)
	if !errors.Is(got, ErrAFALGRefused) || !strings.Contains(got.Error(), "only from devices (virtio_crypto_aes_cbc)") {
		t.Errorf("devices only on 7.2: %v", got)
	}
}
