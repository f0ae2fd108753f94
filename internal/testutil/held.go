package testutil

import (
	"io"
	"net"
	"testing"
	"time"
)

// Held is a target that reads N bytes of each connection, says so on
// Got, and holds the connection open until the test ends: a transfer
// stopped mid-way, its stream still open, for a test that looks at the
// counters of a transfer in progress.
type Held struct {
	N       int
	Got     chan struct{}
	release chan struct{}
}

// ServeHeld serves a Held target of n bytes until the test ends and
// returns it with its address.
func ServeHeld(t testing.TB, n int) (*Held, string) {
	t.Helper()
	h := &Held{N: n, Got: make(chan struct{}, 1), release: make(chan struct{})}
	addr := Serve(t, h.handle)
	// After Serve's cleanup is registered, so it runs first: Serve's waits
	// for the handlers, which wait for this.
	t.Cleanup(func() { close(h.release) })
	return h, addr
}

func (h *Held) handle(c net.Conn) {
	if _, err := io.ReadFull(c, make([]byte, h.N)); err != nil {
		return
	}
	select {
	case h.Got <- struct{}{}:
	default:
	}
	<-h.release
}

// Send dials addr, writes N bytes and waits (up to 30 s) until the
// target has read them all; the connection stays open for the test.
func (h *Held) Send(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Write(make([]byte, h.N)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Got:
	case <-time.After(30 * time.Second):
		t.Fatal("the target did not get the bytes")
	}
	return c
}
