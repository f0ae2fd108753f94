package tunnel

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// deferAccept sets TCP_DEFER_ACCEPT on a listening socket (ListenMetrics).
func deferAccept(network, address string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, int(metricsHeadTimeout.Seconds()))
	})
	if err != nil {
		return err
	}
	return serr
}
