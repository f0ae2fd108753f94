// Package proxyproto reads the PROXY protocol version 2 header a load
// balancer sends before a connection's own bytes (header.go), and puts a
// listener in front of a server's that reads it from every connection it
// accepts (listener.go). It knows nothing of the server behind: its caps
// come in as numbers, its drops go out through a callback.
package proxyproto

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
// Bounds: len may be at most MaxBody (2 KiB; an address block is 36
// bytes and HAProxy's TLVs a few dozen), and the header is read exactly
// (16 bytes, then len), never past it, so the handshake's bytes stay in
// the socket. A connection pays at most MaxBody+16 bytes and
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

// Signature is the v2 signature, the first 12 bytes of a header.
var Signature = [12]byte{0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A}

// The sizes of a header: FixedLen, then at most MaxBody.
const (
	FixedLen = 16      // signature, ver_cmd, fam, len
	MaxBody  = 2 << 10 // what len may say
)

const (
	cmdLocal        = 0x0      // low nibble of ver_cmd
	cmdProxy        = 0x1      //
	famInet         = 0x1      // high nibble of fam
	famInet6        = 0x2      //
	transportStream = 0x1      // low nibble of fam
	v1Prefix        = "PROXY " // a version-1 header starts so
)

// ErrHeader is wrapped by every refusal of a PROXY protocol header:
// the connection did not come from a load balancer configured with
// send-proxy-v2 (or equivalent), or the header was damaged. The
// connection is closed; nothing else is to be done.
var ErrHeader = errors.New("PROXY protocol header")

// Header is a parsed header.
type Header struct {
	Local    bool           // LOCAL: keep the connection's own addresses
	Src, Dst netip.AddrPort // PROXY: the client and the address it reached
}

// ReadHeader reads one v2 header from r, exactly its length.
func ReadHeader(r io.Reader) (Header, error) {
	var buf [FixedLen + MaxBody]byte
	if _, err := io.ReadFull(r, buf[:FixedLen]); err != nil {
		if bytes.HasPrefix(buf[:], []byte(v1Prefix)) {
			return Header{}, fmt.Errorf("%w: a version 1 (text) header; configure the balancer for version 2 (HAProxy: send-proxy-v2)", ErrHeader)
		}
		return Header{}, fmt.Errorf("%w: reading it: %w", ErrHeader, err)
	}
	n, err := bodyLen(buf[:FixedLen])
	if err != nil {
		return Header{}, err
	}
	if _, err := io.ReadFull(r, buf[FixedLen:FixedLen+n]); err != nil {
		return Header{}, fmt.Errorf("%w: reading its %d-byte body: %w", ErrHeader, n, err)
	}
	h, _, err := ParseHeader(buf[:FixedLen+n])
	return h, err
}

// bodyLen checks the fixed 16 bytes and returns the body's length.
func bodyLen(fixed []byte) (int, error) {
	if !bytes.Equal(fixed[:12], Signature[:]) {
		if bytes.HasPrefix(fixed, []byte(v1Prefix)) {
			return 0, fmt.Errorf("%w: a version 1 (text) header; configure the balancer for version 2 (HAProxy: send-proxy-v2)", ErrHeader)
		}
		return 0, fmt.Errorf("%w: missing (no version 2 signature in the first bytes)", ErrHeader)
	}
	if v := fixed[12] >> 4; v != 2 {
		return 0, fmt.Errorf("%w: version %d, want 2", ErrHeader, v)
	}
	n := int(binary.BigEndian.Uint16(fixed[14:16]))
	if n > MaxBody {
		return 0, fmt.Errorf("%w: %d bytes of addresses and TLVs, more than the %d allowed", ErrHeader, n, MaxBody)
	}
	return n, nil
}

// ParseHeader parses a whole header at the start of b and returns it
// and its length.
func ParseHeader(b []byte) (Header, int, error) {
	if len(b) < FixedLen {
		return Header{}, 0, fmt.Errorf("%w: %d bytes, shorter than the fixed part", ErrHeader, len(b))
	}
	n, err := bodyLen(b[:FixedLen])
	if err != nil {
		return Header{}, 0, err
	}
	if len(b) < FixedLen+n {
		return Header{}, 0, fmt.Errorf("%w: %d bytes, len says %d", ErrHeader, len(b), FixedLen+n)
	}
	body := b[FixedLen : FixedLen+n]
	cmd, fam, transport := b[12]&0xF, b[13]>>4, b[13]&0xF
	var h Header
	var addrLen int
	switch cmd {
	case cmdLocal:
		// The addresses, if any, are ignored; only the TLVs must fit.
		h.Local = true
		switch fam {
		case famInet:
			addrLen = 12
		case famInet6:
			addrLen = 36
		case 3:
			addrLen = 216
		}
		addrLen = min(addrLen, len(body))
	case cmdProxy:
		if transport != transportStream {
			return Header{}, 0, fmt.Errorf("%w: transport %d, want 1 (STREAM, TCP)", ErrHeader, transport)
		}
		ipLen, name := 4, "INET"
		if fam == famInet6 {
			ipLen, name = 16, "INET6"
		}
		switch fam {
		case famInet, famInet6:
			// src, dst, then their ports.
			addrLen = 2*ipLen + 4
			if len(body) < addrLen {
				return Header{}, 0, fmt.Errorf("%w: %s with %d bytes of addresses, want %d", ErrHeader, name, len(body), addrLen)
			}
			src, _ := netip.AddrFromSlice(body[:ipLen])
			dst, _ := netip.AddrFromSlice(body[ipLen : 2*ipLen])
			h.Src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(body[2*ipLen:]))
			h.Dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(body[2*ipLen+2:]))
		default:
			return Header{}, 0, fmt.Errorf("%w: PROXY with address family %d; want 1 (INET) or 2 (INET6)", ErrHeader, fam)
		}
	default:
		return Header{}, 0, fmt.Errorf("%w: command %d, want 0 (LOCAL) or 1 (PROXY)", ErrHeader, cmd)
	}
	for tlvs := body[addrLen:]; len(tlvs) > 0; {
		if len(tlvs) < 3 {
			return Header{}, 0, fmt.Errorf("%w: %d stray bytes after the TLVs", ErrHeader, len(tlvs))
		}
		l := 3 + int(binary.BigEndian.Uint16(tlvs[1:3]))
		if l > len(tlvs) {
			return Header{}, 0, fmt.Errorf("%w: TLV type 0x%02x of %d bytes overruns the header", ErrHeader, tlvs[0], l-3)
		}
		tlvs = tlvs[l:]
	}
	return h, FixedLen + n, nil
}

// addr is the client's address as a net.Addr, for RemoteAddr.
func (h Header) Addr() net.Addr {
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(h.Src.Addr().Unmap(), h.Src.Port()))
}

// AppendHeader appends a v2 header to b: PROXY over STREAM from src to
// dst (the family from src), or LOCAL with UNSPEC addresses when src is
// the zero AddrPort; tlvs go after the addresses as they are. It is what
// a balancer sends, for tests and tools that stand in for one.
func AppendHeader(b []byte, src, dst netip.AddrPort, tlvs []byte) []byte {
	b = append(b, Signature[:]...)
	var addrs []byte
	switch {
	case !src.IsValid():
		b = append(b, 0x20, 0x00) // LOCAL, UNSPEC
	case src.Addr().Is4():
		b = append(b, 0x21, 0x11) // PROXY, INET STREAM
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		addrs = append(append(addrs, s4[:]...), d4[:]...)
	default:
		b = append(b, 0x21, 0x21) // PROXY, INET6 STREAM
		s16, d16 := src.Addr().As16(), dst.Addr().As16()
		addrs = append(append(addrs, s16[:]...), d16[:]...)
	}
	if src.IsValid() {
		addrs = binary.BigEndian.AppendUint16(addrs, src.Port())
		addrs = binary.BigEndian.AppendUint16(addrs, dst.Port())
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(addrs)+len(tlvs)))
	return append(append(b, addrs...), tlvs...)
}
