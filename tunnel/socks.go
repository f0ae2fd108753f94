package tunnel

// SOCKS5 dynamic forwarding. The client speaks SOCKS5 to local
// applications (RFC 1928, CONNECT only; no authentication or RFC 1929
// username/password) and sends each destination to the server as a
// socks-connect request (proto.go): a port and the host as the application
// gave it, an IP literal or a DNS name. The server resolves names itself,
// checks every address it would dial against its Rules (deny by default,
// allow's DNS-rebinding rule for names), dials only allowed ones, and
// answers with a status the client turns into the SOCKS5 reply code.
//
//	app ──SOCKS5──> client: greeting, auth, CONNECT ──stream──> server: resolve,
//	     <──reply── (waits for the server's answer)  <─status── check, dial
//	app <══════════════════ chunks (splice.go) ════════════════> destination
//
// Unlike a service forward, the client waits for the server's answer before
// it replies to the application: SOCKS5 needs the result first.

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/offload-dev/offload/tunnel/mux"

	"github.com/offload-dev/offload/tunnel/allow"
)

// SOCKS5 constants (RFC 1928, RFC 1929).
const (
	socksVersion      = 5
	socksAuthVersion  = 1
	socksNoAuth       = 0x00
	socksUserPass     = 0x02
	socksNoAcceptable = 0xff
	socksConnect      = 1
	socksBind         = 2
	socksUDPAssociate = 3
	socksIPv4         = 1
	socksDomain       = 3
	socksIPv6         = 4

	repSucceeded        = 0
	repFailure          = 1
	repNotAllowed       = 2
	repNetUnreachable   = 3
	repHostUnreachable  = 4
	repConnRefused      = 5
	repTTLExpired       = 6
	repCmdNotSupported  = 7
	repAtypNotSupported = 8
)

// ErrSocks is wrapped by the reasons the client refuses a SOCKS5 request
// before anything is sent to the server: a client that is not SOCKS5, a
// command other than CONNECT, failed authentication, a malformed address.
// Fix the application or its proxy settings.
var ErrSocks = errors.New("SOCKS5 request refused")

// Socks is the client's SOCKS5 listener.
type Socks struct {
	Listener net.Listener
	// Users maps user names to passwords (RFC 1929); empty means no
	// authentication.
	Users map[string]string
}

// socksError is a refusal with the reply code to send (0: send none, the
// greeting already failed or the peer is not SOCKS5).
type socksError struct {
	reply byte
	err   error
}

func (e *socksError) Error() string { return e.err.Error() }
func (e *socksError) Unwrap() error { return e.err }

func socksRefuse(reply byte, format string, args ...any) error {
	return &socksError{reply: reply, err: fmt.Errorf("%w: "+format, append([]any{ErrSocks}, args...)...)}
}

// socksForward is the Forward that serves the SOCKS listener.
// Its users are the client's (setSocksUsers), not the Forward's: a reload
// that keeps the listener may change them.
func socksForward(s *Socks) Forward {
	return Forward{Listener: s.Listener, Service: "socks", socks: true}
}

// serveSocks runs SOCKS5 on conn and carries the connection.
func (c *Client) serveSocks(ctx context.Context, conn net.Conn, users map[string]string) {
	_ = conn.SetDeadline(time.Now().Add(c.opt.DialTimeout))
	host, port, err := socksNegotiate(conn, users)
	if err != nil {
		c.socksFail(conn, nil, "socks", err)
		return
	}
	what := "socks " + net.JoinHostPort(host, strconv.Itoa(int(port)))
	req, err := appendRequest(nil, kindSocks, socksArg(host, port))
	if err != nil {
		c.socksFail(conn, nil, what, &socksError{repFailure, err})
		return
	}
	st, err := c.openStream(ctx, req)
	if err != nil {
		c.socksFail(conn, nil, what, &socksError{repFailure, err})
		return
	}
	_ = st.SetReadDeadline(time.Now().Add(2 * c.opt.DialTimeout))
	if err := readResponse(st); err != nil {
		c.socksFail(conn, st, what, &socksError{socksReply(err), err})
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	// BND.ADDR and BND.PORT are zero, as in ssh -D: the address the server
	// dialled from means nothing on this side.
	if _, err := conn.Write([]byte{socksVersion, repSucceeded, 0, socksIPv4, 0, 0, 0, 0, 0, 0}); err != nil {
		resetConn(conn)
		_ = st.Close()
		c.streamEnded(what, 0, 0, fmt.Errorf("%w: writing the SOCKS5 reply: %w", ErrAborted, err))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	up, down, err := splice(conn, st, c.pool, nil)
	c.streamEnded(what, up, down, err)
}

// socksFail sends the refusal's reply code, if it has one, closes conn
// (and st), and counts and logs the refusal with its reason.
func (c *Client) socksFail(conn net.Conn, st *mux.Stream, what string, err error) {
	var se *socksError
	if errors.As(err, &se) && se.reply != 0 {
		_, _ = conn.Write([]byte{socksVersion, se.reply, 0, socksIPv4, 0, 0, 0, 0, 0, 0})
	}
	_ = conn.Close()
	if st != nil {
		_ = st.Close()
	}
	c.refused(what, err)
}

// socksNegotiate reads the greeting, authenticates and reads the CONNECT
// request. It writes the method choice and the authentication status; the
// caller writes the final reply.
func socksNegotiate(conn net.Conn, users map[string]string) (host string, port uint16, err error) {
	var buf [2 + 255]byte
	if _, err := io.ReadFull(conn, buf[:2]); err != nil {
		return "", 0, &socksError{0, fmt.Errorf("%w: reading the greeting: %w", ErrSocks, err)}
	}
	if buf[0] != socksVersion {
		return "", 0, socksRefuse(0, "version %d (want 5): not a SOCKS5 client", buf[0])
	}
	methods := buf[2 : 2+int(buf[1])]
	if _, err := io.ReadFull(conn, methods); err != nil {
		return "", 0, &socksError{0, fmt.Errorf("%w: reading the greeting's methods: %w", ErrSocks, err)}
	}
	want := byte(socksNoAuth)
	if len(users) > 0 {
		want = socksUserPass
	}
	offered := false
	for _, m := range methods {
		offered = offered || m == want
	}
	if !offered {
		_, _ = conn.Write([]byte{socksVersion, socksNoAcceptable})
		return "", 0, socksRefuse(0, "no acceptable authentication method: the client offers % x, this proxy requires %#x", methods, want)
	}
	if _, err := conn.Write([]byte{socksVersion, want}); err != nil {
		return "", 0, fmt.Errorf("%w: writing the method: %w", ErrSocks, err)
	}
	if want == socksUserPass {
		if err := socksAuth(conn, users); err != nil {
			return "", 0, err
		}
	}

	if _, err := io.ReadFull(conn, buf[:4]); err != nil {
		return "", 0, &socksError{0, fmt.Errorf("%w: reading the request: %w", ErrSocks, err)}
	}
	if buf[0] != socksVersion {
		return "", 0, socksRefuse(repFailure, "request version %d (want 5)", buf[0])
	}
	switch buf[1] {
	case socksConnect:
	case socksBind:
		return "", 0, socksRefuse(repCmdNotSupported, "command BIND is not supported (CONNECT only)")
	case socksUDPAssociate:
		return "", 0, socksRefuse(repCmdNotSupported, "command UDP ASSOCIATE is not supported (CONNECT only; see udp_forwards)")
	default:
		return "", 0, socksRefuse(repCmdNotSupported, "unknown command %d", buf[1])
	}
	switch buf[3] {
	case socksIPv4, socksIPv6:
		n := 4
		if buf[3] == socksIPv6 {
			n = 16
		}
		if _, err := io.ReadFull(conn, buf[:n+2]); err != nil {
			return "", 0, socksRefuse(repFailure, "truncated address: %v", err)
		}
		a, _ := netip.AddrFromSlice(buf[:n])
		host, port = a.Unmap().String(), uint16(buf[n])<<8|uint16(buf[n+1])
	case socksDomain:
		if _, err := io.ReadFull(conn, buf[:1]); err != nil {
			return "", 0, socksRefuse(repFailure, "truncated address: %v", err)
		}
		n := int(buf[0])
		if _, err := io.ReadFull(conn, buf[:n+2]); err != nil {
			return "", 0, socksRefuse(repFailure, "truncated name of %d bytes: %v", n, err)
		}
		host, port = string(buf[:n]), uint16(buf[n])<<8|uint16(buf[n+1])
		if err := allow.CheckName(host); err != nil {
			return "", 0, socksRefuse(repHostUnreachable, "bad destination name: %v", err)
		}
	default:
		return "", 0, socksRefuse(repAtypNotSupported, "address type %d", buf[3])
	}
	if port == 0 {
		return "", 0, socksRefuse(repFailure, "destination port 0")
	}
	return host, port, nil
}

// socksAuth runs RFC 1929 username/password authentication.
func socksAuth(conn net.Conn, users map[string]string) error {
	var buf [255]byte
	if _, err := io.ReadFull(conn, buf[:2]); err != nil {
		return &socksError{0, fmt.Errorf("%w: reading the authentication: %w", ErrSocks, err)}
	}
	if buf[0] != socksAuthVersion {
		_, _ = conn.Write([]byte{socksAuthVersion, 1})
		return socksRefuse(0, "authentication version %d (want 1)", buf[0])
	}
	user := make([]byte, buf[1])
	if _, err := io.ReadFull(conn, user); err != nil {
		return &socksError{0, fmt.Errorf("%w: reading the user name: %w", ErrSocks, err)}
	}
	if _, err := io.ReadFull(conn, buf[:1]); err != nil {
		return &socksError{0, fmt.Errorf("%w: reading the password: %w", ErrSocks, err)}
	}
	pass := buf[:buf[0]]
	if _, err := io.ReadFull(conn, pass); err != nil {
		return &socksError{0, fmt.Errorf("%w: reading the password: %w", ErrSocks, err)}
	}
	want, known := users[string(user)]
	// Compare even for an unknown user, so timing does not tell user
	// names apart.
	ok := subtle.ConstantTimeCompare(pass, []byte(want)) == 1 && known
	if !ok {
		_, _ = conn.Write([]byte{socksAuthVersion, 1})
		return socksRefuse(0, "authentication failed for user %q", user)
	}
	_, err := conn.Write([]byte{socksAuthVersion, 0})
	return err
}

// socksReply is the SOCKS5 reply code for the server's refusal.
func socksReply(err error) byte {
	var se *StatusError
	if !errors.As(err, &se) {
		return repFailure
	}
	switch se.Status {
	case statusDenied:
		return repNotAllowed
	case statusConnRefused:
		return repConnRefused
	case statusHostUnreach:
		return repHostUnreachable
	case statusNetUnreach:
		return repNetUnreachable
	case statusDialTimeout:
		return repTTLExpired
	}
	return repFailure
}

// serveSocks serves a socks-connect stream: resolve, check, dial, splice.
// A denied destination is never dialled, nor is any address of a name
// that the rules do not allow.
func (s *Server) serveSocks(ctx context.Context, st *mux.Stream, arg string, l *link) {
	host, port := parseSocksArg(arg)
	dest := net.JoinHostPort(host, strconv.Itoa(int(port)))
	what := "socks " + dest
	var name string
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		if err := allow.CheckName(host); err != nil {
			err = fmt.Errorf("%w: %w", ErrBadRequest, err)
			s.refuse(st, statusBadRequest, err.Error(), l, what, err)
			return
		}
		name = host
		rctx, cancel := context.WithTimeout(ctx, s.opt.DialTimeout)
		addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil {
			s.refuse(st, statusHostUnreach, err.Error(), l, what, fmt.Errorf("resolving %s: %w", host, err))
			return
		}
	}
	rules := l.rules()
	var allowed []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		// 0.0.0.0 and :: dial this host; no rule can mean that.
		if a.IsUnspecified() || a.IsMulticast() || port == 0 {
			continue
		}
		if _, ok := rules.SocksAllowed(name, a, port); ok {
			allowed = append(allowed, a)
		}
	}
	if len(allowed) == 0 {
		msg := fmt.Sprintf("destination %s is not in the server's socks_allow", dest)
		// The client learns no more than that; the log has the addresses.
		s.refuse(st, statusDenied, msg, l, what, fmt.Errorf("%w: %s (resolved to %v)", ErrDenied, msg, addrs))
		return
	}
	// A reload that takes the destination out of the client's
	// socks_allow ends the stream.
	ctx, _, done, err := s.hold(ctx, l, what, func(_ *serverState, a *access) string {
		for _, addr := range allowed {
			if _, ok := a.rules.SocksAllowed(name, addr, port); !ok {
				return "destination no longer in socks_allow"
			}
		}
		return ""
	})
	if err != nil {
		s.refuse(st, statusDenied, "destination no longer allowed", l, what, err)
		return
	}
	defer done()
	var conn net.Conn
	dctx, cancel := context.WithTimeout(ctx, s.opt.DialTimeout)
	for _, a := range allowed {
		if conn, err = s.dialer.DialContext(dctx, "tcp", netip.AddrPortFrom(a, port).String()); err == nil {
			break
		}
	}
	cancel()
	if conn == nil {
		s.refuse(st, dialStatus(err), err.Error(), l, what, err)
		return
	}
	defer l.stat.open("socks", "")()
	s.serveDialled(ctx, st, conn, what, l)
}

// dialStatus is the status for a failed dial, as precise as SOCKS5's
// reply codes can say it.
func dialStatus(err error) byte {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return statusConnRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dnsErr):
		return statusHostUnreach
	case errors.Is(err, syscall.ENETUNREACH):
		return statusNetUnreach
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return statusDialTimeout
	}
	return statusDialFailed
}
