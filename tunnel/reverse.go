package tunnel

// Reverse forwards: a client behind NAT exposes a service on its side
// through the server. For each reverse forward, on every link, the client
// opens a stream with a reverse-listen request naming an address on the
// server; the server checks it against its Rules (reverse_allow, deny by
// default), listens, answers, and keeps the listener exactly as long as
// that stream: when the link dies or the client closes the stream, the
// listener closes; the next link opens it again.
//
//	client ──reverse-listen [::1]:9000──> server: check, listen
//	                         (the stream stays open: the listener's life)
//	user ──TCP──> server [::1]:9000: accept ──stream, reverse-connect [::1]:9000──> client
//	     <═══════════════ chunks (tunnel/stream) ═══════════════> client dials its target
//
// The server opens the stream for each accepted connection, so here the
// roles of tunnel/stream's wire swap: the server sends the request (reverse-connect,
// naming the listen address), the client answers after dialling the
// target it has configured for that address, and nothing else: a
// reverse-connect for an address the client did not ask for is refused.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/mux"
	"github.com/offload-dev/offload/tunnel/redial"
	"github.com/offload-dev/offload/tunnel/stream"
	"go.uber.org/zap"
)

// Reverse is one reverse forward of the client.
type Reverse struct {
	// Listen is where the server listens: an IP literal and a port, e.g.
	// "0.0.0.0:9000" or "[::1]:9000".
	Listen string
	// Target is the host:port the client dials for each connection.
	Target string
}

// checkReverse checks the client's reverse forwards and returns them by
// their listen address in canonical form.
func checkReverse(rs []Reverse) (map[string]string, error) {
	out := make(map[string]string, len(rs))
	for _, r := range rs {
		ap, err := netip.ParseAddrPort(r.Listen)
		if err != nil || ap.Port() == 0 {
			return nil, fmt.Errorf("%w: reverse listen %q: want an IP address and a port", ErrConfig, r.Listen)
		}
		if _, _, err := net.SplitHostPort(r.Target); err != nil {
			return nil, fmt.Errorf("%w: reverse target %q: %w", ErrConfig, r.Target, err)
		}
		key := ap.String()
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%w: reverse listen %s twice", ErrConfig, key)
		}
		out[key] = r.Target
	}
	return out, nil
}

// reverseSet is the client's reverse forwards and their registrations on
// the current link.
type reverseSet struct {
	mu      sync.Mutex
	targets map[string]string // canonical listen address → target
	ctx     context.Context   // Run's; nil before the first link
	sess    *mux.Session      // the link registrations go to
	regs    map[string]context.CancelFunc
}

// target is the target of the reverse forward on listen, if there is one.
func (c *Client) reverseTarget(listen string) (string, bool) {
	c.rev.mu.Lock()
	defer c.rev.mu.Unlock()
	t, ok := c.rev.targets[listen]
	return t, ok
}

// registerLocked starts the registration of listen on the current link;
// cancelling it closes the registration's stream, and with it the
// server's listener.
func (c *Client) registerLocked(listen string) {
	ctx, cancel := context.WithCancel(c.rev.ctx)
	c.rev.regs[listen] = cancel
	sess := c.rev.sess
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		defer cancel()
		c.registerReverse(ctx, sess, listen)
	}()
}

// reloadReverse makes targets the reverse forwards: a removed one's
// registration ends (the server closes its listener), an added one is
// asked for on the current link (or on the next, if none is up), and a
// changed target is dialled by the next connections.
func (c *Client) reloadReverse(targets map[string]string, n *reloadCounts) {
	c.rev.mu.Lock()
	defer c.rev.mu.Unlock()
	for listen, old := range c.rev.targets {
		t, ok := targets[listen]
		switch {
		case !ok:
			c.log.Info("reverse forward removed", zap.String("reverse_listen", listen), zap.String("target", old))
			if cancel := c.rev.regs[listen]; cancel != nil {
				cancel()
				delete(c.rev.regs, listen)
			}
			n.revRemoved++
		case t != old:
			c.log.Info("reverse forward changed", zap.String("reverse_listen", listen), zap.String("target", t), zap.String("was", old))
			n.revChanged++
		}
	}
	up := c.rev.sess != nil && !c.rev.sess.IsClosed() && c.rev.ctx.Err() == nil
	for listen, t := range targets {
		if _, ok := c.rev.targets[listen]; ok {
			continue
		}
		c.log.Info("reverse forward added", zap.String("reverse_listen", listen), zap.String("target", t), zap.Bool("link_up", up))
		n.revAdded++
		if up {
			defer c.registerLocked(listen) // once targets has it
		}
	}
	c.rev.targets = targets
}

// reverseUp starts, for a link that just came up, the loop that serves
// the server's reverse-connect streams and one registration loop per
// reverse forward. They end with the session. The accept loop runs even
// without reverse forwards: a reload may add one.
func (c *Client) reverseUp(ctx context.Context, sess *mux.Session) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			c.streams.add()
			c.bg.Add(1)
			go func() {
				defer c.bg.Done()
				defer c.streams.done()
				c.serveReverseConn(ctx, st)
				_ = st.Close()
			}()
		}
	}()
	c.rev.mu.Lock()
	defer c.rev.mu.Unlock()
	// The last link's registrations end: if it is still up (retiring
	// after a key change) its listeners would hold the addresses this
	// link asks for, and their streams would keep it from retiring.
	for _, cancel := range c.rev.regs {
		cancel()
	}
	c.rev.ctx, c.rev.sess, c.rev.regs = ctx, sess, map[string]context.CancelFunc{}
	for listen := range c.rev.targets {
		c.registerLocked(listen)
	}
}

// registerReverse asks the server to listen on listen and keeps the
// request's stream open while the link lasts; if the server refuses for
// a reason that may pass (the address is still held by the last link's
// listener), it asks again after the redial backoff. A denial is final
// for this link.
func (c *Client) registerReverse(ctx context.Context, sess *mux.Session, listen string) {
	target, _ := c.reverseTarget(listen)
	log := c.log.With(zap.String("reverse_listen", listen), zap.String("target", target))
	retry := redial.Backoff{Min: c.redial.Min, Max: c.redial.Max}
	for !sess.IsClosed() && ctx.Err() == nil {
		err := c.holdReverse(ctx, sess, listen, log)
		if sess.IsClosed() || ctx.Err() != nil {
			return
		}
		if errors.Is(err, stream.ErrDenied) || errors.Is(err, stream.ErrBadRequest) {
			log.Error("reverse forward refused by the server", zap.Error(err))
			return
		}
		d := retry.Next()
		log.Warn("reverse forward not listening; asking again", zap.Error(err), zap.Duration("in", d))
		select {
		case <-time.After(d):
		case <-sess.CloseChan():
			return
		case <-ctx.Done():
			return
		}
	}
}

// holdReverse runs one registration: request, answer, then wait for the
// stream (the listener's life) to end.
func (c *Client) holdReverse(ctx context.Context, sess *mux.Session, listen string, log *zap.Logger) error {
	req, err := stream.AppendRequest(nil, stream.KindReverseListen, listen)
	if err != nil {
		return err
	}
	st, err := sess.OpenStream()
	if err != nil {
		return fmt.Errorf("opening a stream: %w", err)
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { _ = st.Close() })
	defer stop()
	if _, err := st.Write(req); err != nil {
		return fmt.Errorf("sending the request: %w", err)
	}
	_ = st.SetReadDeadline(time.Now().Add(2 * c.opt.DialTimeout))
	if err := stream.ReadResponse(st); err != nil {
		return err
	}
	_ = st.SetReadDeadline(time.Time{})
	log.Info("reverse forward listening on the server")
	// Nothing more comes on this stream; its end is the listener's.
	_, err = io.Copy(io.Discard, st)
	if err == nil {
		err = errors.New("the server closed the listener")
	}
	return err
}

// serveReverseConn serves a reverse-connect stream the server opened:
// dial the target configured for its listen address, answer, splice.
func (c *Client) serveReverseConn(ctx context.Context, st *mux.Stream) {
	_ = st.SetReadDeadline(time.Now().Add(c.opt.DialTimeout))
	req, err := stream.ReadRequest(st)
	if err == nil && req.Kind != stream.KindReverseConnect {
		err = fmt.Errorf("%w: kind %s from the server", stream.ErrBadRequest, stream.KindName(req.Kind))
	}
	if err != nil {
		c.refuseStream(st, stream.StatusBadRequest, err.Error(), "reverse", err)
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	what := "reverse " + req.Arg
	target, ok := c.reverseTarget(req.Arg)
	if !ok {
		err := fmt.Errorf("%w: no reverse forward listens on %s", stream.ErrDenied, req.Arg)
		c.refuseStream(st, stream.StatusDenied, err.Error(), what, err)
		return
	}
	d := net.Dialer{Timeout: c.opt.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		c.refuseStream(st, dialStatus(err), err.Error(), what, err)
		return
	}
	defer c.ctr.live.Streams.Open("reverse", req.Arg)()
	up, down, err := stream.AnswerSplice(st, conn, c.pool, &c.ctr.active)
	c.streamEnded(what, up, down, err)
}

// refuseStream answers a stream the server opened with a non-OK status.
func (c *Client) refuseStream(st *mux.Stream, status byte, msg, what string, err error) {
	_ = st.SetWriteDeadline(time.Now().Add(c.opt.DialTimeout))
	_, _ = st.Write(stream.AppendResponse(nil, status, msg))
	_ = st.Close()
	c.refused(what, err)
}

// serveReverse serves a reverse-listen stream: check, listen, and carry
// every accepted connection to the client until the stream, the link or
// the server ends.
func (s *Server) serveReverse(ctx context.Context, st *mux.Stream, arg string, l *link) {
	what := "reverse " + arg
	log := l.log
	ap := netip.MustParseAddrPort(arg) // readRequest checked it
	// A reload that takes the address out of the client's reverse_allow
	// closes the listener (ctx).
	ctx, _, done, err := s.hold(ctx, l, what, func(_ *serverState, a *access) string {
		if reverseGrant(a, ap) != nil {
			return "listen address no longer in reverse_allow"
		}
		return ""
	})
	if err != nil {
		msg := fmt.Sprintf("listen address %s is not in the server's reverse_allow", ap)
		s.refuse(st, stream.StatusDenied, msg, l, what, fmt.Errorf("%w: %s: %w", stream.ErrDenied, msg, err))
		return
	}
	defer done()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ap.String())
	if err != nil {
		s.refuse(st, stream.StatusDialFailed, err.Error(), l, what, err)
		return
	}
	if _, err := st.Write(stream.AppendResponse(nil, stream.StatusOK, "")); err != nil {
		_ = ln.Close()
		_ = st.Close()
		return
	}
	log = log.With(zap.Stringer("reverse_listen", ln.Addr()))
	log.Info("reverse forward listening")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		// The client sends nothing more: the stream's end (the client
		// closed it, or the link died) is the listener's.
		_, _ = io.Copy(io.Discard, st)
	}()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	go func() {
		select {
		case <-closed:
		case <-s.stopping:
		}
		_ = ln.Close()
	}()
	sess := st.Session()
	// A reverse connection's stream takes a unit of the link, as a
	// stream the client opens does: the link serves at most max_streams
	// whoever opened them. The bytes the client sends on them while the
	// connection here does not read come out of the link's budget
	// (link_buffer, tunnel/mux) like any stream's (TestAttackReverseLinkBuffer).
	// No unit free: the connection is reset.
	var wg sync.WaitGroup
	for {
		conn, err := ln.Accept()
		if err != nil {
			break
		}
		select {
		case l.units <- struct{}{}:
		default:
			netguard.Reset(conn)
			s.ctr.streams[streamRefused].Add(1)
			if ok, n := s.refuseLog.Allow(); ok {
				log.Warn("reverse connection refused", zap.Error(fmt.Errorf("%w: the link carries %d streams; raise max_streams", stream.ErrBusy, cap(l.units))), zap.Uint64("refusals_not_logged", n))
			}
			continue
		}
		s.streams.add()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.streams.done()
			defer func() { <-l.units }()
			defer l.stat.Open("reverse", arg)()
			s.reverseConn(sess, conn, arg, log)
		}()
	}
	_ = st.Close()
	<-closed
	wg.Wait()
	log.Info("reverse forward closed")
}

// reverseConn carries one connection accepted on a reverse listener to
// the client.
func (s *Server) reverseConn(sess *mux.Session, conn net.Conn, listen string, log *zap.Logger) {
	req, _ := stream.AppendRequest(nil, stream.KindReverseConnect, listen) // checked when it came in
	st, err := sess.OpenStream()
	if err == nil {
		_, err = st.Write(req)
	}
	if err != nil {
		netguard.Reset(conn)
		s.ctr.streams[streamAborted].Add(1)
		if st != nil {
			_ = st.Close()
		}
		return
	}
	defer st.Close()
	s.ctr.active.Add(1)
	up, down, err := stream.Splice(conn, st, s.pool, func() error {
		_ = st.SetReadDeadline(time.Now().Add(2 * s.opt.DialTimeout))
		if err := stream.ReadResponse(st); err != nil {
			return err
		}
		_ = st.SetReadDeadline(time.Time{})
		return nil
	})
	s.ctr.active.Add(-1)
	var se *stream.StatusError
	switch {
	case errors.As(err, &se):
		s.ctr.streams[streamRefused].Add(1)
		if ok, n := s.refuseLog.Allow(); ok {
			log.Warn("reverse connection refused by the client", zap.Error(err), zap.Uint64("refusals_not_logged", n))
		}
	case err != nil:
		s.ctr.streams[streamAborted].Add(1)
		if ce := log.Check(zap.DebugLevel, "stream aborted"); ce != nil {
			ce.Write(zap.Int64("to_client", up), zap.Int64("from_client", down), zap.Error(err))
		}
	default:
		s.ctr.streams[streamOK].Add(1)
	}
}
