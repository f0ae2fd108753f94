//go:build unix

package tunnel

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// waitData waits, within c's read deadline, until c has a byte to read
// (true) or its peer has closed it (false), without consuming anything:
// what a LOCAL connection does next tells a health check from a client.
func waitData(c any) (bool, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return rerr != unix.EAGAIN && rerr != unix.EINTR
	})
	if err != nil {
		return false, err // the deadline, or the connection closed under us
	}
	if rerr != nil {
		return false, os.NewSyscallError("recvfrom", rerr)
	}
	return n > 0, nil
}
