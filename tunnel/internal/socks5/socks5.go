// Package socks5 is the SOCKS5 wire of the server side of a proxy, and
// nothing else: the greeting, the method choice, RFC 1929 username and
// password, the CONNECT request and the reply. What a request leads to (a
// stream to the offload server, its answer) is the tunnel's.
//
// The exchange (RFC 1928, RFC 1929; every length a single byte):
//
//	greeting   app → proxy  VER=5 | NMETHODS | METHODS (NMETHODS bytes)
//	method     proxy → app  VER=5 | METHOD   (0x00 none, 0x02 user/password,
//	                                          0xff none acceptable: close)
//	auth       app → proxy  VER=1 | ULEN | UNAME | PLEN | PASSWD   (method 0x02)
//	status     proxy → app  VER=1 | STATUS   (0 success; else close)
//	request    app → proxy  VER=5 | CMD | RSV | ATYP | DST.ADDR | DST.PORT (u16be)
//	                        CMD 1 CONNECT (2 BIND, 3 UDP ASSOCIATE: refused)
//	                        ATYP 1 IPv4 (4 bytes), 3 name (LEN | name), 4 IPv6 (16)
//	reply      proxy → app  VER=5 | REP | RSV=0 | ATYP=1 | BND.ADDR=0.0.0.0 | BND.PORT=0
//
// A refusal before the request is answered by closing (after a method
// 0xff or an auth status 1); a refused request gets a reply with its code.
// BND.ADDR and BND.PORT are always zero, as in ssh -D: the address the
// far end dialled from means nothing to the application.
package socks5

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// Protocol constants (RFC 1928, RFC 1929).
const (
	Version     = 5
	AuthVersion = 1

	MethodNoAuth       = 0x00
	MethodUserPass     = 0x02
	MethodNoAcceptable = 0xff

	CmdConnect      = 1
	CmdBind         = 2
	CmdUDPAssociate = 3

	AtypIPv4   = 1
	AtypDomain = 3
	AtypIPv6   = 4
)

// Reply codes (RFC 1928 section 6).
const (
	ReplySucceeded        = 0
	ReplyFailure          = 1
	ReplyNotAllowed       = 2
	ReplyNetUnreachable   = 3
	ReplyHostUnreachable  = 4
	ReplyConnRefused      = 5
	ReplyTTLExpired       = 6
	ReplyCmdNotSupported  = 7
	ReplyAtypNotSupported = 8
)

// ErrRefused is wrapped by the reasons a SOCKS5 request is refused before
// anything is sent on: a client that is not SOCKS5, a command other than
// CONNECT, failed authentication, a malformed address. Fix the
// application or its proxy settings.
var ErrRefused = errors.New("SOCKS5 request refused")

// Error is a refusal with the reply code to send (0: send none, the
// greeting already failed or the peer is not SOCKS5).
type Error struct {
	Reply byte
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func refuse(reply byte, format string, args ...any) error {
	return &Error{Reply: reply, Err: fmt.Errorf("%w: "+format, append([]any{ErrRefused}, args...)...)}
}

// Negotiate reads the greeting, authenticates (when users is not empty,
// RFC 1929 against it) and reads the CONNECT request. It writes the method
// choice and the authentication status; the caller writes the reply
// (WriteReply). checkName, if not nil, vets a destination given as a name;
// a name it rejects is refused with host unreachable. Every refusal wraps
// ErrRefused in an *Error, except a failed write of the method choice.
func Negotiate(conn io.ReadWriter, users map[string]string, checkName func(string) error) (host string, port uint16, err error) {
	var buf [2 + 255]byte
	if _, err := io.ReadFull(conn, buf[:2]); err != nil {
		return "", 0, &Error{0, fmt.Errorf("%w: reading the greeting: %w", ErrRefused, err)}
	}
	if buf[0] != Version {
		return "", 0, refuse(0, "version %d (want 5): not a SOCKS5 client", buf[0])
	}
	methods := buf[2 : 2+int(buf[1])]
	if _, err := io.ReadFull(conn, methods); err != nil {
		return "", 0, &Error{0, fmt.Errorf("%w: reading the greeting's methods: %w", ErrRefused, err)}
	}
	want := byte(MethodNoAuth)
	if len(users) > 0 {
		want = MethodUserPass
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered {
		_, _ = conn.Write([]byte{Version, MethodNoAcceptable})
		return "", 0, refuse(0, "no acceptable authentication method: the client offers % x, this proxy requires %#x", methods, want)
	}
	if _, err := conn.Write([]byte{Version, want}); err != nil {
		return "", 0, fmt.Errorf("%w: writing the method: %w", ErrRefused, err)
	}
	if want == MethodUserPass {
		if err := authenticate(conn, users); err != nil {
			return "", 0, err
		}
	}

	if _, err := io.ReadFull(conn, buf[:4]); err != nil {
		return "", 0, &Error{0, fmt.Errorf("%w: reading the request: %w", ErrRefused, err)}
	}
	if buf[0] != Version {
		return "", 0, refuse(ReplyFailure, "request version %d (want 5)", buf[0])
	}
	switch buf[1] {
	case CmdConnect:
	case CmdBind:
		return "", 0, refuse(ReplyCmdNotSupported, "command BIND is not supported (CONNECT only)")
	case CmdUDPAssociate:
		return "", 0, refuse(ReplyCmdNotSupported, "command UDP ASSOCIATE is not supported (CONNECT only; see udp_forwards)")
	default:
		return "", 0, refuse(ReplyCmdNotSupported, "unknown command %d", buf[1])
	}
	switch buf[3] {
	case AtypIPv4, AtypIPv6:
		n := 4
		if buf[3] == AtypIPv6 {
			n = 16
		}
		if _, err := io.ReadFull(conn, buf[:n+2]); err != nil {
			return "", 0, refuse(ReplyFailure, "truncated address: %v", err)
		}
		a, _ := netip.AddrFromSlice(buf[:n])
		host, port = a.Unmap().String(), uint16(buf[n])<<8|uint16(buf[n+1])
	case AtypDomain:
		if _, err := io.ReadFull(conn, buf[:1]); err != nil {
			return "", 0, refuse(ReplyFailure, "truncated address: %v", err)
		}
		n := int(buf[0])
		if _, err := io.ReadFull(conn, buf[:n+2]); err != nil {
			return "", 0, refuse(ReplyFailure, "truncated name of %d bytes: %v", n, err)
		}
		host, port = string(buf[:n]), uint16(buf[n])<<8|uint16(buf[n+1])
		if checkName != nil {
			if err := checkName(host); err != nil {
				return "", 0, refuse(ReplyHostUnreachable, "bad destination name: %v", err)
			}
		}
	default:
		return "", 0, refuse(ReplyAtypNotSupported, "address type %d", buf[3])
	}
	if port == 0 {
		return "", 0, refuse(ReplyFailure, "destination port 0")
	}
	return host, port, nil
}

// authenticate runs RFC 1929 username/password authentication.
func authenticate(conn io.ReadWriter, users map[string]string) error {
	var buf [255]byte
	if _, err := io.ReadFull(conn, buf[:2]); err != nil {
		return &Error{0, fmt.Errorf("%w: reading the authentication: %w", ErrRefused, err)}
	}
	if buf[0] != AuthVersion {
		_, _ = conn.Write([]byte{AuthVersion, 1})
		return refuse(0, "authentication version %d (want 1)", buf[0])
	}
	user := make([]byte, buf[1])
	if _, err := io.ReadFull(conn, user); err != nil {
		return &Error{0, fmt.Errorf("%w: reading the user name: %w", ErrRefused, err)}
	}
	if _, err := io.ReadFull(conn, buf[:1]); err != nil {
		return &Error{0, fmt.Errorf("%w: reading the password: %w", ErrRefused, err)}
	}
	pass := buf[:buf[0]]
	if _, err := io.ReadFull(conn, pass); err != nil {
		return &Error{0, fmt.Errorf("%w: reading the password: %w", ErrRefused, err)}
	}
	want, known := users[string(user)]
	// Compare even for an unknown user, so timing does not tell user
	// names apart.
	ok := subtle.ConstantTimeCompare(pass, []byte(want)) == 1 && known
	if !ok {
		_, _ = conn.Write([]byte{AuthVersion, 1})
		return refuse(0, "authentication failed for user %q", user)
	}
	_, err := conn.Write([]byte{AuthVersion, 0})
	return err
}

// WriteReply writes the reply to a request with the code reply and a zero
// BND.ADDR and BND.PORT.
func WriteReply(w io.Writer, reply byte) error {
	_, err := w.Write([]byte{Version, reply, 0, AtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}
