package tunnel

import (
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// deferAccept makes the kernel hold a new connection on ln until its first
// bytes arrive (TCP_DEFER_ACCEPT), or until about d has passed, before
// Accept returns it. A client's first flight (or a balancer's PROXY
// header) is one small segment, so a genuine client reaches the handshake
// slots with its whole first flight, which no flood may take (limit.go),
// however late after its TCP handshake its flight left (a slow router makes
// its ephemeral key after connect returns). Connections that send nothing
// wait in the kernel, not in a slot: an L4 check that closes is handed
// over when its FIN arrives, one that stays silent after about d. ln
// other than a TCP listener is left as it is.
func deferAccept(ln net.Listener, d time.Duration) error {
	sc, ok := ln.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	secs := max(int(d/time.Second), 1)
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, secs)
	}); err != nil {
		return err
	}
	return serr
}
