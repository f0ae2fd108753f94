package proxyproto

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"golang.org/x/net/nettest"
)

// wait polls cond; the bound is far above what any run needs, under -race
// beside a busy core: it only ends a test that would hang.
func wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
	}
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// listen starts a Listener on loopback with cfg, closed at the end of the
// test, and checks then that it left no goroutine behind.
func listen(t *testing.T, cfg Config, maxPending, perSource int, dropped func()) (*Listener, *Stats) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	stats := new(Stats)
	l := NewListener(ln, cfg, maxPending, perSource, dropped, zap.NewNop(), stats)
	t.Cleanup(func() { l.Close() })
	return l, stats
}

// send dials l and writes b.
func send(t *testing.T, l net.Listener, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByPeer reports whether the listener closed c (a reset or an end
// of data) without writing anything.
func closedByPeer(t *testing.T, c net.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("read %d bytes, %v: want the connection closed", n, err)
	}
}

// TestListenerClientAddress: a PROXY header's source becomes the
// connection's RemoteAddr, and the bytes after the header are the
// connection's own.
func TestListenerClientAddress(t *testing.T) {
	l, stats := listen(t, Config{From: loopback}, 4, 0, nil)
	src := netip.MustParseAddrPort("192.0.2.7:40001")
	for _, tc := range []struct {
		src  netip.AddrPort
		want string
	}{
		{src, "192.0.2.7:40001"},
		{netip.MustParseAddrPort("[2001:db8::7]:40002"), "[2001:db8::7]:40002"},
		{netip.MustParseAddrPort("[::ffff:192.0.2.8]:3"), "192.0.2.8:3"},
	} {
		dst := netip.MustParseAddrPort("127.0.0.1:7000")
		if tc.src.Addr().Is6() {
			dst = netip.MustParseAddrPort("[::1]:7000")
		}
		c := send(t, l, append(AppendHeader(nil, tc.src, dst, []byte{0x04, 0, 1, 0}), "first flight"...))
		got, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if got.RemoteAddr().String() != tc.want {
			t.Errorf("RemoteAddr %v, want %s", got.RemoteAddr(), tc.want)
		}
		b := make([]byte, len("first flight"))
		if _, err := io.ReadFull(got, b); err != nil || string(b) != "first flight" {
			t.Errorf("after the header: %q, %v", b, err)
		}
		got.Close()
		c.Close()
	}
	if n := stats.Results[ResultOK].Load(); n != 3 {
		t.Errorf("%d ok, want 3", n)
	}
}

// TestListenerRefuses: a connection from outside From and one without a
// valid header are closed and counted, never handed on; a LOCAL one that
// closes without a byte is a health check.
func TestListenerRefuses(t *testing.T) {
	l, stats := listen(t, Config{From: loopback}, 4, 0, nil)
	closedByPeer(t, send(t, l, []byte("GET / HTTP/1.0\r\n\r\n")))
	closedByPeer(t, send(t, l, []byte("PROXY TCP4 192.0.2.7 127.0.0.1 1 2\r\n")))
	if n := stats.Results[ResultBad].Load(); n != 2 {
		t.Errorf("%d bad, want 2", n)
	}
	send(t, l, AppendHeader(nil, netip.AddrPort{}, netip.AddrPort{}, nil)).Close()
	wait(t, "health check counted", func() bool { return stats.Results[ResultLocal].Load() == 1 })

	// Only 10.0.0.0/8 are balancers: a loopback connection is reset
	// before a byte is read, by the accept loop itself.
	far, farStats := listen(t, Config{From: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, 4, 0, nil)
	// The reset can come before the dial has seen its connection made.
	if c, err := net.Dial("tcp", far.Addr().String()); err == nil {
		_, _ = c.Write(AppendHeader(nil, netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("127.0.0.1:2"), nil))
		closedByPeer(t, c)
		c.Close()
	}
	wait(t, "the refusal counted", func() bool { return farStats.Results[ResultRefused].Load() == 1 })
	far.Close()
	if c, err := far.Accept(); err == nil {
		t.Errorf("a refused connection was handed on: %v", c.RemoteAddr())
	}
}

// TestListenerLocalServed: a LOCAL connection that goes on to send is
// served with the balancer's own address.
func TestListenerLocalServed(t *testing.T) {
	l, stats := listen(t, Config{From: loopback}, 4, 0, nil)
	c := send(t, l, append(AppendHeader(nil, netip.AddrPort{}, netip.AddrPort{}, nil), 'x'))
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.RemoteAddr().String() != c.LocalAddr().String() {
		t.Errorf("RemoteAddr %v, want the balancer's %v", got.RemoteAddr(), c.LocalAddr())
	}
	if n := stats.Results[ResultServed].Load(); n != 1 {
		t.Errorf("%d LOCAL served, want 1", n)
	}
}

// TestListenerTimeout: a balancer that sends half a header is closed
// after HeaderTimeout.
func TestListenerTimeout(t *testing.T) {
	l, stats := listen(t, Config{From: loopback, HeaderTimeout: 50 * time.Millisecond}, 4, 0, nil)
	hdr := AppendHeader(nil, netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("127.0.0.1:2"), nil)
	closedByPeer(t, send(t, l, hdr[:FixedLen+3]))
	if n := stats.Results[ResultTimeout].Load(); n != 1 {
		t.Errorf("%d timeouts, want 1", n)
	}
}

// TestListenerPerSource: a source at perSource connections waiting for
// Accept has its next one reset and passed to dropped.
func TestListenerPerSource(t *testing.T) {
	var dropped atomic.Int32
	l, stats := listen(t, Config{From: loopback}, 4, 1, func() { dropped.Add(1) })
	dst := netip.MustParseAddrPort("127.0.0.1:2")
	send(t, l, AppendHeader(nil, netip.MustParseAddrPort("192.0.2.7:1"), dst, nil))
	wait(t, "first connection's header read", func() bool { return stats.Results[ResultOK].Load() == 1 })
	// Another port of the same address, and of its IPv6 /64: one source.
	closedByPeer(t, send(t, l, AppendHeader(nil, netip.MustParseAddrPort("192.0.2.7:2"), dst, nil)))
	wait(t, "the second dropped", func() bool { return dropped.Load() == 1 })
	send(t, l, AppendHeader(nil, netip.MustParseAddrPort("192.0.2.8:1"), dst, nil))
	for _, want := range []string{"192.0.2.7:1", "192.0.2.8:1"} {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if c.RemoteAddr().String() != want {
			t.Errorf("accepted %v, want %s", c.RemoteAddr(), want)
		}
		c.Close()
	}
}

// TestListenerConn: the connection the listener hands on is a net.Conn
// like any other.
func TestListenerConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, nil, err
		}
		l := NewListener(ln, Config{From: loopback}, 4, 0, nil, zap.NewNop(), new(Stats))
		c2, err = net.Dial("tcp", l.Addr().String())
		if err != nil {
			l.Close()
			return nil, nil, nil, err
		}
		hdr := AppendHeader(nil, netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("127.0.0.1:2"), nil)
		if _, err := c2.Write(hdr); err != nil {
			l.Close()
			c2.Close()
			return nil, nil, nil, err
		}
		c1, err = l.Accept()
		if err != nil {
			l.Close()
			c2.Close()
			return nil, nil, nil, err
		}
		if !bytes.Equal([]byte(c1.RemoteAddr().String()), []byte("192.0.2.7:1")) {
			t.Errorf("RemoteAddr %v", c1.RemoteAddr())
		}
		return c1, c2, func() { c1.Close(); c2.Close(); l.Close() }, nil
	})
}
