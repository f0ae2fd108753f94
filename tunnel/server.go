package tunnel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"github.com/offload-dev/offload/tunnel/mux"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/enginecheck"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/proxyproto"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/slots"
	"github.com/offload-dev/offload/tunnel/stream"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Options
	// Services maps the names clients ask for to the host:port the server
	// dials. Nothing else is ever dialled.
	Services map[string]string
	// MaxHandshakes caps unauthenticated connections in their handshake
	// (0: DefaultMaxHandshakes). See slots.Table for what happens beyond.
	MaxHandshakes int
	// MaxHandshakesPerSource caps them per source address, an IPv4
	// address or an IPv6 /64 (0: DefaultMaxHandshakesPerSource).
	MaxHandshakesPerSource int
	// MaxLinks caps the links up at once (0: DefaultMaxLinks, or
	// MaxLinksPerClient per client with Clients, if that is more). A
	// client with no link beyond it is refused with a busy alert and
	// redials; one that has a link replaces its oldest.
	MaxLinks int
	// MaxLinksPerClient caps one client's links (0:
	// DefaultMaxLinksPerClient): a client's new link beyond it replaces
	// the client's oldest, which a client that redials has given up.
	MaxLinksPerClient int
	// Clients are the clients the server accepts, each with its own keys
	// and Access (server_clients.go). Empty means one client, DefaultClient,
	// with Options.PSK, every service and Rules.
	Clients []ServerClient
	// Rules are the server's UDP services, and, for its one client when
	// it has no Clients, the SOCKS destinations and reverse listen
	// addresses it may use (rules.go); nil allows none of them. Clients
	// have their own in Access.Rules.
	Rules *Rules
	// ProxyProtocol, if not nil, reads a PROXY protocol v2 header from
	// each connection first (serverlisten.go, tunnel/proxyproto).
	ProxyProtocol *ProxyProtocol
}

// Server is the tunnel's server end: it accepts links from clients and
// forwards their streams to its services.
type Server struct {
	opt     Options
	state   atomic.Pointer[serverState] // services and clients; Reload swaps it
	log     *zap.Logger
	ctr     *counters
	pool    *stream.BufPool
	slots   *slots.Table
	replay  *handshake.ReplayCache
	streams *tracker
	dialer  net.Dialer
	guard   *enginecheck.Guard
	udp     udpCounters
	// stopping is closed when the drain starts: reverse listeners close
	// then, so that they do not hold the drain open.
	stopping chan struct{}
	proxy    *ProxyProtocol
	ppStats  proxyproto.Stats
	serving  atomic.Bool // Serve is accepting: Healthy

	dropLog, failLog, refuseLog, linkLog netguard.RateLimit

	clientCtr clientMetrics
	resumes   resumeTable // resumable sessions (resumable.go)

	mu       sync.Mutex
	sessions map[*mux.Session]struct{}
	links    map[*link]struct{}
	linkSeq  uint64 // links that came up
	closing  bool
}

// NewServer checks cfg and returns a Server; Serve runs it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Options.setDefaults(); err != nil {
		return nil, err
	}
	st, err := newServerState(&cfg)
	if err != nil {
		return nil, err
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if cfg.MaxHandshakesPerSource <= 0 {
		cfg.MaxHandshakesPerSource = DefaultMaxHandshakesPerSource
	}
	if err := checkProxyProtocol(cfg.ProxyProtocol); err != nil {
		return nil, err
	}
	s := &Server{
		opt:       cfg.Options,
		udp:       udpCounters{role: "server"},
		stopping:  make(chan struct{}),
		log:       cfg.Logger.Named("server"),
		ctr:       newCounters("server", cfg.Engines, cfg.Stats, cfg.Policy),
		pool:      stream.NewBufPool(),
		streams:   newTracker(),
		dialer:    net.Dialer{Timeout: cfg.DialTimeout},
		dropLog:   netguard.RateLimit{Every: 10 * time.Second},
		failLog:   netguard.RateLimit{Every: 10 * time.Second},
		resumes:   resumeTable{log: netguard.RateLimit{Every: 10 * time.Second}},
		refuseLog: netguard.RateLimit{Every: 10 * time.Second},
		linkLog:   netguard.RateLimit{Every: 10 * time.Second},
		slots:     slots.New(cfg.MaxHandshakes, cfg.MaxHandshakesPerSource, cfg.Suite),
		replay:    handshake.NewReplayCache(0),
		sessions:  map[*mux.Session]struct{}{},
		proxy:     cfg.ProxyProtocol,
	}
	s.ctr.limits = func() []limit {
		st := s.state.Load()
		return []limit{
			{"max_links", st.maxLinks},
			{"max_links_per_client", st.perClient},
			{"max_handshakes", cfg.MaxHandshakes},
			{"max_handshakes_per_source", cfg.MaxHandshakesPerSource},
			{"link_streams", cfg.Options.MaxStreams},
			{"link_buffer_bytes", cfg.Options.LinkBuffer},
			{"replay_cache_entries", handshake.DefaultReplayCache},
			{"failed_sources_remembered", slots.FailedSources},
		}
	}
	s.ctr.pending = s.slots.Len
	s.state.Store(st)
	s.guard = newEngineGuard(&s.opt, s.log)
	s.ctr.guard, s.opt.verifier, s.opt.stall = s.guard, s.guard.Verifier, s.guard.Stall
	return s, nil
}

// RegisterMetrics adds the server's metrics to set.
func (s *Server) RegisterMetrics(set *metrics.Set) {
	set.RegisterMetricsWriter(s.ctr.writePrometheus)
	set.RegisterMetricsWriter(s.clientCtr.writePrometheus)
	set.RegisterMetricsWriter(s.udp.writePrometheus)
	if s.proxy != nil {
		set.RegisterMetricsWriter(s.ppStats.WritePrometheus)
	}
}

// Stats returns the record layer's counters of all links.
func (s *Server) Stats() *record.Stats { return s.ctr.stats }

// Serve accepts links on ln until ctx ends, then stops accepting, asks the
// clients to open no more streams, waits up to DrainTimeout for open
// streams to finish, closes what is left (those streams end with an error)
// and returns nil. It returns an error if ln fails otherwise. Serve closes
// ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("listening", zap.Stringer("addr", ln.Addr()), zap.Stringer("suite", s.opt.Suite), zap.Int("services", len(s.state.Load().services)),
		zap.Int("clients", len(s.state.Load().clients)))
	// hard ends dials and handshakes once the drain is over.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.ctr.statusLoop(ctx, s.opt.StatusInterval, s.log)
	}()
	startEngineChecks(ctx, s.guard, cmp.Or(s.opt.engineCheckEvery, s.opt.EngineCheckInterval), &wg)
	ln = s.wrapListener(ln)
	s.serving.Store(true)
	stop := context.AfterFunc(ctx, func() {
		s.serving.Store(false)
		_ = ln.Close()
	})
	defer stop()

	var serveErr error
	var delay time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				delay = netguard.AcceptBackoff(delay)
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", delay))
				time.Sleep(delay)
				continue
			}
			serveErr = fmt.Errorf("tunnel: accept: %w", err)
			break
		}
		delay = 0
		sl := s.slots.Acquire(conn)
		if sl == nil {
			s.refuseHandshake(conn, "handshake slots full of complete first flights: refused a new connection",
				zap.Int("max_handshakes_per_source", s.slots.PerSource()))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !s.slots.Await(ctx, sl, s.opt.HandshakeTimeout) {
				s.refuseHandshake(conn, "waited a handshake timeout for a slot: refused a connection",
					zap.Duration("handshake_timeout", s.opt.HandshakeTimeout))
				return
			}
			s.serveConn(ctx, hard, conn, sl, &wg)
		}()
	}
	s.serving.Store(false)
	_ = ln.Close()
	s.shutdown(hardCancel)
	wg.Wait()
	return serveErr
}

// shutdown drains: GoAway on every link, wait for streams, close links.
func (s *Server) shutdown(hardCancel context.CancelFunc) {
	s.mu.Lock()
	if !s.closing {
		close(s.stopping)
	}
	s.closing = true
	sessions := make([]*mux.Session, 0, len(s.sessions))
	for sess := range s.sessions {
		sessions = append(sessions, sess)
	}
	s.mu.Unlock()
	for _, sess := range sessions {
		_ = sess.GoAway()
	}
	n := s.ctr.active.Load()
	s.log.Info("shutting down", zap.Int64("streams_active", n), zap.Duration("drain_timeout", s.opt.DrainTimeout))
	if !s.streams.wait(s.opt.DrainTimeout) {
		s.log.Warn("drain timeout: closing open streams", zap.Int64("streams_active", s.ctr.active.Load()))
	}
	hardCancel()
	for _, sess := range sessions {
		_ = sess.Close()
	}
}

// serveConn runs one link: handshake (ctx: ends at shutdown), then yamux
// streams (hard: dials end after the drain).
func (s *Server) serveConn(ctx, hard context.Context, conn net.Conn, sl *slots.Slot, wg *sync.WaitGroup) {
	remote := conn.RemoteAddr()
	hc := s.opt.handshakeConfig()
	hc.Replay = s.replay
	state := s.state.Load() // the keys this handshake tries, and their clients
	hc.Admit = func(key int) error { return s.admit(state, key) }
	hc.FlightRead = func() { s.slots.FlightRead(sl) }
	hc.Keys = state.keys
	keys, keyIdx, err := handshake.ServerKey(ctx, netguard.SlotConn[*slots.Slot]{Conn: conn, Watch: s.slots, Slot: sl}, hc)
	evicted := s.slots.Release(sl)
	if err != nil {
		_ = conn.Close()
		res := handshakeResult(err)
		if evicted {
			res = hsDropped
		}
		if res != hsBusy { // admit counted it
			s.ctr.handshakes[res].Add(1)
		}
		if res == hsAuth || res == hsReplay {
			s.slots.FailedTrial(sl)
		}
		switch {
		case res == hsDropped:
			if ok, n := s.dropLog.Allow(); ok {
				s.log.Warn("handshake slots full: dropped the oldest unauthenticated connections",
					zap.Int("max_handshakes", s.slots.Max()), zap.Uint64("dropped_since_last_log", n+1))
			}
		case ctx.Err() != nil:
		default:
			if ok, n := s.failLog.Allow(); ok {
				s.log.Warn("handshake failed", zap.Stringer("remote", remote), zap.String("reason", handshakeResultNames[res]),
					zap.Error(err), zap.Uint64("failures_not_logged", n))
			}
		}
		return
	}
	// The client proved it holds the keys: only now does it cost a link.
	ro := s.opt.recordOptions(s.ctr.stats)
	ro.Traffic = s.linkTraffic(state.owner[keyIdx].name) // its bytes, live (status.go)
	rc, err := record.New(conn, keys, s.opt.Suite, ro)
	var secret, binding [32]byte
	if err == nil && s.opt.ResumeWindow > 0 {
		secret, binding, err = linkSecrets(keys, false)
	}
	keys.Wipe()
	if err != nil {
		_ = conn.Close()
		s.log.Error("record layer", zap.Error(err))
		return
	}
	// The link counts against the caps from here, before the resumption
	// offer is read: an authenticated peer that sends nothing holds a
	// link slot, as a plain link does, not an uncounted goroutine.
	l := s.newLink(rc, state, keyIdx, remote)
	s.mu.Lock()
	replaced, err := s.addLinkLocked(l)
	s.mu.Unlock()
	if err != nil {
		_ = rc.Close()
		if errors.Is(err, errLinksFull) {
			s.ctr.handshakes[hsBusy].Add(1)
			if ok, n := s.linkLog.Allow(); ok {
				l.log.Warn("links full: refused a client", zap.Error(err), zap.Uint64("refusals_not_logged", n))
			}
		}
		return
	}
	s.ctr.handshakes[hsOK].Add(1)
	defer s.removeLink(l)
	// Resumption (resumable.go): this link may continue a session whose
	// link died; then it is that session's, and this goroutine is done.
	var muxConn io.ReadWriteCloser = rc
	var ss *serverSession
	mcfg := s.opt.muxConfig(&s.ctr.backlogResets.Counters)
	if s.opt.ResumeWindow > 0 {
		muxConn, ss, err = s.serverResume(rc, secret, binding, l)
		if err != nil {
			_ = rc.Close()
			s.replace(replaced, nil, remote)
			if ok, n := s.failLog.Allow(); ok {
				s.log.Warn("resumption failed", zap.Stringer("remote", remote), zap.Error(err), zap.Uint64("failures_not_logged", n))
			}
			return
		}
		if muxConn == nil {
			s.ctr.resumes[resumeOK].Add(1)
			// The session's own link stands for it in the caps.
			s.replace(replaced, ss.link, remote)
			return
		}
		if ss != nil {
			mcfg.KeepAliveInterval = 0 // the resume layer's acks probe the link
			defer s.resumes.remove(ss, false)
			muxConn = endingConn{ss.conn}
		}
	}
	s.replace(replaced, nil, remote)
	sess, err := mux.Server(muxConn, mcfg)
	if err != nil {
		_ = rc.Close()
		s.log.Error("yamux", zap.Error(err))
		return
	}
	s.mu.Lock()
	if s.closing || !l.setSession(sess) {
		s.mu.Unlock()
		_ = sess.Close()
		return
	}
	s.sessions[sess] = struct{}{}
	s.mu.Unlock()
	l.stat = s.ctr.live.LinkUp(rc, remote, l.client, l.keyFP)
	defer s.ctr.live.LinkDown(l.stat)
	log := l.log
	log.Info("link up", zap.Int("send_frame", rc.SendFrame()))
	start := time.Now()

	// units caps the streams this link serves at MaxStreams: the streams
	// the client opens and those the server opens for reverse
	// connections (reverse.go) take one each. A stream past the cap is
	// answered at once, busy with the reason, never left waiting; memory
	// is bounded by link_buffer in the session (tunnel/mux), not here.
	units := l.units
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		select {
		case units <- struct{}{}:
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.ctr.backlogResets.Refused.Add(1)
				err := fmt.Errorf("%w: the link carries %d streams; raise max_streams", stream.ErrBusy, cap(units))
				s.refuse(st, stream.StatusBusy, err.Error(), l, "", err)
			}()
			continue
		}
		s.streams.add()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-units }()
			s.serveStream(hard, st, l)
			s.streams.done()
			_ = st.Close()
		}()
	}
	_ = sess.Close()
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
	s.linkDown(l, linkErr(sess, rc), time.Since(start))
}

// admit is the handshake's Admit: a client (st's key key) is refused
// with a busy alert while the links are full, unless it has a link that
// its new one would replace (addLinkLocked). It reserves nothing (a
// replayed first flight gets this far too); addLinkLocked decides again
// once the client confirmed the keys.
func (s *Server) admit(st *serverState, key int) error {
	now := s.state.Load()
	n := s.ctr.links.Load()
	if n < int64(now.maxLinks) || s.clientCounters(st.owner[key].name).links.Load() > 0 {
		return nil
	}
	// Counted here, before the busy alert goes out, so that the count is
	// there by the time the client has its answer.
	s.ctr.handshakes[hsBusy].Add(1)
	return fmt.Errorf("%d links up, max_links %d", n, now.maxLinks)
}

// linkErr is why a link ended: a ping flood its session cut
// (mux.ErrPingFlood), else the record layer's error (nil, net.ErrClosed or
// io.EOF for a close or a hang-up).
func linkErr(sess *mux.Session, rc *record.Conn) error {
	if err := sess.Err(); errors.Is(err, mux.ErrPingFlood) {
		return err
	}
	return rc.Err()
}

// linkDown logs why a link ended (err, linkErr's): a record-layer failure
// (tampering, a broken peer) or a ping flood is a warning; a peer that
// hung up or our own close is info.
// A reset before a byte of the next frame (record.ErrPeerReset) is a
// hang-up too: a client that closes its socket with a keepalive or window
// update unread makes its kernel send a reset instead of a FIN, and no
// frame was cut; a reset inside a frame stays a failure.
func (s *Server) linkDown(l *link, err error, up time.Duration) {
	switch {
	case err == nil || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF):
		l.log.Info("link down", zap.Duration("up", up))
	case errors.Is(err, record.ErrPeerReset):
		l.log.Info("link down", zap.Duration("up", up), zap.String("reason", "reset by the client between frames"))
	case s.draining() && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)):
		// The drain's GoAway (or a last window update) met a client that
		// had closed its end as both stopped together (bench's two ends
		// do): nothing of a stream was lost to it.
		l.log.Info("link down", zap.Duration("up", up), zap.String("reason", "the client hung up during the drain"))
	default:
		s.ctr.linkErrors.Add(1)
		l.ctr.linkErrors.Add(1)
		l.log.Warn("link failed", zap.Error(err), zap.Duration("up", up))
	}
}

// refuseHandshake resets conn, which got no handshake slot, counts it
// refused and logs why (at most once per dropLog period, with a count).
func (s *Server) refuseHandshake(conn net.Conn, why string, field zap.Field) {
	netguard.Reset(conn)
	s.ctr.handshakes[hsRefused].Add(1)
	if ok, n := s.dropLog.Allow(); ok {
		s.log.Warn(why, zap.Int("max_handshakes", s.slots.Max()), field, zap.Uint64("dropped_since_last_log", n+1))
	}
}

// draining reports whether the server's drain has begun.
func (s *Server) draining() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// serveStream reads a stream's request and serves it by kind, each
// checked against the link's Access: a service's target is dialled and
// spliced here, the other kinds in socks.go, udp.go and reverse.go. A
// reload that takes away what a stream uses cancels its ctx: the dial
// stops, or the target connection is reset, which aborts the stream at
// both ends.
func (s *Server) serveStream(ctx context.Context, st *mux.Stream, l *link) {
	_ = st.SetReadDeadline(time.Now().Add(s.opt.DialTimeout))
	req, err := stream.ReadRequest(st)
	if err != nil {
		// The reason goes back: a peer of another version learns which.
		s.refuse(st, stream.StatusBadRequest, err.Error(), l, "", err)
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	switch req.Kind {
	case stream.KindService:
	case stream.KindSocks:
		s.serveSocks(ctx, st, req.Arg, l)
		return
	case stream.KindUDP:
		s.serveUDP(ctx, st, req.Arg, l)
		return
	case stream.KindReverseListen:
		s.serveReverse(ctx, st, req.Arg, l)
		return
	default:
		err := fmt.Errorf("%w: kind %s is not served by the server", stream.ErrBadRequest, stream.KindName(req.Kind))
		s.refuse(st, stream.StatusBadRequest, err.Error(), l, "", err)
		return
	}
	name := req.Arg
	ctx, target, done, msg, err := s.open(ctx, l, name)
	if err != nil {
		s.refuse(st, stream.StatusUnknownService, msg, l, name, err)
		return
	}
	defer done()
	defer l.stat.Open("service", name)()
	conn, err := s.dialer.DialContext(ctx, "tcp", target)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errReloaded) {
			err = cause
		}
		s.refuse(st, stream.StatusDialFailed, err.Error(), l, name, err)
		return
	}
	s.serveDialled(ctx, st, conn, name, l)
}

// serveDialled answers OK on st and splices it with conn, the target just
// dialled for it, until both directions end or ctx does (a reload took
// the permission away: conn is reset); what names it in the log.
func (s *Server) serveDialled(ctx context.Context, st *mux.Stream, conn net.Conn, what string, l *link) {
	stop := context.AfterFunc(ctx, func() { netguard.Reset(conn) })
	defer stop()
	l.ctr.active.Add(1)
	up, down, err := stream.AnswerSplice(st, conn, s.pool, &s.ctr.active)
	l.ctr.active.Add(-1)
	l.ctr.fromTarget.Add(uint64(up))
	l.ctr.toTarget.Add(uint64(down))
	if err != nil {
		s.stream(l, streamAborted)
		if ce := l.log.Check(zap.DebugLevel, "stream aborted"); ce != nil {
			ce.Write(zap.String("service", what), zap.Int64("to_target", down), zap.Int64("from_target", up), zap.Error(err))
		}
		return
	}
	s.stream(l, streamOK)
}

// refuse answers a stream with a non-OK status and closes it.
//
// The refusal is counted and logged before the client can hear it, so
// that whoever sees the client's refusal finds the server's line too.
func (s *Server) refuse(st *mux.Stream, status byte, msg string, l *link, service string, err error) {
	s.stream(l, streamRefused)
	if ok, n := s.refuseLog.Allow(); ok {
		l.log.Warn("stream refused", zap.String("service", strconv.Quote(service)), zap.Error(err), zap.Uint64("refusals_not_logged", n))
	}
	_ = st.SetWriteDeadline(time.Now().Add(s.opt.DialTimeout))
	_, _ = st.Write(stream.AppendResponse(nil, status, msg))
	_ = st.Close()
}
