package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// DialIn returns a dial function that dials from inside the network
// namespace at nsPath (e.g. /run/netns/NAME). A socket belongs to the
// namespace of the thread that makes it, so the dial runs on a locked
// thread moved into the namespace, and that thread is thrown away
// afterwards: its goroutine exits still locked.
func DialIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			// No UnlockOSThread: the thread is in another namespace now
			// and must end with this goroutine.
			fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				ch <- result{err: fmt.Errorf("open %s: %w", nsPath, err)}
				return
			}
			defer unix.Close(fd)
			if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
				ch <- result{err: os.NewSyscallError("setns", err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
