package tunnel

// SOCKS5 dynamic forwarding. The client speaks SOCKS5 to local
// applications (RFC 1928, CONNECT only; no authentication or RFC 1929
// username/password; the wire is tunnel/internal/socks5) and sends each destination to the server as a
// socks-connect request (tunnel/stream): a port and the host as the application
// gave it, an IP literal or a DNS name. The server resolves names itself,
// checks every address it would dial against its Rules (deny by default,
// allow's DNS-rebinding rule for names), dials only allowed ones, and
// answers with a status the client turns into the SOCKS5 reply code.
//
//	app ──SOCKS5──> client: greeting, auth, CONNECT ──stream──> server: resolve,
//	     <──reply── (waits for the server's answer)  <─status── check, dial
//	app <══════════════════ chunks (tunnel/stream) ════════════════> destination
//
// Unlike a service forward, the client waits for the server's answer before
// it replies to the application: SOCKS5 needs the result first.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/offload-dev/offload/tunnel/allow"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/internal/socks5"
	"github.com/offload-dev/offload/tunnel/mux"
	"github.com/offload-dev/offload/tunnel/stream"
)

// Socks is the client's SOCKS5 listener.
type Socks struct {
	Listener net.Listener
	// Users maps user names to passwords (RFC 1929); empty means no
	// authentication.
	Users map[string]string
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
	host, port, err := socks5.Negotiate(conn, users, allow.CheckName)
	if err != nil {
		c.socksFail(conn, nil, "socks", err)
		return
	}
	what := "socks " + net.JoinHostPort(host, strconv.Itoa(int(port)))
	req, err := stream.AppendRequest(nil, stream.KindSocks, stream.SocksArg(host, port))
	if err != nil {
		c.socksFail(conn, nil, what, &socks5.Error{Reply: socks5.ReplyFailure, Err: err})
		return
	}
	st, err := c.openStream(ctx, req)
	if err != nil {
		c.socksFail(conn, nil, what, &socks5.Error{Reply: socks5.ReplyFailure, Err: err})
		return
	}
	_ = st.SetReadDeadline(time.Now().Add(2 * c.opt.DialTimeout))
	if err := stream.ReadResponse(st); err != nil {
		c.socksFail(conn, st, what, &socks5.Error{Reply: socksReply(err), Err: err})
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	if err := socks5.WriteReply(conn, socks5.ReplySucceeded); err != nil {
		netguard.Reset(conn)
		_ = st.Close()
		c.streamEnded(what, 0, 0, fmt.Errorf("%w: writing the SOCKS5 reply: %w", stream.ErrAborted, err))
		return
	}
	_ = conn.SetDeadline(time.Time{})
	up, down, err := stream.Splice(conn, st, c.pool, nil)
	c.streamEnded(what, up, down, err)
}

// socksFail sends the refusal's reply code, if it has one, closes conn
// (and st), and counts and logs the refusal with its reason.
func (c *Client) socksFail(conn net.Conn, st *mux.Stream, what string, err error) {
	var se *socks5.Error
	if errors.As(err, &se) && se.Reply != 0 {
		_ = socks5.WriteReply(conn, se.Reply)
	}
	_ = conn.Close()
	if st != nil {
		_ = st.Close()
	}
	c.refused(what, err)
}

// socksReply is the SOCKS5 reply code for the server's refusal.
func socksReply(err error) byte {
	var se *stream.StatusError
	if !errors.As(err, &se) {
		return socks5.ReplyFailure
	}
	switch se.Status {
	case stream.StatusDenied:
		return socks5.ReplyNotAllowed
	case stream.StatusConnRefused:
		return socks5.ReplyConnRefused
	case stream.StatusHostUnreach:
		return socks5.ReplyHostUnreachable
	case stream.StatusNetUnreach:
		return socks5.ReplyNetUnreachable
	case stream.StatusDialTimeout:
		return socks5.ReplyTTLExpired
	}
	return socks5.ReplyFailure
}

// serveSocks serves a socks-connect stream: resolve, check, dial, splice.
// A denied destination is never dialled, nor is any address of a name
// that the rules do not allow.
func (s *Server) serveSocks(ctx context.Context, st *mux.Stream, arg string, l *link) {
	host, port := stream.ParseSocksArg(arg)
	dest := net.JoinHostPort(host, strconv.Itoa(int(port)))
	what := "socks " + dest
	var name string
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap()}
	} else {
		if err := allow.CheckName(host); err != nil {
			err = fmt.Errorf("%w: %w", stream.ErrBadRequest, err)
			s.refuse(st, stream.StatusBadRequest, err.Error(), l, what, err)
			return
		}
		name = host
		rctx, cancel := context.WithTimeout(ctx, s.opt.DialTimeout)
		addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err != nil {
			s.refuse(st, stream.StatusHostUnreach, err.Error(), l, what, fmt.Errorf("resolving %s: %w", host, err))
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
		s.refuse(st, stream.StatusDenied, msg, l, what, fmt.Errorf("%w: %s (resolved to %v)", stream.ErrDenied, msg, addrs))
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
		s.refuse(st, stream.StatusDenied, "destination no longer allowed", l, what, err)
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
	defer l.stat.Open("socks", "")()
	s.serveDialled(ctx, st, conn, what, l)
}

// dialStatus is the status for a failed dial, as precise as SOCKS5's
// reply codes can say it.
func dialStatus(err error) byte {
	var dnsErr *net.DNSError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return stream.StatusConnRefused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.As(err, &dnsErr):
		return stream.StatusHostUnreach
	case errors.Is(err, syscall.ENETUNREACH):
		return stream.StatusNetUnreach
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return stream.StatusDialTimeout
	}
	return stream.StatusDialFailed
}
