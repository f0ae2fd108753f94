package netguard

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// Peek sees what waits in the socket buffer and leaves it there; with
// nothing waiting, or on a connection without a socket, it sees nothing.
func TestPeek(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" || runtime.GOOS == "js" || runtime.GOOS == "wasip1" {
		t.Skip("Peek looks into socket buffers on unix only")
	}
	c, s := testutil.TCPPair(t)
	buf := make([]byte, 16)
	if n := Peek(s, buf); n != 0 {
		t.Fatalf("Peek with nothing sent: %d bytes", n)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// WaitData returns once the bytes are in the buffer: no sleep.
	_ = s.SetReadDeadline(time.Now().Add(time.Minute))
	if ok, err := WaitData(s); err != nil || !ok {
		t.Fatalf("WaitData: %v %v", ok, err)
	}
	if n := Peek(s, buf); !bytes.Equal(buf[:n], []byte("hello")) {
		t.Fatalf("Peek: %q, want hello", buf[:n])
	}
	if n := Peek(s, buf[:2]); n != 2 {
		t.Fatalf("Peek into 2 bytes: %d", n)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(s, got); err != nil || string(got) != "hello" {
		t.Fatalf("read after Peek: %q %v: Peek took bytes", got, err)
	}
	if n := Peek(s, buf); n != 0 {
		t.Fatalf("Peek after the read: %d bytes", n)
	}
	p1, p2 := net.Pipe()
	defer p1.Close()
	defer p2.Close()
	if n := Peek(p1, buf); n != 0 {
		t.Fatalf("Peek on a pipe: %d", n)
	}
}

// DeferAccept sets TCP_DEFER_ACCEPT on Linux (a no-op elsewhere), and a
// connection that sends its first bytes is accepted with them.
func TestDeferAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	if err := DeferAccept(ln, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		rc, err := ln.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = getDeferAccept(int(fd)) }); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		if v <= 0 {
			t.Fatalf("TCP_DEFER_ACCEPT is %d after DeferAccept", v)
		}
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := make([]byte, 1)
	if _, err := io.ReadFull(s, b); err != nil || b[0] != 'x' {
		t.Fatalf("first byte: %q %v", b, err)
	}
	// A listener without a socket is left alone.
	if err := DeferAccept(fakeListener{}, time.Second); err != nil {
		t.Fatalf("DeferAccept on a listener without a socket: %v", err)
	}
}

type fakeListener struct{}

func (fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (fakeListener) Close() error              { return nil }
func (fakeListener) Addr() net.Addr            { return &net.TCPAddr{} }
