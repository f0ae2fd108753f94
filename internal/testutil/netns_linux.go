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
// thread moved into the namespace (inNetns).
func DialIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (c net.Conn, err error) {
		err = inNetns(nsPath, func() error {
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// ListenIn listens inside the network namespace at nsPath, as DialIn
// dials: the listener's socket stays in that namespace, and accepting on
// it works from any thread.
func ListenIn(nsPath, network, addr string) (l net.Listener, err error) {
	err = inNetns(nsPath, func() error {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// inNetns runs f on a thread locked and moved into the namespace at
// nsPath; that thread is thrown away afterwards (its goroutine exits still
// locked), so no other goroutine ever runs in the namespace.
func inNetns(nsPath string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: the thread is in another namespace now
		// and must end with this goroutine.
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- fmt.Errorf("open %s: %w", nsPath, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- os.NewSyscallError("setns", err)
			return
		}
		ch <- f()
	}()
	return <-ch
}
