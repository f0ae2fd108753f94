//go:build unix

package tunnel

import (
	"errors"
	"io"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// readIdle reads from tc into the copy buffer *cb, taking one from pool
// when it has none, and giving it back while the connection has nothing
// to read: an idle stream waits for data without a buffer, and a busy
// one pays no extra system call for that (the read that finds the socket
// empty is the one the runtime's poller needs anyway).
func readIdle(tc *net.TCPConn, cb **copyBuf, pool *bufPool) (int, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		if *cb == nil {
			*cb = pool.get()
		}
		n, rerr = unix.Read(int(fd), (*cb).data())
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			(*cb).release()
			*cb = nil
			return false
		case errors.Is(rerr, unix.EINTR):
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return 0, err // closed under us, or a deadline
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
