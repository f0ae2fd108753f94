package netguard

import (
	"net"
	"os"
	"syscall"
	"time"
)

// DeferAccept makes the kernel hold a new connection on ln until its first
// bytes arrive (TCP_DEFER_ACCEPT), or until about d has passed, before
// Accept returns it. A client's first flight (or a balancer's PROXY
// header, or a scraper's request head) is one small segment, so a genuine
// peer reaches the slots with its whole first message, which no flood
// may take (SlotList's owners), however late after its TCP handshake it
// left (a slow router makes its ephemeral key after connect returns).
// Connections that send nothing wait in the kernel, not in a slot: an L4
// check that closes is handed over when its FIN arrives, one that stays
// silent after about d. ln other than a TCP listener is left as it is.
func DeferAccept(ln net.Listener, d time.Duration) error {
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
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, secs)
	}); err != nil {
		return err
	}
	if serr != nil {
		return os.NewSyscallError("setsockopt TCP_DEFER_ACCEPT", serr)
	}
	return nil
}
