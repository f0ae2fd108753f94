package netguard

import (
	"net"
	"net/netip"
	"time"
)

// Reset closes c with a RST where it can (SO_LINGER 0), so that the peer
// sees an error (connection reset) rather than a clean end of data.
func Reset(c net.Conn) {
	if tc, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// SourceOf is the address a per-source cap counts c under: the IPv4
// address, or the IPv6 /64 (one host can have a whole /64). A connection
// without a TCP address counts under the zero Prefix.
func SourceOf(c net.Conn) netip.Prefix {
	ta, ok := c.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}
	}
	a, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// AcceptBackoff is the pause after a failed Accept (out of file
// descriptors, say), doubling from 5ms to 1s as net/http does; prev is
// the last pause, 0 after an Accept that succeeded.
func AcceptBackoff(prev time.Duration) time.Duration {
	if prev == 0 {
		return 5 * time.Millisecond
	}
	return min(2*prev, time.Second)
}
