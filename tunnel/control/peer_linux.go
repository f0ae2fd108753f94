package control

import (
	"net"
	"os"
	"syscall"
)

// peerAllowed reports whether c's peer is root or this process's user
// (SO_PEERCRED): the socket's mode already keeps others out; this holds
// if someone loosens it.
func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return false
	}
	return uidAllowed(cred.Uid, uint32(os.Geteuid()))
}
