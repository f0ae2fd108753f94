package tunnel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"github.com/offload-dev/offload/tunnel/mux"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/enginecheck"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/redial"
	"github.com/offload-dev/offload/tunnel/stream"
)

// Forward is one client listener: every connection accepted on Listener
// goes to the server's service Service.
type Forward struct {
	Listener net.Listener
	Service  string

	// socks: the connections speak SOCKS5 instead (the SOCKS listener).
	socks bool
}

// ClientConfig configures a Client.
type ClientConfig struct {
	Options
	// Server is the server's host:port: the same as Servers: {Server}.
	Server string
	// Servers are the servers to fail over between, tried in turn
	// (tunnel/redial); set Server or Servers, not both.
	Servers []string
	// Forwards are the local listeners; Run closes them.
	Forwards []Forward
	// Socks, if not nil, is a SOCKS5 listener (socks.go); Run closes it.
	Socks *Socks
	// UDPForwards are the UDP listeners (udp.go); Run closes them.
	UDPForwards []UDPForward
	// Reverse are the reverse forwards (reverse.go): the server listens,
	// the client dials.
	Reverse []Reverse
	// RedialMin and RedialMax bound the redial backoff (0: defaults).
	RedialMin, RedialMax time.Duration
	// Dial dials the server; nil means a TCP dial.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Client is the tunnel's client end: it keeps one link to the server and
// forwards local connections over it.
type Client struct {
	opt      Options
	servers  *redial.Ring
	forwards []Forward
	redial   redial.Backoff
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	log      *zap.Logger
	ctr      *counters
	pool     *stream.BufPool
	streams  *tracker
	guard    *enginecheck.Guard

	udpForwards []UDPForward // at start; then fwd has them
	udp         udpCounters
	rev         reverseSet     // the reverse forwards (reverse.go)
	bg          sync.WaitGroup // reverse.go's per-link goroutines

	socksUsers atomic.Pointer[map[string]string] // of the next SOCKS connections; Reload replaces it

	refuseLog netguard.RateLimit
	failLog   redial.RepeatLog // linkLoop's "link failed; redialling"
	running   atomic.Bool      // Run is serving: Healthy
	// oldServer is the older protocol version connect last fell back
	// to, so that it says so once, not at every link.
	oldServer atomic.Uint32

	psk  atomic.Pointer[[]byte] // the key of the next handshake; Reload replaces it
	roll chan struct{}          // Reload changed the key: move new streams to a new link
	fwd  forwardSet             // the running forwards (clientreload.go)

	link *redial.Schedule // what a connection finding no link waits on (linkwait.go)

	mu   sync.Mutex
	sess *mux.Session // nil while the link is down; only linkLoop sets it
	// resumable is the resumable session (resumable.go); linkLoop's.
	resumable *clientSession
	// waiting is the session whose link went last, for Status (resumable
	// is linkLoop's alone); Status shows it while it waits.
	waiting atomic.Pointer[clientSession]
	// retiring is sess once Reload changed the key, until linkLoop
	// retires it: it takes no new streams, so that every connection
	// accepted after Reload returns goes to a link made with the new key.
	retiring *mux.Session
	up       chan struct{} // closed when sess is set
	down     chan struct{} // closed when sess is unset
	gone     chan *mux.Session
}

// NewClient checks cfg and returns a Client; Run runs it.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Options.setDefaults(); err != nil {
		return nil, err
	}
	live := cfg.live()
	reverse, err := checkLive(&live)
	if err != nil {
		return nil, err
	}
	servers, err := redial.NewRing(cfg.Server, cfg.Servers)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if cfg.RedialMin <= 0 {
		cfg.RedialMin = DefaultRedialMin
	}
	if cfg.RedialMax <= 0 {
		cfg.RedialMax = DefaultRedialMax
	}
	if cfg.RedialMax < cfg.RedialMin {
		return nil, fmt.Errorf("%w: redial max %v < min %v", ErrConfig, cfg.RedialMax, cfg.RedialMin)
	}
	dial := cfg.Dial
	if dial == nil {
		d := &net.Dialer{}
		dial = d.DialContext
	}
	c := &Client{
		opt:         cfg.Options,
		servers:     servers,
		forwards:    append([]Forward(nil), cfg.Forwards...),
		udpForwards: cfg.UDPForwards,
		udp:         udpCounters{role: "client"},
		rev:         reverseSet{targets: reverse},
		redial:      redial.Backoff{Min: cfg.RedialMin, Max: cfg.RedialMax},
		dial:        dial,
		log:         cfg.Logger.Named("client"),
		ctr:         newCounters("client", cfg.Engines, cfg.Stats, cfg.Policy),
		pool:        stream.NewBufPool(),
		streams:     newTracker(),
		refuseLog:   netguard.RateLimit{Every: 10 * time.Second},
		up:          make(chan struct{}),
		down:        make(chan struct{}),
		gone:        make(chan *mux.Session, 1),
		roll:        make(chan struct{}, 1),
		link:        redial.NewSchedule(min(cfg.RedialMin, DefaultRedialMin)),
	}
	psk := cfg.PSK
	c.psk.Store(&psk)
	limits := []limit{
		{"link_streams", cfg.Options.MaxStreams},
		{"link_buffer_bytes", cfg.Options.LinkBuffer},
	}
	c.ctr.limits = func() []limit { return limits }
	c.guard = newEngineGuard(&c.opt, c.log)
	c.ctr.guard, c.opt.verifier, c.opt.stall = c.guard, c.guard.Verifier, c.guard.Stall
	c.setSocksUsers(cfg.Socks)
	if cfg.Socks != nil {
		c.forwards = append(c.forwards, socksForward(cfg.Socks))
	}
	return c, nil
}

// RegisterMetrics adds the client's metrics to set.
func (c *Client) RegisterMetrics(set *metrics.Set) {
	set.RegisterMetricsWriter(c.ctr.writePrometheus)
	set.RegisterMetricsWriter(c.udp.writePrometheus)
	set.RegisterMetricsWriter(c.servers.WritePrometheus)
}

// Stats returns the record layer's counters of all links.
func (c *Client) Stats() *record.Stats { return c.ctr.stats }

// Run keeps a link to the server and serves the forwards until ctx ends;
// then it stops accepting, waits up to DrainTimeout for open streams,
// closes the link (streams still open end with an error) and returns nil.
func (c *Client) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.ctr.statusLoop(ctx, c.opt.StatusInterval, c.log)
	}()
	startEngineChecks(ctx, c.guard, cmp.Or(c.opt.engineCheckEvery, c.opt.EngineCheckInterval), &wg)
	c.running.Store(true)
	stop := context.AfterFunc(ctx, func() {
		c.running.Store(false)
		c.fwd.closeAll()
	})
	defer stop()
	c.fwd.start(ctx, &wg, c.forwards, c.udpForwards, c.startForward, c.startUDP)

	old := c.linkLoop(ctx, &wg)

	// Shutdown: the listeners are closed (ctx ended); drain.
	c.log.Info("shutting down", zap.Int64("streams_active", c.ctr.active.Load()), zap.Duration("drain_timeout", c.opt.DrainTimeout))
	if !c.streams.wait(c.opt.DrainTimeout) {
		c.log.Warn("drain timeout: closing open streams", zap.Int64("streams_active", c.ctr.active.Load()))
	}
	if cs := c.resumable; cs != nil {
		// On purpose: the server ends the session now rather than
		// keep it for a resumption that will not come.
		cs.noResume.Store(true)
		cs.conn.End()
	}
	c.mu.Lock()
	if c.sess != nil {
		old = append(old, c.sess)
		c.sess = nil
	}
	c.mu.Unlock()
	for _, s := range old {
		_ = s.Close()
	}
	wg.Wait()
	c.bg.Wait()
	return nil
}

// linkLoop dials, runs and redials the link until ctx ends. It returns the
// sessions still open (the current one stays in c.sess) for Run to close
// after the drain.
func (c *Client) linkLoop(ctx context.Context, wg *sync.WaitGroup) (old []*mux.Session) {
	kept := false // c.sess is a resumable session whose link died or stalled
	attempt := 0  // dials while kept
	for ctx.Err() == nil {
		if kept && c.resumable.conn.Err() != nil {
			// Not resumed within resume_window: its streams ended.
			c.log.Warn("session ended", zap.Error(c.resumable.conn.Err()))
			c.mu.Lock()
			c.sess = nil
			c.up = make(chan struct{})
			close(c.down)
			c.mu.Unlock()
			kept, c.resumable = false, nil
		}
		c.link.DialStart()
		psk := *c.psk.Load() // the key connect uses (a reload may replace it meanwhile)
		addr := c.servers.Addr()
		dial := func(ctx context.Context) (net.Conn, error) {
			dctx, cancel := context.WithTimeout(ctx, c.opt.DialTimeout)
			defer cancel()
			return c.dial(dctx, "tcp", addr)
		}
		if kept {
			round := attempt
			attempt++
			dial = func(ctx context.Context) (net.Conn, error) {
				return c.opt.resumeDials().Race(ctx, round, func(ctx context.Context) (net.Conn, error) { return c.dial(ctx, "tcp", addr) })
			}
		}
		began := time.Now()
		sess, rc, resumed, err := c.connect(ctx, psk, dial)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if kept && (len(c.servers.Addrs()) == 1 || c.resumable.conn.State().Attached) {
				// The session waits: the next round of dials a second
				// after this one began, to its server. (With several servers, once the
				// link failed, a failed dial fails over below.)
				if !c.resumable.conn.State().Attached {
					c.lostLink(c.resumable, c.resumable.conn.State().Err)
				}
				c.log.Debug("resumption dial failed", zap.Error(err))
				if !sleep(ctx, time.Second-time.Since(began)) {
					break
				}
				continue
			}
			c.ctr.live.Attempted(err)
			d := c.redial.Next()
			c.link.Retry(fmt.Errorf("%s: %w", c.servers.Addr(), err), d)
			failed := c.servers.Addr()
			next := c.servers.Advance()
			if lvl, n := c.failLog.Level(failed + ": " + err.Error()); c.log.Core().Enabled(lvl) {
				c.log.Log(lvl, "link failed; redialling", zap.String("server", failed), zap.Error(err),
					zap.String("next", next), zap.Duration("in", d), zap.Uint64("repeats_not_logged", n))
			}
			if !c.link.Sleep(ctx) {
				break
			}
			c.ctr.redials.Add(1)
			continue
		}
		// A completed handshake: the next redial waits RedialMin,
		// and none more than redial.UpMax from now on.
		c.redial.LinkedUp()
		c.failLog = redial.RepeatLog{}
		start := time.Now()
		c.mu.Lock()
		switch {
		case resumed:
			// c.sess is sess: it never went.
		case kept:
			// The old session was not resumed: this one replaces it
			// (c.up stays closed: a session is there).
			c.sess = sess
			close(c.down)
			c.down = make(chan struct{})
		default:
			c.sess = sess
			close(c.up)
			c.down = make(chan struct{})
		}
		c.mu.Unlock()
		kept, attempt = false, 0
		c.ctr.links.Store(1)
		server := c.servers.Addr()
		c.log.Info("link up", zap.String("server", server), zap.Stringer("suite", c.opt.Suite), zap.Int("send_frame", rc.SendFrame()))
		stat := c.ctr.live.LinkUp(rc, rc.RemoteAddr(), server, handshake.Fingerprint(psk))
		if !resumed {
			c.reverseUp(ctx, sess)
		}

		reason := "closed"
		wait := true
		rotate := true // the next link goes to the next server
		var detached chan error
		var stalled chan struct{}
		if c.resumable != nil && c.resumable.sess == sess {
			detached, stalled = c.resumable.detached, c.resumable.stalled
		}
	loop:
		for {
			select {
			case <-sess.CloseChan():
				break loop
			case err := <-detached:
				if c.resumable.conn.State().Attached {
					// The link a resumption replaced (OnDetach
					// runs on its own goroutine): old news.
					continue
				}
				// The link died, the session did not: redial at
				// once, to the same server, and resume it there.
				c.lostLink(c.resumable, err)
				kept = true
				break loop
			case <-stalled:
				// Silent while in use: dial a new link alongside (the
				// old one stays until the new one resumes the session).
				c.log.Warn("link stalled; dialling a new one", zap.String("server", server))
				c.resumable.lost = time.Now()
				kept = true
				break loop
			case g := <-c.gone:
				if g == sess {
					reason = "server going away"
					break loop
				}
			case <-c.roll:
				// A new key: new streams go to a link made with it,
				// this one finishes its streams (retire).
				reason = "the key changed (reload)"
				rotate = false // the server is fine
				wg.Add(1)
				go func() {
					defer wg.Done()
					retire(ctx, sess)
				}()
				break loop
			case <-ctx.Done():
				c.ctr.live.LinkDown(stat)
				return old
			}
		}
		c.ctr.links.Store(0)
		c.ctr.live.LinkDown(stat)
		if kept {
			c.ctr.redials.Add(1)
			continue
		}
		if cs := c.resumable; cs != nil && cs.sess == sess {
			// Closed, retired or going away: not to be resumed.
			cs.noResume.Store(true)
			c.resumable = nil
		}
		c.mu.Lock()
		c.sess = nil
		c.retiring = nil
		c.up = make(chan struct{})
		close(c.down)
		c.mu.Unlock()
		if !sess.IsClosed() {
			// GoAway: its streams finish on their own; a new link
			// carries new ones. Run closes it if it is still open at
			// shutdown.
			old = append(old, sess)
			wait = false
		}
		up := time.Since(start)
		if err := linkErr(sess, rc); sess.IsClosed() && err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			c.ctr.linkErrors.Add(1)
			c.log.Warn("link failed", zap.String("server", server), zap.Error(err), zap.Duration("up", up))
		} else {
			c.log.Warn("link down", zap.String("server", server), zap.String("reason", reason), zap.Duration("up", up))
		}
		// The server that dropped the link (or is going away) may take a
		// while to come back: the next link goes to the next server.
		next := c.servers.Addr()
		if rotate {
			next = c.servers.Advance()
		}
		if wait {
			d := c.redial.Next()
			c.link.Retry(fmt.Errorf("link to %s went down (%s)", server, reason), d)
			c.log.Info("redialling", zap.String("server", next), zap.Duration("in", d))
			if !c.link.Sleep(ctx) {
				break
			}
		}
		c.ctr.redials.Add(1)
	}
	return old
}

// connect dials the server with dial and brings a link up.
func (c *Client) connect(ctx context.Context, psk []byte, dial func(context.Context) (net.Conn, error)) (sess *mux.Session, rc *record.Conn, resumed bool, err error) {
	conn, err := dial(ctx)
	if err != nil {
		return nil, nil, false, fmt.Errorf("dial: %w", err)
	}
	hc := c.opt.handshakeConfig()
	hc.PSK = psk
	keys, err := handshake.Client(ctx, conn, hc)
	var ve *handshake.VersionError
	if errors.As(err, &ve) && ve.Peer >= handshake.MinVersion && ve.Peer < ve.Ours {
		// A server of an older version still serving: speak its version
		// on a new connection (the first is closed after the alert).
		// Every link tries ours first, so an upgraded server gets it.
		_ = conn.Close()
		c.ctr.handshakes[handshakeResult(err)].Add(1)
		if c.oldServer.Swap(uint32(ve.Peer)) != uint32(ve.Peer) {
			c.log.Info("the server speaks an older protocol version: redialling in it (it says no max_frame, so this end sends it frames of the default size at most: send_frame in link up)",
				zap.Uint8("server_version", ve.Peer), zap.Uint8("ours", ve.Ours))
		}
		if conn, err = dial(ctx); err != nil {
			return nil, nil, false, fmt.Errorf("dial: %w", err)
		}
		hc.Version = ve.Peer
		keys, err = handshake.Client(ctx, conn, hc)
	}
	if err != nil {
		_ = conn.Close()
		c.ctr.handshakes[handshakeResult(err)].Add(1)
		return nil, nil, false, err
	}
	c.ctr.handshakes[hsOK].Add(1)
	ro := c.opt.recordOptions(c.ctr.stats)
	ro.Traffic = c.linkTraffic() // its bytes, live (status.go)
	rc, err = record.New(conn, keys, c.opt.Suite, ro)
	var secret, binding [32]byte
	if err == nil && c.opt.ResumeWindow > 0 {
		secret, binding, err = linkSecrets(keys, true)
	}
	keys.Wipe()
	if err != nil {
		_ = conn.Close()
		return nil, nil, false, err
	}
	// Resumption (resumable.go): this link may carry on the session
	// whose link died.
	var muxConn io.ReadWriteCloser = rc
	mcfg := c.opt.muxConfig(&c.ctr.backlogResets.Counters)
	var cs *clientSession
	if c.opt.ResumeWindow > 0 {
		old := c.resumable
		if old != nil && old.conn.Err() != nil {
			old = nil // expired meanwhile
		}
		muxConn, cs, resumed, err = c.clientResume(rc, secret, binding, c.servers.Addr(), old)
		if err != nil {
			_ = rc.Close()
			return nil, nil, false, err
		}
		if resumed {
			c.ctr.resumes[resumeOK].Add(1)
			return cs.sess, rc, true, nil
		}
		if old != nil {
			c.ctr.resumes[resumeRefused].Add(1)
		}
		c.resumable = cs
		if cs != nil {
			mcfg.KeepAliveInterval = 0 // the resume layer's acks probe the link
			muxConn = endingConn{cs.conn}
		}
	}
	sess, err = mux.Client(muxConn, mcfg)
	if err != nil {
		_ = rc.Close()
		return nil, nil, false, fmt.Errorf("yamux: %w", err)
	}
	if cs != nil {
		cs.sess = sess
	}
	return sess, rc, false, nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (c *Client) acceptLoop(ctx context.Context, f *forwardRun, wg *sync.WaitGroup) {
	var delay time.Duration
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = netguard.AcceptBackoff(delay)
			c.log.Warn("accept failed; retrying", zap.Stringer("listen", f.ln.Addr()), zap.Error(err), zap.Duration("in", delay))
			if !sleep(ctx, delay) {
				return
			}
			continue
		}
		delay = 0
		service, socks := *f.service.Load(), f.socks.Load()
		if n := c.ctr.active.Load(); n >= int64(c.opt.MaxStreams) {
			netguard.Reset(conn)
			c.refused(service, fmt.Errorf("%w: %d connections open; raise max_streams", stream.ErrBusy, n))
			continue
		}
		c.ctr.active.Add(1)
		c.streams.add()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.streams.done()
			defer c.ctr.active.Add(-1)
			defer c.ctr.live.Streams.Open(forwardKey(socks, service))()
			if socks {
				// The users of the reload last before this connection.
				c.serveSocks(ctx, conn, *c.socksUsers.Load())
				return
			}
			c.serveLocal(ctx, conn, service)
		}()
	}
}

func (c *Client) refused(service string, err error) {
	c.ctr.streams[streamRefused].Add(1)
	if ok, n := c.refuseLog.Allow(); ok {
		c.log.Warn("connection refused", zap.String("service", service), zap.Error(err), zap.Uint64("refusals_not_logged", n))
	}
}

// serveLocal carries one local connection over a stream.
func (c *Client) serveLocal(ctx context.Context, conn net.Conn, service string) {
	req, err := stream.AppendRequest(nil, stream.KindService, service)
	if err != nil {
		netguard.Reset(conn)
		c.refused(service, err)
		return
	}
	st, err := c.openStream(ctx, req)
	if err != nil {
		netguard.Reset(conn)
		c.refused(service, err)
		return
	}
	up, down, err := stream.Splice(conn, st, c.pool, func() error {
		_ = st.SetReadDeadline(time.Now().Add(2 * c.opt.DialTimeout))
		if err := stream.ReadResponse(st); err != nil {
			return err
		}
		_ = st.SetReadDeadline(time.Time{})
		return nil
	})
	c.streamEnded(service, up, down, err)
}

// streamEnded counts and logs how a spliced stream ended; what names it.
func (c *Client) streamEnded(service string, up, down int64, err error) {
	var se *stream.StatusError
	switch {
	case errors.As(err, &se):
		c.refused(service, err)
	case err != nil:
		c.ctr.streams[streamAborted].Add(1)
		if ce := c.log.Check(zap.DebugLevel, "stream aborted"); ce != nil {
			ce.Write(zap.String("service", service), zap.Int64("sent", up), zap.Int64("received", down), zap.Error(err))
		}
	default:
		c.ctr.streams[streamOK].Add(1)
	}
}

// openStream waits for the link as awaitLink says (up to LinkWait),
// opens a stream and sends the request req (appendRequest).
func (c *Client) openStream(ctx context.Context, req []byte) (*mux.Stream, error) {
	waitUntil := time.Now().Add(max(c.opt.LinkWait, 0))
	deadline := time.NewTimer(c.opt.DialTimeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		sess, up, down, retiring := c.sess, c.up, c.down, c.retiring
		c.mu.Unlock()
		if sess == nil {
			if err := c.awaitLink(ctx, up, waitUntil); err != nil {
				return nil, err
			}
			continue
		}
		var st *mux.Stream
		var err error
		if sess == retiring {
			// The key changed: wait for linkLoop to let this link go
			// (it does so at once) and for the link made with the new key.
			err = errors.New("the link is being retired after a key change")
		} else {
			st, err = sess.OpenStream()
		}
		if err != nil {
			// The server is going away, or the link just died: let the
			// link loop move on, and wait for the next link.
			if sess != retiring {
				select {
				case c.gone <- sess:
				default:
				}
			}
			select {
			case <-down:
				continue
			case <-deadline.C:
				return nil, fmt.Errorf("%w (waited %v): %w", ErrLinkDown, c.opt.DialTimeout, err)
			case <-ctx.Done():
				return nil, fmt.Errorf("%w: shutting down", ErrLinkDown)
			}
		}
		if _, err := st.Write(req); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("%w: sending the request: %w", stream.ErrAborted, err)
		}
		return st, nil
	}
}
