package tunnel

// PROXY protocol version 2, the binary header an L4 load balancer (HAProxy
// "send-proxy-v2", AWS NLB, ...) writes at the start of each connection it
// opens to a server, so that the server learns the client's real address
// (https://www.haproxy.org/download/2.9/doc/proxy-protocol.txt, section 2.2):
//
//	sig[12]  0D 0A 0D 0A 00 0D 0A 51 55 49 54 0A
//	ver_cmd  u8   high nibble version (2), low nibble command: 0 LOCAL, 1 PROXY
//	fam      u8   high nibble family: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX;
//	              low nibble transport: 0 UNSPEC, 1 STREAM, 2 DGRAM
//	len      u16be  bytes that follow: the addresses, then TLVs
//	INET     src[4]  dst[4]  sport:u16be dport:u16be    (12 bytes)
//	INET6    src[16] dst[16] sport:u16be dport:u16be    (36 bytes)
//	TLV      type:u8 len:u16be value[len]               (repeated to the end)
//
// What the server accepts (everything else closes the connection):
//
//   - PROXY over STREAM with INET or INET6: the connection is the client's
//     at src:sport; logs, handshake slots and per-source caps see that.
//   - LOCAL (the balancer's own health checks) with any family: the
//     addresses are ignored, as the spec says, and the connection keeps
//     the balancer's address. One that closes without sending a byte is a
//     health check, counted and not logged; one that sends goes on to the
//     handshake like any other.
//
// Refused: a version-1 text header ("PROXY TCP4 ..."), a missing header,
// another version or command, PROXY with UNSPEC, UNIX or DGRAM (no
// address the per-source caps could use), addresses shorter than their
// family needs, TLVs that overrun len. TLVs are skipped (the spec: ignore
// unknown ones); none changes what the server does.
//
// Bounds: len may be at most proxyMaxBody (2 KiB; an address block is 36
// bytes and HAProxy's TLVs a few dozen), and the header is read exactly
// (16 bytes, then len), never past it, so the handshake's bytes stay in
// the socket. A connection pays at most proxyMaxBody+16 bytes and
// HeaderTimeout before it is served or closed.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
)

// proxySig is the v2 signature.
var proxySig = [12]byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

const (
	proxyFixedLen = 16       // signature, ver_cmd, fam, len
	proxyMaxBody  = 2 << 10  // what len may say
	proxyCmdLocal = 0x0      // low nibble of ver_cmd
	proxyCmdProxy = 0x1      //
	proxyFamInet  = 0x1      // high nibble of fam
	proxyFamInet6 = 0x2      //
	proxyStream   = 0x1      // low nibble of fam
	proxyV1Prefix = "PROXY " // a version-1 header starts so
)

// ErrProxyHeader is wrapped by every refusal of a PROXY protocol header:
// the connection did not come from a load balancer configured with
// send-proxy-v2 (or equivalent), or the header was damaged. The
// connection is closed; nothing else is to be done.
var ErrProxyHeader = errors.New("PROXY protocol header")

// proxyHeader is a parsed header.
type proxyHeader struct {
	local    bool           // LOCAL: keep the connection's own addresses
	src, dst netip.AddrPort // PROXY: the client and the address it reached
}

// readProxyHeader reads one v2 header from r, exactly its length.
func readProxyHeader(r io.Reader) (proxyHeader, error) {
	var buf [proxyFixedLen + proxyMaxBody]byte
	if _, err := io.ReadFull(r, buf[:proxyFixedLen]); err != nil {
		if bytes.HasPrefix(buf[:], []byte(proxyV1Prefix)) {
			return proxyHeader{}, fmt.Errorf("%w: a version 1 (text) header; configure the balancer for version 2 (HAProxy: send-proxy-v2)", ErrProxyHeader)
		}
		return proxyHeader{}, fmt.Errorf("%w: reading it: %w", ErrProxyHeader, err)
	}
	n, err := proxyBodyLen(buf[:proxyFixedLen])
	if err != nil {
		return proxyHeader{}, err
	}
	if _, err := io.ReadFull(r, buf[proxyFixedLen:proxyFixedLen+n]); err != nil {
		return proxyHeader{}, fmt.Errorf("%w: reading its %d-byte body: %w", ErrProxyHeader, n, err)
	}
	h, _, err := parseProxyHeader(buf[:proxyFixedLen+n])
	return h, err
}

// proxyBodyLen checks the fixed 16 bytes and returns the body's length.
func proxyBodyLen(fixed []byte) (int, error) {
	if !bytes.Equal(fixed[:12], proxySig[:]) {
		if bytes.HasPrefix(fixed, []byte(proxyV1Prefix)) {
			return 0, fmt.Errorf("%w: a version 1 (text) header; configure the balancer for version 2 (HAProxy: send-proxy-v2)", ErrProxyHeader)
		}
		return 0, fmt.Errorf("%w: missing (no version 2 signature in the first bytes)", ErrProxyHeader)
	}
	if v := fixed[12] >> 4; v != 2 {
		return 0, fmt.Errorf("%w: version %d, want 2", ErrProxyHeader, v)
	}
	n := int(binary.BigEndian.Uint16(fixed[14:16]))
	if n > proxyMaxBody {
		return 0, fmt.Errorf("%w: %d bytes of addresses and TLVs, more than the %d allowed", ErrProxyHeader, n, proxyMaxBody)
	}
	return n, nil
}

// parseProxyHeader parses a whole header at the start of b and returns it
// and its length.
func parseProxyHeader(b []byte) (proxyHeader, int, error) {
	if len(b) < proxyFixedLen {
		return proxyHeader{}, 0, fmt.Errorf("%w: %d bytes, shorter than the fixed part", ErrProxyHeader, len(b))
	}
	n, err := proxyBodyLen(b[:proxyFixedLen])
	if err != nil {
		return proxyHeader{}, 0, err
	}
	if len(b) < proxyFixedLen+n {
		return proxyHeader{}, 0, fmt.Errorf("%w: %d bytes, len says %d", ErrProxyHeader, len(b), proxyFixedLen+n)
	}
	body := b[proxyFixedLen : proxyFixedLen+n]
	cmd, fam, transport := b[12]&0xF, b[13]>>4, b[13]&0xF
	var h proxyHeader
	var addrLen int
	switch cmd {
	case proxyCmdLocal:
		// The addresses, if any, are ignored; only the TLVs must fit.
		h.local = true
		switch fam {
		case proxyFamInet:
			addrLen = 12
		case proxyFamInet6:
			addrLen = 36
		case 3:
			addrLen = 216
		}
		addrLen = min(addrLen, len(body))
	case proxyCmdProxy:
		if transport != proxyStream {
			return proxyHeader{}, 0, fmt.Errorf("%w: transport %d, want 1 (STREAM, TCP)", ErrProxyHeader, transport)
		}
		ipLen, name := 4, "INET"
		if fam == proxyFamInet6 {
			ipLen, name = 16, "INET6"
		}
		switch fam {
		case proxyFamInet, proxyFamInet6:
			// src, dst, then their ports.
			addrLen = 2*ipLen + 4
			if len(body) < addrLen {
				return proxyHeader{}, 0, fmt.Errorf("%w: %s with %d bytes of addresses, want %d", ErrProxyHeader, name, len(body), addrLen)
			}
			src, _ := netip.AddrFromSlice(body[:ipLen])
			dst, _ := netip.AddrFromSlice(body[ipLen : 2*ipLen])
			h.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[2*ipLen:]))
			h.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[2*ipLen+2:]))
		default:
			return proxyHeader{}, 0, fmt.Errorf("%w: PROXY with address family %d; want 1 (INET) or 2 (INET6)", ErrProxyHeader, fam)
		}
	default:
		return proxyHeader{}, 0, fmt.Errorf("%w: command %d, want 0 (LOCAL) or 1 (PROXY)", ErrProxyHeader, cmd)
	}
	for tlvs := body[addrLen:]; len(tlvs) > 0; {
		if len(tlvs) < 3 {
			return proxyHeader{}, 0, fmt.Errorf("%w: %d stray bytes after the TLVs", ErrProxyHeader, len(tlvs))
		}
		l := 3 + int(binary.BigEndian.Uint16(tlvs[1:3]))
		if l > len(tlvs) {
			return proxyHeader{}, 0, fmt.Errorf("%w: TLV type 0x%02x of %d bytes overruns the header", ErrProxyHeader, tlvs[0], l-3)
		}
		tlvs = tlvs[l:]
	}
	return h, proxyFixedLen + n, nil
}

// addr is the client's address as a net.Addr, for RemoteAddr.
func (h proxyHeader) addr() net.Addr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.src.Addr().Unmap(), h.src.Port()))
}
