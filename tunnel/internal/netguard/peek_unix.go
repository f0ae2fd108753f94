//go:build unix

package netguard

import "syscall"

// Peek copies what waits in c's socket receive buffer into buf without
// consuming it, and returns how much; 0 where c has no socket or nothing
// waits. The slot tables use it to tell a connection whose whole first
// message has arrived, and so is safe from eviction, from one that is
// still sending.
func Peek(c any, buf []byte) int {
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
		m, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == nil && m > 0 {
			n = m
		}
	})
	return n
}
