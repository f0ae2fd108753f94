package wgcompare

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The relay's zero-copy sends (issue 28, "sends that do not copy where the
// kernel can"): the same pump with MSG_ZEROCOPY, so the anchor measures a
// zero-copy hop beside a copying one before the tunnel's data path pays
// for the bookkeeping.
//
//	src ──read──> ring[i] ──sendmsg(MSG_ZEROCOPY)──> dst: the kernel pins
//	              (zcRing    the pages instead of copying them and, once it
//	              buffers)   is done with them (TCP: the peer acknowledged
//	                         the bytes), queues a notification [lo, hi] of
//	                         send ids on dst's error queue; ring[i] is read
//	                         into again only after its last send's id came
//
// A notification with SO_EE_CODE_ZEROCOPY_COPIED says the kernel copied
// after all (local delivery, loopback, a card without scatter-gather):
// such sends cost the copy and the notification. ZeroCopyStats counts them.

// zcRing is how many relay buffers may wait for their notification: 8 ×
// 64 KiB, about what the socket's send buffer holds on these links.
const zcRing = 8

// zcDrainTries is how many one-second waits the end of a stream gives its
// last sends' notifications.
const zcDrainTries = 10

// zcSender sends from a ring of buffers with MSG_ZEROCOPY on one socket
// and tracks the kernel's notifications.
type zcSender struct {
	rc   syscall.RawConn
	next uint32          // id of the next send
	done uint32          // every id below it is notified
	got  map[uint32]bool // notified ids above done (out of order)
	oob  []byte
	st   ZeroCopyStats
}

func newZCSender(c *net.TCPConn) (*zcSender, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ZEROCOPY, 1)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("SO_ZEROCOPY: %w", serr)
	}
	return &zcSender{rc: rc, got: map[uint32]bool{}, oob: make([]byte, 256)}, nil
}

// send sends all of p, one MSG_ZEROCOPY sendmsg after another, and returns
// the id of the last one; p must stay untouched until that id is done.
func (z *zcSender) send(p []byte) (uint32, error) {
	var last uint32
	for len(p) > 0 {
		var n int
		var serr error
		err := z.rc.Write(func(fd uintptr) bool {
			n, serr = unix.SendmsgN(int(fd), p, nil, nil, unix.MSG_ZEROCOPY|unix.MSG_DONTWAIT)
			return serr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return 0, err
		case serr == unix.ENOBUFS:
			// Too many pinned sends for the socket's option memory:
			// wait for a notification and try again.
			if err := z.reap(true); err != nil {
				return 0, err
			}
			continue
		case serr != nil:
			return 0, serr
		}
		last = z.next
		z.next++
		z.st.Sends++
		p = p[n:]
	}
	return last, nil
}

// doneWith reports whether the send with this id is notified.
func (z *zcSender) doneWith(id uint32) bool { return int32(id-z.done) < 0 }

// reap reads the notifications queued on the error queue; with wait it
// first waits (poll) for at least one.
func (z *zcSender) reap(wait bool) error {
	var rerr error
	err := z.rc.Control(func(fd uintptr) {
		if wait {
			// POLLERR is always reported; a second without one returns
			// to the caller, which decides whether to wait again.
			pfd := []unix.PollFd{{Fd: int32(fd)}}
			for {
				_, err := unix.Poll(pfd, 1000)
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					rerr = err
					return
				}
				break
			}
		}
		for {
			_, oobn, _, _, err := unix.Recvmsg(int(fd), nil, z.oob, unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
			if err == unix.EAGAIN {
				return
			}
			if err != nil {
				rerr = err
				return
			}
			if err := z.note(z.oob[:oobn]); err != nil {
				rerr = err
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return rerr
}

// note records the notification in one error-queue message's control data.
func (z *zcSender) note(oob []byte) error {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if !(m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_RECVERR) &&
			!(m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_RECVERR) {
			continue
		}
		if len(m.Data) < 16 {
			return fmt.Errorf("error queue: %d-byte sock_extended_err", len(m.Data))
		}
		errno, origin, code := binary.NativeEndian.Uint32(m.Data[0:]), m.Data[4], m.Data[6]
		if origin != unix.SO_EE_ORIGIN_ZEROCOPY {
			return fmt.Errorf("error queue: origin %d, errno %d", origin, errno)
		}
		lo, hi := binary.NativeEndian.Uint32(m.Data[8:]), binary.NativeEndian.Uint32(m.Data[12:])
		if code&unix.SO_EE_CODE_ZEROCOPY_COPIED != 0 {
			z.st.Copied += uint64(hi-lo) + 1
		}
		for id := lo; ; id++ {
			z.got[id] = true
			if id == hi {
				break
			}
		}
		for z.got[z.done] {
			delete(z.got, z.done)
			z.done++
		}
	}
	return nil
}

// notPollable reports internal/poll's ErrNotPollable, which the net
// package returns as is but does not export.
func notPollable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not pollable")
}

// pollRead reads src with poll(2) and read(2) on its descriptor, blocking
// the thread, for a socket whose error queue fills: Go's poller fails a
// Read woken by EPOLLERR alone (ErrNotPollable), which every zero-copy
// notification raises on a socket the other direction sends on. Woken by
// the error queue alone it waits 10 ms for the sender to reap it.
func pollRead(src net.Conn, p []byte) (int, error) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return 0, errors.New("zero-copy relay: the source has no descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Control(func(fd uintptr) {
		for {
			n, rerr = unix.Read(int(fd), p)
			if rerr != unix.EAGAIN && rerr != unix.EINTR {
				return
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(pfd, -1); err != nil && err != unix.EINTR {
				rerr = err
				return
			}
			if pfd[0].Revents&(unix.POLLIN|unix.POLLHUP) == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// pumpZeroCopy copies src to dst as pump does, sending with MSG_ZEROCOPY
// from a ring of zcRing buffers, then half-closes dst once every send is
// notified.
func pumpZeroCopy(dst, src net.Conn) (ZeroCopyStats, error) {
	tc, ok := dst.(*net.TCPConn)
	if !ok {
		return ZeroCopyStats{}, errors.New("zero-copy relay: the target is not a TCP connection")
	}
	z, err := newZCSender(tc)
	if err != nil {
		return ZeroCopyStats{}, err
	}
	var (
		ring [zcRing][]byte
		last [zcRing]uint32
		busy [zcRing]bool
	)
	for i := range ring {
		ring[i] = make([]byte, relayBuf)
	}
	polled := false
	for i := 0; ; i = (i + 1) % zcRing {
		for busy[i] && !z.doneWith(last[i]) {
			z.st.Waits++
			if err := z.reap(true); err != nil {
				return z.st, err
			}
		}
		busy[i] = false
		var n int
		var rerr error
		if polled {
			n, rerr = pollRead(src, ring[i])
		} else if n, rerr = src.Read(ring[i]); notPollable(rerr) {
			// The error queue of src (the other direction's zero-copy
			// sends) woke Go's poller with EPOLLERR alone, which fails a
			// waiting Read: read src outside the poller from now on.
			polled, n, rerr = true, 0, nil
			z.st.Polled = true
		}
		if n > 0 {
			id, err := z.send(ring[i][:n])
			if err != nil {
				return z.st, err
			}
			last[i], busy[i] = id, true
			if err := z.reap(false); err != nil {
				return z.st, err
			}
		}
		if rerr != nil {
			// Half-close at once: the sends are queued. The ring must
			// outlive them, so wait for their notifications before it
			// goes back to the garbage collector, for a while: a card
			// may hold its last transmitted buffers until it sends again.
			_ = tc.CloseWrite()
			for tries := 0; z.done != z.next; tries++ {
				if tries == zcDrainTries {
					return z.st, fmt.Errorf("sends %d to %d not notified %d s after the end", z.done, z.next-1, zcDrainTries)
				}
				if err := z.reap(true); err != nil {
					return z.st, err
				}
			}
			if rerr == io.EOF {
				rerr = nil
			}
			return z.st, rerr
		}
	}
}

// setLowat makes c's reader wake only when n bytes are queued, or at its
// end (SO_RCVLOWAT; the sealed relay's full frames).
func setLowat(c net.Conn, n int) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return errors.New("SO_RCVLOWAT: not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, n) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("SO_RCVLOWAT: %w", serr)
	}
	return nil
}
