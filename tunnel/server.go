package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/hashicorp/yamux"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/record"
)

// ServerConfig configures a Server.
type ServerConfig struct {
	Options
	// Services maps the names clients ask for to the host:port the server
	// dials. Nothing else is ever dialled.
	Services map[string]string
	// MaxHandshakes caps unauthenticated connections in their handshake
	// (0: DefaultMaxHandshakes). See hsSlots for what happens beyond.
	MaxHandshakes int
}

// Server is the tunnel's server end: it accepts links from clients and
// forwards their streams to its services.
type Server struct {
	opt      Options
	services map[string]string
	log      *zap.Logger
	ctr      *counters
	pool     *bufPool
	slots    hsSlots
	streams  *tracker
	dialer   net.Dialer
	guard    *engineGuard

	dropLog, failLog, refuseLog rateLimit

	mu       sync.Mutex
	sessions map[*yamux.Session]struct{}
	closing  bool
}

// NewServer checks cfg and returns a Server; Serve runs it.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Options.setDefaults(); err != nil {
		return nil, err
	}
	if len(cfg.Services) == 0 {
		return nil, fmt.Errorf("%w: no services", ErrConfig)
	}
	services := make(map[string]string, len(cfg.Services))
	for name, target := range cfg.Services {
		if len(name) == 0 || len(name) > 255 {
			return nil, fmt.Errorf("%w: service name %q: want 1..255 bytes", ErrConfig, name)
		}
		if _, _, err := net.SplitHostPort(target); err != nil {
			return nil, fmt.Errorf("%w: service %q: target %q: %w", ErrConfig, name, target, err)
		}
		services[name] = target
	}
	if cfg.MaxHandshakes <= 0 {
		cfg.MaxHandshakes = DefaultMaxHandshakes
	}
	if _, err := cfg.Options.yamuxConfig(); err != nil {
		return nil, err
	}
	s := &Server{
		opt:       cfg.Options,
		services:  services,
		log:       cfg.Logger.Named("server"),
		ctr:       newCounters("server", cfg.Engines, cfg.Stats, cfg.Policy),
		pool:      newBufPool(),
		streams:   newTracker(),
		dialer:    net.Dialer{Timeout: cfg.DialTimeout},
		dropLog:   rateLimit{every: 10 * time.Second},
		failLog:   rateLimit{every: 10 * time.Second},
		refuseLog: rateLimit{every: 10 * time.Second},
		sessions:  map[*yamux.Session]struct{}{},
	}
	s.slots.max = cfg.MaxHandshakes
	s.guard = newEngineGuard(&s.opt, s.log)
	s.ctr.guard, s.opt.verifier = s.guard, s.guard.verifier
	return s, nil
}

// RegisterMetrics adds the server's metrics to set.
func (s *Server) RegisterMetrics(set *metrics.Set) { set.RegisterMetricsWriter(s.ctr.writePrometheus) }

// Stats returns the record layer's counters of all links.
func (s *Server) Stats() *record.Stats { return s.ctr.stats }

// Serve accepts links on ln until ctx ends, then stops accepting, asks the
// clients to open no more streams, waits up to DrainTimeout for open
// streams to finish, closes what is left (those streams end with an error)
// and returns nil. It returns an error if ln fails otherwise. Serve closes
// ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("listening", zap.Stringer("addr", ln.Addr()), zap.Stringer("suite", s.opt.Suite), zap.Int("services", len(s.services)))
	// hard ends dials and handshakes once the drain is over.
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hardCancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.ctr.statusLoop(ctx, s.opt.StatusInterval, s.log)
	}()
	s.guard.start(ctx, s.opt.EngineCheckInterval, &wg)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
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
				delay = acceptBackoff(delay)
				s.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", delay))
				time.Sleep(delay)
				continue
			}
			serveErr = fmt.Errorf("tunnel: accept: %w", err)
			break
		}
		delay = 0
		sl := s.slots.acquire(conn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.serveConn(ctx, hard, conn, sl, &wg)
		}()
	}
	_ = ln.Close()
	s.shutdown(hardCancel)
	wg.Wait()
	return serveErr
}

// shutdown drains: GoAway on every link, wait for streams, close links.
func (s *Server) shutdown(hardCancel context.CancelFunc) {
	s.mu.Lock()
	s.closing = true
	sessions := make([]*yamux.Session, 0, len(s.sessions))
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
func (s *Server) serveConn(ctx, hard context.Context, conn net.Conn, sl *hsSlot, wg *sync.WaitGroup) {
	remote := conn.RemoteAddr()
	keys, err := handshake.Server(ctx, conn, s.opt.handshakeConfig())
	evicted := s.slots.release(sl)
	if err != nil {
		_ = conn.Close()
		res := handshakeResult(err)
		if evicted {
			res = hsDropped
		}
		s.ctr.handshakes[res].Add(1)
		switch {
		case res == hsDropped:
			if ok, n := s.dropLog.allow(); ok {
				s.log.Warn("handshake slots full: dropped the oldest unauthenticated connections",
					zap.Int("max_handshakes", s.slots.max), zap.Uint64("dropped_since_last_log", n+1))
			}
		case ctx.Err() != nil:
		default:
			if ok, n := s.failLog.allow(); ok {
				s.log.Warn("handshake failed", zap.Stringer("remote", remote), zap.String("reason", handshakeResultNames[res]),
					zap.Error(err), zap.Uint64("failures_not_logged", n))
			}
		}
		return
	}
	s.ctr.handshakes[hsOK].Add(1)
	rc, err := record.New(conn, keys, s.opt.Suite, s.opt.recordOptions(s.ctr.stats))
	keys.Wipe()
	if err != nil {
		_ = conn.Close()
		s.log.Error("record layer", zap.Error(err))
		return
	}
	ycfg, _ := s.opt.yamuxConfig() // checked by NewServer
	sess, err := yamux.Server(rc, ycfg)
	if err != nil {
		_ = rc.Close()
		s.log.Error("yamux", zap.Error(err))
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		_ = sess.Close()
		return
	}
	s.sessions[sess] = struct{}{}
	s.mu.Unlock()
	s.ctr.links.Add(1)
	log := s.log.With(zap.Stringer("remote", remote))
	log.Info("link up")
	start := time.Now()

	var linkStreams atomic.Int64
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		s.streams.add()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.streams.done()
			s.serveStream(hard, st, &linkStreams, log)
		}()
	}
	_ = sess.Close()
	s.mu.Lock()
	delete(s.sessions, sess)
	s.mu.Unlock()
	s.ctr.links.Add(-1)
	s.linkDown(log, rc, time.Since(start))
}

// linkDown logs why a link ended: a record-layer failure (tampering, a
// broken peer) is a warning; a peer that hung up or our own close is info.
func (s *Server) linkDown(log *zap.Logger, rc *record.Conn, up time.Duration) {
	err := rc.Err()
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
		s.ctr.linkErrors.Add(1)
		log.Warn("link failed", zap.Error(err), zap.Duration("up", up))
		return
	}
	log.Info("link down", zap.Duration("up", up))
}

// serveStream reads a stream's request, dials the service's target and
// splices the two.
func (s *Server) serveStream(ctx context.Context, st *yamux.Stream, linkStreams *atomic.Int64, log *zap.Logger) {
	defer linkStreams.Add(-1)
	if linkStreams.Add(1) > int64(s.opt.MaxStreams) {
		s.refuse(st, statusBusy, "", log, "", ErrBusy)
		return
	}
	_ = st.SetReadDeadline(time.Now().Add(s.opt.DialTimeout))
	name, err := readRequest(st)
	if err != nil {
		s.refuse(st, statusBadRequest, "", log, "", err)
		return
	}
	_ = st.SetReadDeadline(time.Time{})
	target, ok := s.services[name]
	if !ok {
		s.refuse(st, statusUnknownService, "", log, name, ErrUnknownService)
		return
	}
	conn, err := s.dialer.DialContext(ctx, "tcp", target)
	if err != nil {
		s.refuse(st, statusDialFailed, err.Error(), log, name, err)
		return
	}
	if _, err := st.Write(appendResponse(nil, statusOK, "")); err != nil {
		// The link died while we dialled: the target must see a reset, as
		// on every other cut, not a clean end after 0 bytes.
		resetConn(conn)
		_ = st.Close()
		s.ctr.streams[streamAborted].Add(1)
		return
	}
	s.ctr.active.Add(1)
	up, down, err := splice(conn, st, s.pool, nil)
	s.ctr.active.Add(-1)
	if err != nil {
		s.ctr.streams[streamAborted].Add(1)
		if ce := log.Check(zap.DebugLevel, "stream aborted"); ce != nil {
			ce.Write(zap.String("service", name), zap.Int64("to_target", down), zap.Int64("from_target", up), zap.Error(err))
		}
		return
	}
	s.ctr.streams[streamOK].Add(1)
}

// refuse answers a stream with a non-OK status and closes it.
func (s *Server) refuse(st *yamux.Stream, status byte, msg string, log *zap.Logger, service string, err error) {
	s.ctr.streams[streamRefused].Add(1)
	_ = st.SetWriteDeadline(time.Now().Add(s.opt.DialTimeout))
	_, _ = st.Write(appendResponse(nil, status, msg))
	_ = st.Close()
	if ok, n := s.refuseLog.allow(); ok {
		log.Warn("stream refused", zap.String("service", strconv.Quote(service)), zap.Error(err), zap.Uint64("refusals_not_logged", n))
	}
}
