package tunnel

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"github.com/offload-dev/offload/tunnel/mux"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/stream"
)

// The server's clients and links, and what reload changes: the client
// table (Access, ServerClient, serverState), the links it accepted with
// their caps (addLinkLocked), the check of every stream against it (open,
// hold) and Server.Reload. The client end's reload is clientreload.go.
//
// A server knows its clients by their keys: the handshake tells which key
// a client holds (handshake.KeySet), and the link made with it belongs to
// that key's client for its whole life. The link carries the client's
// Access, which serveStream consults for every stream. Everything a reload
// may change (services, clients, their keys and access) is one immutable
// serverState, made by newServerState from a ServerConfig at start and at
// every Reload, and swapped in whole:
//
//	Reload(cfg) ─> newServerState(cfg) ─(error: the old state stays)
//	            └> under Server.mu: store it, then per link (recheck):
//	                 client gone or its key no longer accepted ─> close the link
//	                 else new Access; per stream (under link.mu):
//	                   service removed or no longer allowed   ─> reset the stream
//
// Locking: Server.mu orders Reload against links coming up (addLink), so a
// link made with a key that a reload removed during its handshake is
// closed when it registers; link.mu orders a stream's check (open) against
// a reload's, so every stream is checked by at least one of them against
// the access that is current when it ends its check.

// DefaultClient is the name of a server's one client when it has no
// Clients: whoever holds Options.PSK, with every service.
const DefaultClient = "default"

// Access is what one client may do on the server. Its link carries it and
// serveStream consults it for every stream; Reload replaces it on the
// links of that client. Zero value: nothing.
type Access struct {
	// AllServices allows every service the server has, now and after a
	// reload; Services is then unused.
	AllServices bool
	// Services are the names of the services the client may open, TCP
	// services and UDP services (Rules.UDPTarget) alike.
	Services []string
	// Rules are the SOCKS destinations and reverse listen addresses the
	// client may use (their UDP services are not read: those are the
	// server's, in ServerConfig.Rules); nil allows none.
	Rules *Rules
}

// ServerClient is one client a server accepts.
type ServerClient struct {
	// Name is the client's name in logs (field "client") and metrics
	// (label "client"); it never goes on the wire.
	Name string
	// Keys are its pre-shared keys: one, or two while it moves from one
	// to the other. A link made with any of them is this client's.
	Keys [][]byte
	// Access is what it may use.
	Access Access
}

// access is an Access made ready for lookups.
type access struct {
	all      bool
	services map[string]bool
	rules    *Rules // never nil
}

func newAccess(a Access) *access {
	rules := a.Rules
	if rules == nil {
		rules = &Rules{}
	}
	acc := &access{all: a.AllServices, services: make(map[string]bool, len(a.Services)), rules: rules}
	for _, s := range a.Services {
		acc.services[s] = true
	}
	return acc
}

func (a *access) allows(service string) bool { return a.all || a.services[service] }

// serverState is what a reload replaces: services, UDP services and
// clients.
type serverState struct {
	services map[string]string
	rules    *Rules // the UDP services; never nil
	clients  map[string]*clientEntry
	keys     *handshake.KeySet
	owner    []*clientEntry // by key index in keys
	keyIDs   [][32]byte     // by key index: which key, without holding it
	keyFPs   []string       // by key index: its fingerprint (status)
	named    bool           // the clients are the config's (else DefaultClient, the key_file's)

	maxLinks, perClient int // ServerConfig's MaxLinks and MaxLinksPerClient, defaults applied
}

type clientEntry struct {
	name         string
	access       *access
	keyIDs       [][32]byte
	fingerprints []string // of its keys, for status
}

func (c *clientEntry) hasKey(id [32]byte) bool { return slices.Contains(c.keyIDs, id) }

// keyID names a key in memory that outlives the handshake (a link's),
// without keeping the key itself there.
func keyID(psk []byte) [32]byte { return sha256.Sum256(append([]byte("offload key id "), psk...)) }

// newServerState checks the services and clients of cfg (whose Options
// have their defaults) and makes the state the server runs on.
func newServerState(cfg *ServerConfig) (*serverState, error) {
	rules := cfg.Rules
	if rules == nil {
		rules = &Rules{}
	}
	if len(cfg.Services) == 0 && rules.empty() {
		return nil, fmt.Errorf("%w: no services, socks_allow, udp_services or reverse_allow", ErrConfig)
	}
	st := &serverState{services: make(map[string]string, len(cfg.Services)), rules: rules, clients: map[string]*clientEntry{}}
	for name, target := range cfg.Services {
		if len(name) == 0 || len(name) > 255 {
			return nil, fmt.Errorf("%w: service name %q: want 1..255 bytes", ErrConfig, name)
		}
		if _, _, err := net.SplitHostPort(target); err != nil {
			return nil, fmt.Errorf("%w: service %q: target %q: %w", ErrConfig, name, target, err)
		}
		st.services[name] = target
	}
	clients := cfg.Clients
	st.named = len(clients) > 0
	if len(clients) == 0 {
		if len(cfg.PSK) != handshake.PSKSize {
			return nil, fmt.Errorf("%w: pre-shared key is %d bytes, want %d", ErrConfig, len(cfg.PSK), handshake.PSKSize)
		}
		clients = []ServerClient{{Name: DefaultClient, Keys: [][]byte{cfg.PSK}, Access: Access{AllServices: true, Rules: rules}}}
	}
	var psks [][]byte
	for _, c := range clients {
		if c.Name == "" || len(c.Name) > 255 {
			return nil, fmt.Errorf("%w: client name %q: want 1..255 bytes", ErrConfig, c.Name)
		}
		if _, dup := st.clients[c.Name]; dup {
			return nil, fmt.Errorf("%w: client %q twice", ErrConfig, c.Name)
		}
		if len(c.Keys) == 0 {
			return nil, fmt.Errorf("%w: client %q has no key", ErrConfig, c.Name)
		}
		if !c.Access.AllServices {
			for _, s := range c.Access.Services {
				_, tcp := st.services[s]
				if _, udp := rules.UDPTarget(s); !tcp && !udp {
					return nil, fmt.Errorf("%w: client %q: service %q is not one of the server's", ErrConfig, c.Name, s)
				}
			}
		}
		e := &clientEntry{name: c.Name, access: newAccess(c.Access)}
		for _, k := range c.Keys {
			id, fp := keyID(k), handshake.Fingerprint(k)
			e.keyIDs = append(e.keyIDs, id)
			e.fingerprints = append(e.fingerprints, fp)
			st.owner = append(st.owner, e)
			st.keyIDs = append(st.keyIDs, id)
			st.keyFPs = append(st.keyFPs, fp)
			psks = append(psks, k)
		}
		st.clients[c.Name] = e
	}
	ks, err := handshake.NewKeySet(cfg.Suite, psks...)
	if err != nil {
		return nil, fmt.Errorf("%w: client keys: %w", ErrConfig, err)
	}
	st.keys = ks
	st.maxLinks, st.perClient = LinkCaps(cfg.MaxLinks, cfg.MaxLinksPerClient, len(cfg.Clients))
	if st.perClient > st.maxLinks {
		return nil, fmt.Errorf("%w: max_links_per_client %d is more than max_links %d", ErrConfig, st.perClient, st.maxLinks)
	}
	return st, nil
}

// LinkCaps applies the defaults to a server's max_links and
// max_links_per_client (0: unset) for a server with clients clients (0:
// one, the key_file's): DefaultMaxLinksPerClient per client, and as many
// links in all as that makes, at least DefaultMaxLinks, so that with the
// defaults every client can always come up.
func LinkCaps(maxLinks, perClient, clients int) (int, int) {
	if perClient <= 0 {
		perClient = DefaultMaxLinksPerClient
	}
	if maxLinks <= 0 {
		maxLinks = max(DefaultMaxLinks, max(clients, 1)*perClient)
	}
	return maxLinks, perClient
}

// Check reports whether NewServer would accept c's options, services and
// clients, without starting anything: offload validate runs it, so that a
// config that validates also starts (and reloads).
func (c ServerConfig) Check() error {
	if err := c.Options.setDefaults(); err != nil {
		return err
	}
	_, err := newServerState(&c)
	return err
}

// link is one client's link on the server.
type link struct {
	seq    uint64 // order of coming up: the lowest of a client's is its oldest
	client string
	keyID  [32]byte
	keyFP  string       // its key's fingerprint (status)
	rc     io.Closer    // its record layer: what ends it until sess runs
	sess   *mux.Session // set once the resumption offer is settled (setSession)
	log    *zap.Logger  // with the remote address and the client
	ctr    *clientCounters
	stat   *live.Link // its live view (tunnel/live); nil until it is up
	// units caps the streams the link serves at MaxStreams: the streams
	// the client opens (server.go's accept loop) and those the server
	// opens for reverse connections (reverse.go) take one each.
	units chan struct{}

	mu      sync.Mutex
	access  *access
	streams map[*linkStream]struct{}
	closed  string // why a reload closed the link, if it did
	ended   bool   // closed (close): replaced by a newer link, or by a reload
}

// linkStream is an open stream of a link, for a reload to reset.
type linkStream struct {
	what string // for the log: a service name, "socks HOST:PORT", ...
	// still says why the stream may no longer run under a state and its
	// link's access, or "" if it may.
	still  func(st *serverState, a *access) string
	cancel context.CancelCauseFunc
}

// errReloaded is the cause of a stream or link a reload ended.
var errReloaded = errors.New("closed by a reload")

// errNotAllowed means a client asked for a service it may not use, or one
// the server does not have: the client is told the same in both cases
// (status unknown service), so a client can't learn other clients'
// service names; the server's log says which.
var errNotAllowed = errors.New("service not allowed for this client")

// errLinksFull refuses a client's link: max_links links are up and none
// of them is the client's.
var errLinksFull = errors.New("links full")

// addLinkLocked registers l unless a reload since its handshake removed
// its client or key (recheckLocked logged why) or the links are full; the
// caller then closes l's session. A client at max_links_per_client, or
// one with a link when max_links are up, gets l in place of its oldest
// link, which addLinkLocked unregisters and returns for the caller to
// close: a client keeps one link, so an older one is a link it gave up
// (its side died before the server noticed), and one client can never
// hold the links other clients need. s.mu is held.
func (s *Server) addLinkLocked(l *link) (replaced *link, err error) {
	if s.links == nil {
		s.links = map[*link]struct{}{}
	}
	st := s.state.Load()
	if why := s.recheckLocked(l, st); why != "" {
		return nil, fmt.Errorf("%w: %s", errReloaded, why)
	}
	var oldest *link
	n := 0
	for o := range s.links {
		if o.client == l.client {
			n++
			if oldest == nil || o.seq < oldest.seq {
				oldest = o
			}
		}
	}
	switch {
	case n >= st.perClient || (len(s.links) >= st.maxLinks && n > 0):
		s.removeLinkLocked(oldest)
		s.ctr.linksReplaced.Add(1)
		replaced = oldest
	case len(s.links) >= st.maxLinks:
		return nil, fmt.Errorf("%w: %d links up, max_links %d, none of them client %s's", errLinksFull, len(s.links), st.maxLinks, l.client)
	}
	s.linkSeq++
	l.seq = s.linkSeq
	s.links[l] = struct{}{}
	l.ctr.links.Add(1)
	l.ctr.lastSeen.Store(time.Now().UnixNano())
	s.ctr.links.Add(1)
	return replaced, nil
}

func (s *Server) removeLink(l *link) {
	s.mu.Lock()
	s.removeLinkLocked(l)
	s.mu.Unlock()
}

// removeLinkLocked unregisters l if it still is. s.mu is held.
func (s *Server) removeLinkLocked(l *link) {
	if _, ok := s.links[l]; ok {
		delete(s.links, l)
		l.ctr.lastSeen.Store(time.Now().UnixNano())
		l.ctr.links.Add(-1)
		s.ctr.links.Add(-1)
	}
}

// recheckLocked applies st to l: if its client or key is gone it marks l
// closed and returns why, for the caller to close its session; else it
// gives l its client's new access, resets the streams that lost theirs
// and returns "". s.mu is held.
func (s *Server) recheckLocked(l *link, st *serverState) string {
	e := st.clients[l.client]
	why := ""
	switch {
	case e == nil:
		why = "client removed from the config"
	case !e.hasKey(l.keyID):
		why = "the key this link was made with is no longer accepted (rotated out)"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if why != "" {
		// The caller closes the session, outside s.mu: closing flushes
		// the record layer, which may wait on the peer.
		l.closed = why
		l.log.Warn("closing link", zap.String("reason", why), zap.Int("streams", len(l.streams)))
		return why
	}
	l.access = e.access
	for ls := range l.streams {
		if reason := ls.still(st, e.access); reason != "" {
			l.log.Warn("closing stream", zap.String("service", ls.what), zap.String("reason", reason))
			ls.cancel(fmt.Errorf("%w: %s", errReloaded, reason))
			delete(l.streams, ls)
		}
	}
	return ""
}

// open checks that l's client may use service now and registers the
// stream for reloads (hold). A refusal comes with the message for the
// client: a client limited to some services hears the same for a service
// that does not exist and one it may not use.
func (s *Server) open(parent context.Context, l *link, service string) (ctx context.Context, target string, done func(), refusal string, err error) {
	const hidden = "no such service for this client"
	ctx, st, done, err := s.hold(parent, l, service, func(st *serverState, a *access) string {
		switch err := serviceGrant(st, a, service); {
		case errors.Is(err, errNoService):
			return "service removed from the config"
		case err != nil:
			return "service no longer allowed for this client"
		}
		return ""
	})
	if err == nil {
		return ctx, st.services[service], done, "", nil
	}
	if !errors.Is(err, errNotAllowed) {
		return nil, "", nil, hidden, err // the link was closed by a reload
	}
	switch _, ok := st.services[service]; {
	case !ok && l.allServices():
		return nil, "", nil, "", stream.ErrUnknownService
	case !ok:
		return nil, "", nil, hidden, stream.ErrUnknownService
	}
	return nil, "", nil, hidden, errNotAllowed
}

// hold registers a stream of l for reloads once check, run under the
// link's lock against the current state and the link's access, says it
// may run (""): ctx is then cancelled, with errReloaded as its cause, if
// a reload takes that away (check runs again on every reload). Otherwise
// the error wraps errNotAllowed with check's reason, or errReloaded if a
// reload closed the link. st is the state check ran against (nil if the
// link was closed), for the caller to look up what it may use; done
// unregisters the stream. check must not keep what it reads: a reload
// runs it again under the link's lock while the stream runs.
func (s *Server) hold(parent context.Context, l *link, what string, check func(st *serverState, a *access) string) (ctx context.Context, st *serverState, done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed != "" {
		return nil, nil, nil, fmt.Errorf("%w: %s", errReloaded, l.closed)
	}
	st = s.state.Load()
	if why := check(st, l.access); why != "" {
		return nil, st, nil, fmt.Errorf("%w: %s", errNotAllowed, why)
	}
	ctx, cancel := context.WithCancelCause(parent)
	ls := &linkStream{what: what, still: check, cancel: cancel}
	l.streams[ls] = struct{}{}
	return ctx, st, func() {
		l.mu.Lock()
		delete(l.streams, ls)
		l.mu.Unlock()
		cancel(nil)
	}, nil
}

// rules are the SOCKS destinations and reverse listen addresses l's
// client may use now.
func (l *link) rules() *Rules {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.access.rules
}

// allServices reports whether l's client may use every service.
func (l *link) allServices() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.access.all
}

// Reload makes cfg's services and clients (everything newServerState
// reads) the server's, without a restart: streams and links that remain
// allowed carry on; links of a removed client or made with a key no longer
// accepted are closed, and streams of a removed service or one their
// client may no longer use are reset, each with a log line that says why.
// cfg's other settings are not read: they need a restart (the caller
// compares them). If cfg is not valid, nothing changes and the error says
// why.
func (s *Server) Reload(cfg ServerConfig) error {
	cfg.Suite = s.opt.Suite // the key set is made for the running suite
	st, err := newServerState(&cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.state.Store(st)
	var closed []*link
	for l := range s.links {
		if s.recheckLocked(l, st) != "" {
			closed = append(closed, l)
		}
	}
	n := len(s.links)
	s.mu.Unlock()
	for _, l := range closed {
		l.close()
	}
	s.log.Info("reloaded", zap.Int("services", len(st.services)), zap.Int("clients", len(st.clients)),
		zap.Int("links_kept", n-len(closed)), zap.Int("links_closed", len(closed)))
	return nil
}

// newLink makes the link of a session made with key keyIdx of st.
func (s *Server) newLink(rc io.Closer, st *serverState, keyIdx int, remote net.Addr) *link {
	owner := st.owner[keyIdx]
	return &link{
		client:  owner.name,
		keyID:   st.keyIDs[keyIdx],
		keyFP:   st.keyFPs[keyIdx],
		rc:      rc,
		log:     s.log.With(zap.Stringer("remote", remote), zap.String("client", owner.name)),
		ctr:     s.clientCounters(owner.name),
		access:  owner.access,
		streams: map[*linkStream]struct{}{},
		units:   make(chan struct{}, s.opt.MaxStreams),
	}
}

// setSession gives l its mux session; false if l was closed meanwhile.
func (l *link) setSession(sess *mux.Session) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sess = sess
	return l.closed == "" && !l.ended
}

// close ends l: its session, or its record layer before it has one.
func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ended = true
	if l.sess != nil {
		_ = l.sess.Close()
	} else {
		_ = l.rc.Close()
	}
}

// replace closes the link that l's coming up replaced (addLinkLocked),
// once l's resumption offer is settled; unless it is keep, the link of
// the session l resumed: then it takes l's place in the caps again.
func (s *Server) replace(replaced *link, keep *link, newer net.Addr) {
	switch {
	case replaced == nil:
	case replaced == keep:
		s.mu.Lock()
		s.links[replaced] = struct{}{}
		replaced.ctr.links.Add(1)
		s.ctr.links.Add(1)
		s.mu.Unlock()
	default:
		replaced.log.Warn("link replaced by a newer link of its client", zap.Stringer("newer", newer),
			zap.Int("max_links_per_client", s.state.Load().perClient))
		replaced.close()
	}
}

// clientCounters are one client's share of the server's link and stream
// counters: offload_client_* in /metrics. They outlive the client's links
// and a reload that removes it (counters never go back).
type clientCounters struct {
	links      atomic.Int64
	active     atomic.Int64
	streams    [numStreamResults]atomic.Uint64
	linkErrors atomic.Uint64
	toTarget   atomic.Uint64 // stream bytes the server wrote to targets
	fromTarget atomic.Uint64 // and read from them
	lastSeen   atomic.Int64  // when a link of it last came up or went down (Unix ns; 0: never)

	traffic record.Traffic // its links' bytes as they pass (tunnel/live)
}

type clientMetrics struct {
	mu sync.Mutex
	m  map[string]*clientCounters
}

func (s *Server) clientCounters(name string) *clientCounters {
	s.clientCtr.mu.Lock()
	defer s.clientCtr.mu.Unlock()
	if s.clientCtr.m == nil {
		s.clientCtr.m = map[string]*clientCounters{}
	}
	c := s.clientCtr.m[name]
	if c == nil {
		c = new(clientCounters)
		c.traffic.Parent = &s.ctr.live.Total
		s.clientCtr.m[name] = c
	}
	return c
}

// peek is the counters of client name, nil if it never had any.
func (m *clientMetrics) peek(name string) *clientCounters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[name]
}

// writePrometheus writes every client's counters, by name. They are
// separate metrics from the server's totals (offload_streams_total and
// the rest keep their labels), so that a sum over them does not count a
// stream twice.
func (m *clientMetrics) writePrometheus(w io.Writer) {
	m.mu.Lock()
	names := make([]string, 0, len(m.m))
	for n := range m.m {
		names = append(names, n)
	}
	sort.Strings(names)
	ctrs := make([]*clientCounters, len(names))
	for i, n := range names {
		ctrs[i] = m.m[n]
	}
	m.mu.Unlock()
	for i, name := range names {
		c, label := ctrs[i], metrics.Label(name)
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_client_links_active{client=%s}`, label), uint64(max(c.links.Load(), 0)))
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_client_link_errors_total{client=%s}`, label), c.linkErrors.Load())
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_client_streams_active{client=%s}`, label), uint64(max(c.active.Load(), 0)))
		for r, result := range streamResultNames {
			metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_client_streams_total{client=%s,result=%q}`, label, result), c.streams[r].Load())
		}
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_client_stream_bytes_total{client=%s,dir="to_target"}`, label), c.toTarget.Load())
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_client_stream_bytes_total{client=%s,dir="from_target"}`, label), c.fromTarget.Load())
		// As they pass, unlike the stream bytes (tunnel/live).
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_client_link_bytes_total{client=%s,dir="sent"}`, label), c.traffic.Sent.Load())
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_client_link_bytes_total{client=%s,dir="received"}`, label), c.traffic.Received.Load())
	}
}

// stream counts a stream's result for the server and the link's client.
func (s *Server) stream(l *link, result int) {
	s.ctr.streams[result].Add(1)
	l.ctr.streams[result].Add(1)
}
