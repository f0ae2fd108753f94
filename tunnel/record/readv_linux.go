//go:build linux

package record

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// vecReader fills a frame's body and, in the same readv, takes what
// follows it on the link (the next header) into a second buffer. Only for
// a *net.TCPConn itself: a wrapper's Read may hold bytes of its own
// (buffered, a PROXY header), which a read of the fd would skip.
type vecReader struct {
	raw syscall.RawConn
	iov [2]unix.Iovec
}

func (v *vecReader) init(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		v.raw, _ = tc.SyscallConn()
	}
}

func (v *vecReader) ok() bool { return v.raw != nil }

// read fills p from the link, then as much of ahead as the same reads
// bring; it returns how many bytes went into ahead. The link's end before
// p is full is io.ErrUnexpectedEOF.
func (v *vecReader) read(p, ahead []byte) (int, error) {
	defer func() { v.iov = [2]unix.Iovec{} }() // hold no frame buffer between reads
	var n int
	var errno syscall.Errno
	readv := func(fd uintptr) bool {
		v.iov[0].Base, v.iov[1].Base = &p[0], &ahead[0]
		v.iov[0].SetLen(len(p))
		v.iov[1].SetLen(len(ahead))
		r, _, e := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&v.iov[0])), uintptr(len(v.iov)))
		n, errno = int(r), e
		return e != unix.EAGAIN // else wait until the link is readable
	}
	for {
		if err := v.raw.Read(readv); err != nil {
			return 0, err // closed, or a deadline
		}
		switch {
		case errno == unix.EINTR:
			continue
		case errno != 0:
			return 0, os.NewSyscallError("readv", errno)
		case n == 0:
			return 0, io.ErrUnexpectedEOF
		case n >= len(p):
			return n - len(p), nil
		}
		p = p[n:]
	}
}
