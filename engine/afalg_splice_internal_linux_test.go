//go:build linux

package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// spliceRequest runs one request of x without copying src into the kernel:
// vmsplice(src) into a pipe, splice from the pipe into the operation socket
// (SPLICE_F_MORE: the request is not complete yet), then the op and IV
// control messages in a data-less sendmsg without MSG_MORE (which completes
// it), then read(dst). Four system calls instead of sendmsg+read's two; the
// kernel references src's pages instead of copying them.
func spliceRequest(x *afalgCrypter, pr, pw int, d Direction, dst, src, iv []byte) error {
	o := x.op
	for off := 0; off < len(src); {
		iov := unix.Iovec{Base: &src[off]}
		iov.SetLen(len(src) - off)
		n, err := unix.Vmsplice(pw, []unix.Iovec{iov}, 0)
		if err != nil {
			return fmt.Errorf("vmsplice: %w", err)
		}
		for left := n; left > 0; {
			m, err := unix.Splice(pr, nil, o.fd, nil, left, unix.SPLICE_F_MORE)
			if err != nil {
				return fmt.Errorf("splice: %w", err)
			}
			left -= int(m)
		}
		off += n
	}
	op := uint32(unix.ALG_OP_DECRYPT)
	if d == Encrypt {
		op = unix.ALG_OP_ENCRYPT
	}
	binary.NativeEndian.PutUint32(o.opData, op)
	copy(o.ivData, iv)
	o.msg.SetIovlen(0)
	o.msg.Iov = nil
	_, _, errno := unix.Syscall(unix.SYS_SENDMSG, uintptr(o.fd), uintptr(unsafe.Pointer(&o.msg)), 0)
	o.msg.Iov = &o.iov
	o.msg.SetIovlen(1)
	if errno != 0 {
		return fmt.Errorf("sendmsg: %w", errno)
	}
	return o.recv(dst)
}

// BenchmarkKernelAFALGSplice measures zero copy into AF_ALG (vmsplice and
// splice, spliceRequest) against the engine's sendmsg+read, per driver and
// request size, the two methods alternated over three rounds:
//
//	go run ./harness/vm -arch mipsle -smp 1 -virtio-crypto -test ./engine -run X -bench KernelAFALGSplice
func BenchmarkKernelAFALGSplice(b *testing.B) {
	c := Cipher{Mode: CBC, KeyBits: 256}
	var ps [2]int
	if err := unix.Pipe2(ps[:], unix.O_CLOEXEC); err != nil {
		b.Fatal(err)
	}
	defer unix.Close(ps[0])
	defer unix.Close(ps[1])
	if _, err := unix.FcntlInt(uintptr(ps[1]), unix.F_SETPIPE_SZ, 256<<10); err != nil {
		b.Fatal(err)
	}
	for _, drv := range []string{"virtio_crypto", "cbc(aes-generic)"} {
		e := NewAFALG(drv, Options{})
		if _, err := e.Driver(c); err != nil {
			b.Logf("%s: %v", drv, err)
			continue
		}
		cr, err := e.NewCrypter(c, make([]byte, 32))
		if err != nil {
			b.Fatal(err)
		}
		x := cr.(*afalgCrypter)
		iv := make([]byte, 16)
		for _, size := range []int{16384, 65536} {
			src, want, got := make([]byte, size), make([]byte, size), make([]byte, size)
			for i := range src {
				src[i] = byte(i * 7)
			}
			if err := x.Encrypt(want, src, iv); err != nil {
				b.Fatal(err)
			}
			if err := spliceRequest(x, ps[0], ps[1], Encrypt, got, src, iv); err != nil {
				b.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				b.Fatalf("%s %d: splice request gave a different ciphertext", drv, size)
			}
		}
		for round := 1; round <= 3; round++ {
			for _, size := range []int{16384, 65536} {
				buf := make([]byte, size)
				b.Run(fmt.Sprintf("%s/%d/sendmsg/r%d", drv, size, round), func(b *testing.B) {
					b.SetBytes(int64(size))
					for b.Loop() {
						if err := x.Encrypt(buf, buf, iv); err != nil {
							b.Fatal(err)
						}
					}
				})
				b.Run(fmt.Sprintf("%s/%d/splice/r%d", drv, size, round), func(b *testing.B) {
					b.SetBytes(int64(size))
					for b.Loop() {
						if err := spliceRequest(x, ps[0], ps[1], Encrypt, buf, buf, iv); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
		cr.Close()
	}
}
