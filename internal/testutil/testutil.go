// Package testutil holds what the tunnel's tests in several packages need
// alike: a deterministic byte stream, an echo service and a round trip
// through it, a buffer that several goroutines write, a goroutine leak
// check and a logger a test can search (log.go).
package testutil

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Stream is a deterministic byte stream: the same seed gives the same
// bytes, so a receiver can check what it got without the sender's copy.
func Stream(seed uint64) io.Reader {
	return chacha{rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})}
}

type chacha struct{ r *rand.ChaCha8 }

func (c chacha) Read(p []byte) (int, error) { return c.r.Read(p) }

// Echo serves one connection: it copies what it reads back and
// half-closes at EOF.
func Echo(c net.Conn) {
	if _, err := io.Copy(c, c); err != nil {
		return
	}
	_ = c.(*net.TCPConn).CloseWrite()
	_, _ = io.Copy(io.Discard, c)
}

// EchoRoundTrip sends n bytes of Stream(seed) through addr to an echo
// service, half-closes, and checks that the same bytes (by SHA-256) came
// back.
func EchoRoundTrip(addr string, n int64, seed uint64) error {
	return EchoRoundTripWithin(addr, n, seed, 0)
}

// EchoRoundTripWithin is EchoRoundTrip with a deadline d on the connection
// (0: none), for a test where a stall is one of the failures it expects.
func EchoRoundTripWithin(addr string, n int64, seed uint64, d time.Duration) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if d > 0 {
		_ = c.SetDeadline(time.Now().Add(d))
	}
	sent := sha256.New()
	errc := make(chan error, 1)
	go func() {
		_, err := io.Copy(c, io.TeeReader(io.LimitReader(Stream(seed), n), sent))
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got := sha256.New()
	m, rerr := io.Copy(got, c)
	if werr := <-errc; werr != nil {
		return fmt.Errorf("send: %w", werr)
	}
	if rerr != nil {
		return fmt.Errorf("receive after %d bytes: %w", m, rerr)
	}
	if m != n || !bytes.Equal(got.Sum(nil), sent.Sum(nil)) {
		return fmt.Errorf("echo of %d bytes came back as %d bytes with another SHA-256", n, m)
	}
	return nil
}

// SyncBuffer is a bytes.Buffer that goroutines (a process's output
// copiers, a logger) write while a test reads it.
type SyncBuffer struct {
	// Limit, if more than 0, is how many bytes it keeps: writes beyond
	// are dropped (and reported written), so that a chatty process can't
	// fill a harness's memory.
	Limit int

	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Limit > 0 && s.b.Len() >= s.Limit {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Serve accepts connections on a loopback port until the test ends and
// runs h for each in a goroutine of its own, closing the connection when
// h returns. It returns the address; the test's cleanup closes the
// listener and waits for every h.
func Serve(t testing.TB, h func(net.Conn)) string {
	t.Helper()
	return ServeOn(t, "127.0.0.1", h)
}

// ServeOn is Serve on the loopback address host ("::1" for IPv6).
func ServeOn(t testing.TB, host string, h func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				h(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TCPPair is a connected pair of loopback TCP connections, closed when
// the test ends.
func TCPPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	return a, b
}

// Listen is a listener on a loopback port; the test closes it.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
