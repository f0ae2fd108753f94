//go:build unix

package stream

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// readIdle reads from tc into the copy buffer *cb, taking one from pool
// when it has none, and giving it back while the connection has nothing
// to read: an idle stream waits for data without a buffer, and a busy
// one pays no extra system call for that (the read that finds the socket
// empty is the one the runtime's poller needs anyway).
func readIdle(tc *net.TCPConn, cb **copyBuf, pool *BufPool) (int, error) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		if *cb == nil {
			*cb = pool.get()
		}
		n, rerr = unix.Read(int(fd), (*cb).data())
		switch {
		case errors.Is(rerr, unix.EAGAIN):
			(*cb).release()
			*cb = nil
			return false
		case errors.Is(rerr, unix.EINTR):
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return 0, err // closed under us, or a deadline
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// placeReader reads a bare TCP connection into room it is lent for the
// length of one call (a record frame, through mux Stream.Fill), so it
// never waits there: Fill takes what the socket has, wait waits for more
// without a buffer. Its callbacks are method values made once, so a read
// allocates nothing.
type placeReader struct {
	rc             syscall.RawConn
	readFn, peekFn func(fd uintptr) bool

	b     []byte // read's room
	n     int    // bytes read
	short bool   // the last read did not fill its room: the socket is likely empty
	err   error  // the read's error; errNoData, io.EOF
	rerr  error  // the callback's errno
	woke  bool   // wait's peek found nothing and the poller woke it since
}

// errNoData is a read's answer when the socket has nothing to read yet.
var errNoData = errors.New("no data yet")

func newPlaceReader(tc *net.TCPConn) (*placeReader, bool) {
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, false
	}
	p := &placeReader{rc: rc}
	p.readFn, p.peekFn = p.readCB, p.peekCB
	return p, true
}

// Fill reads into b what the socket has, without waiting, as a chunk:
// its header, then the data (a mux Filler). It returns the chunk's size,
// 0 with p.err set (errNoData if the socket has nothing, io.EOF at its
// end) if there is none.
func (p *placeReader) Fill(b []byte) int {
	p.b, p.n, p.rerr = b[ChunkHeader:], 0, nil
	err := p.rc.Read(p.readFn)
	p.b = nil
	switch {
	case err != nil:
		p.err = err // closed under us, or a deadline
	case p.rerr == unix.EAGAIN:
		p.err = errNoData
	case p.rerr != nil:
		p.err = os.NewSyscallError("read", p.rerr)
	case p.n == 0:
		p.err = io.EOF
	default:
		p.err = nil
		p.short = p.n < len(b)-ChunkHeader
		putChunkHeader(b, uint32(p.n))
		return ChunkHeader + p.n
	}
	p.n = 0
	return 0
}

func (p *placeReader) readCB(fd uintptr) bool {
	for {
		p.n, p.rerr = unix.Read(int(fd), p.b)
		if p.rerr != unix.EINTR {
			return true
		}
	}
}

// wait waits until the socket has a byte to read or has ended, consuming
// no data; an error the socket had is wait's.
func (p *placeReader) wait() error {
	p.rerr, p.woke = nil, false
	err := p.rc.Read(p.peekFn)
	switch {
	case err != nil:
		return err
	case p.rerr != nil:
		// A peek takes a pending error (a reset) off the socket: the
		// next read would see a clean end instead.
		return os.NewSyscallError("recvfrom", p.rerr)
	}
	return nil // data, or the end, which Fill reports again
}

func (p *placeReader) peekCB(fd uintptr) bool {
	if p.woke {
		// The poller saw the socket readable after the peek found it
		// empty: no second peek (a spurious wake-up costs the read an
		// EAGAIN and a wait more).
		return true
	}
	var b [1]byte
	for {
		_, _, p.rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch p.rerr {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			p.rerr, p.woke = nil, true
			return false
		}
		return true
	}
}
