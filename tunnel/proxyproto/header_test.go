package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseProxyHeader(t *testing.T) {
	src4, dst4 := netip.MustParseAddrPort("192.0.2.7:40001"), netip.MustParseAddrPort("127.0.0.1:7000")
	src6, dst6 := netip.MustParseAddrPort("[2001:db8::7]:40002"), netip.MustParseAddrPort("[::1]:7000")
	// HAProxy's own TLVs: a NOOP of 3 bytes, a unique ID.
	tlvs := []byte{0x04, 0x00, 0x03, 0, 0, 0, 0x05, 0x00, 0x02, 'i', 'd'}
	for _, tc := range []struct {
		name  string
		hdr   []byte
		local bool
		src   netip.AddrPort
	}{
		{"inet", AppendHeader(nil, src4, dst4, nil), false, src4},
		{"inet6", AppendHeader(nil, src6, dst6, nil), false, src6},
		{"inet with TLVs", AppendHeader(nil, src4, dst4, tlvs), false, src4},
		{"local", AppendHeader(nil, netip.AddrPort{}, netip.AddrPort{}, nil), true, netip.AddrPort{}},
		// HAProxy's health checks send LOCAL with the check's INET addresses.
		{"local inet", func() []byte { b := AppendHeader(nil, src4, dst4, nil); b[12] = 0x20; return b }(), true, netip.AddrPort{}},
	} {
		// What follows the header must stay unread.
		in := append(bytes.Clone(tc.hdr), "first flight"...)
		r := bytes.NewReader(in)
		h, err := ReadHeader(r)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if h.Local != tc.local || h.Src != tc.src {
			t.Errorf("%s: got local %v src %v, want %v %v", tc.name, h.Local, h.Src, tc.local, tc.src)
		}
		if r.Len() != len("first flight") {
			t.Errorf("%s: read %d bytes past the header", tc.name, len("first flight")-r.Len())
		}
		if !tc.local && h.Addr().String() != tc.src.String() {
			t.Errorf("%s: addr %v", tc.name, h.Addr())
		}
	}
}

func TestParseProxyHeaderRefused(t *testing.T) {
	src, dst := netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("127.0.0.1:2")
	good := AppendHeader(nil, src, dst, nil)
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"v1 text", []byte("PROXY TCP4 192.0.2.7 127.0.0.1 1 2\r\n"), "version 1 (text)"},
		{"no header", []byte("\x00\x00\x00\x50noise flight bytes"), "missing"},
		{"short", good[:10], "reading it"},
		{"truncated body", good[:len(good)-1], "body"},
		{"version 1 nibble", mod(func(b []byte) []byte { b[12] = 0x11; return b }), "version 1, want 2"},
		{"command 2", mod(func(b []byte) []byte { b[12] = 0x22; return b }), "command 2"},
		{"udp", mod(func(b []byte) []byte { b[13] = 0x12; return b }), "transport 2"},
		{"unix", mod(func(b []byte) []byte { b[13] = 0x31; return b }), "address family 3"},
		{"unspec", mod(func(b []byte) []byte { b[13] = 0x01; return b }), "address family 0"},
		{"inet6 too short", mod(func(b []byte) []byte { b[13] = 0x21; return b }), "INET6 with 12 bytes"},
		{"too long", mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[14:], MaxBody+1); return b }), "more than the 2048 allowed"},
		{"tlv overrun", AppendHeader(nil, src, dst, []byte{0x04, 0x00, 0x09, 0}), "overruns"},
		{"tlv stray", AppendHeader(nil, src, dst, []byte{0x04, 0x00}), "stray"},
	} {
		_, err := ReadHeader(bytes.NewReader(tc.in))
		if !errors.Is(err, ErrHeader) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrHeader with %q", tc.name, err, tc.want)
		}
	}
}

// FuzzProxyHeader: any input is parsed or refused without panicking; a
// parsed header is no longer than the input and the bound; reading from a
// stream agrees with parsing and never reads past the header; a parsed
// PROXY header encodes back to one that parses the same.
func FuzzProxyHeader(f *testing.F) {
	src, dst := netip.MustParseAddrPort("192.0.2.7:40001"), netip.MustParseAddrPort("127.0.0.1:7000")
	f.Add(AppendHeader(nil, src, dst, nil))
	f.Add(AppendHeader(nil, netip.MustParseAddrPort("[2001:db8::1]:1"), netip.MustParseAddrPort("[::1]:2"), []byte{1, 0, 1, 'h'}))
	f.Add(AppendHeader(nil, netip.AddrPort{}, netip.AddrPort{}, nil))
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := ParseHeader(b)
		r := bytes.NewReader(b)
		h2, err2 := ReadHeader(r)
		if err != nil {
			if !errors.Is(err, ErrHeader) {
				t.Fatalf("error without ErrHeader: %v", err)
			}
			if err2 == nil {
				t.Fatalf("parse refused (%v) what read accepted", err)
			}
			return
		}
		if err2 != nil || h2 != h || r.Len() != len(b)-n {
			t.Fatalf("read: %+v, %v, %d left; parse: %+v, %d of %d", h2, err2, r.Len(), h, n, len(b))
		}
		if n > len(b) || n > FixedLen+MaxBody || n < FixedLen {
			t.Fatalf("header length %d of %d bytes", n, len(b))
		}
		if h.Local {
			return
		}
		if !h.Src.Addr().Is4() && !h.Src.Addr().Is6() {
			t.Fatalf("PROXY header with source %v", h.Src)
		}
		again, m, err := ParseHeader(AppendHeader(nil, h.Src, h.Dst, nil))
		if err != nil || again != h || m == 0 {
			t.Fatalf("round trip of %+v: %+v, %v", h, again, err)
		}
	})
}
