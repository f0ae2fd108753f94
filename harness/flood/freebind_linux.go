package main

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// freebind lets a socket bind a source address the host does not have
// (IP_FREEBIND), so that one machine can attack from many addresses of a
// routed prefix (-src6).
func freebind(network, address string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) }); err != nil {
		return err
	}
	return serr
}
