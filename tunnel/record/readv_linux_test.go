//go:build linux

package record

import (
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/offload-dev/offload/internal/testutil"
)

// Over TCP, frames of every size come out whole however the sender cuts
// its writes, with the readv path taking bulk bodies and the headers
// behind them; the link's end after the last frame is a clean io.EOF.
func TestLinkReaderTCP(t *testing.T) {
	sizes := []int{1, 3, 100, 2000, 16 << 10, 40 << 10, 64 << 10, 64 << 10, 5, 64 << 10, 7, 9, 33 << 10, 4, 1 << 20, 2, 64 << 10}
	stream := frameStream(sizes)
	for _, piece := range []int{1000, 4093, 50 << 10, 1 << 20} {
		a, b := testutil.TCPPair(t)
		go func() {
			for rest := stream; len(rest) > 0; {
				n, err := a.Write(rest[:min(piece, len(rest))])
				if err != nil {
					return
				}
				rest = rest[n:]
			}
			_ = a.(*net.TCPConn).CloseWrite()
		}()
		l := newLinkReader(b)
		if !l.vec.ok() {
			t.Fatal("no readv path on a *net.TCPConn")
		}
		readFrames(t, l, sizes, piece)
		a.Close()
		b.Close()
	}
}

// When the next frame is already on the link, the read that ends a bulk
// body brings its header too: the header costs no read of its own. A
// link that ends inside a body is io.ErrUnexpectedEOF.
func TestLinkReaderHeaderWithBody(t *testing.T) {
	sizes := []int{40 << 10, 40 << 10, 5}
	stream := frameStream(sizes)
	a, b := testutil.TCPPair(t)
	if _, err := a.Write(stream[:len(stream)-2]); err != nil { // the last body is cut short
		t.Fatal(err)
	}
	_ = a.(*net.TCPConn).CloseWrite()
	waitQueued(t, b, len(stream)-2)
	l := newLinkReader(b)
	body := make([]byte, 40<<10)
	for i := range 2 {
		var h [HeaderSize]byte
		if err := l.header(h[:]); err != nil {
			t.Fatal(err)
		}
		if err := l.body(body); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		// Frame 0 began in the first read-ahead (the link was
		// not bulk yet); each body's last read took the header behind it.
		if l.w-l.r != HeaderSize {
			t.Fatalf("after body %d: %d bytes read ahead, want the next header (%d)", i, l.w-l.r, HeaderSize)
		}
	}
	var h [HeaderSize]byte
	if err := l.header(h[:]); err != nil {
		t.Fatal(err)
	}
	if err := l.body(make([]byte, 5)); err != io.ErrUnexpectedEOF {
		t.Fatalf("a body cut short: %v, want io.ErrUnexpectedEOF", err)
	}
}

// waitQueued waits until conn's receive queue holds n bytes.
func waitQueued(t *testing.T, conn net.Conn, n int) {
	t.Helper()
	raw, err := conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var q int
		_ = raw.Control(func(fd uintptr) { q, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		if q >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}
