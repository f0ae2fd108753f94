//go:build unix

package netguard

import (
	"os"
	"syscall"
)

// WaitData waits, within c's read deadline, until c has a byte to read
// (true) or its peer has closed it (false), without consuming anything:
// what a PROXY LOCAL connection does next tells a health check from a
// client, and a SlotConn looks at a first message before taking it.
// A c without a socket has data, as far as anyone can tell.
func WaitData(c any) (bool, error) {
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
		n, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return rerr != syscall.EAGAIN && rerr != syscall.EINTR
	})
	if err != nil {
		return false, err // the deadline, or the connection closed under us
	}
	if rerr != nil {
		return false, os.NewSyscallError("recvfrom", rerr)
	}
	return n > 0, nil
}
