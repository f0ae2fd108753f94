package netguard

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

func TestSourceOf(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:1000":            "192.0.2.7/32",
		"[::ffff:192.0.2.7]:1000":   "192.0.2.7/32",
		"[2001:db8:1:2:3:4:5:6]:80": "2001:db8:1:2::/64",
	} {
		ap := netip.MustParseAddrPort(addr)
		c := fakeAddrConn{net.TCPAddrFromAddrPort(ap)}
		if got := SourceOf(c); got.String() != want {
			t.Errorf("%s: %v, want %s", addr, got, want)
		}
	}
	if got := SourceOf(fakeAddrConn{&net.UnixAddr{Name: "x", Net: "unix"}}); got.IsValid() {
		t.Errorf("a unix socket counts under %v, want the zero Prefix", got)
	}
}

func TestAcceptBackoff(t *testing.T) {
	var d time.Duration
	var got []time.Duration
	for range 10 {
		d = AcceptBackoff(d)
		got = append(got, d)
	}
	if got[0] != 5*time.Millisecond || got[1] != 10*time.Millisecond || got[9] != time.Second {
		t.Errorf("pauses %v: want 5ms doubling to at most 1s", got)
	}
}

func TestReset(t *testing.T) {
	c, s := testutil.TCPPair(t)
	Reset(s)
	// A reset, not a clean end of data: the read fails with an error
	// other than io.EOF.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := c.Read(make([]byte, 1)); err == nil || err.Error() == "EOF" {
		t.Errorf("read after Reset: %v, want a connection reset", err)
	}
}

type fakeAddrConn struct{ remote net.Addr }

func (c fakeAddrConn) RemoteAddr() net.Addr { return c.remote }

func (fakeAddrConn) Read([]byte) (int, error)         { return 0, nil }
func (fakeAddrConn) Write(b []byte) (int, error)      { return len(b), nil }
func (fakeAddrConn) Close() error                     { return nil }
func (fakeAddrConn) LocalAddr() net.Addr              { return nil }
func (fakeAddrConn) SetDeadline(time.Time) error      { return nil }
func (fakeAddrConn) SetReadDeadline(time.Time) error  { return nil }
func (fakeAddrConn) SetWriteDeadline(time.Time) error { return nil }
