//go:build unix

package tunnel

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// peek copies what waits in c's socket receive buffer into buf without
// consuming it, and returns how much; 0 where c has no socket.
func peek(c any, buf []byte) int {
	sc, ok := c.(syscall.Conn)
	if !ok || len(buf) == 0 {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		m, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if err == nil && m > 0 {
			n = m
		}
	})
	return n
}
