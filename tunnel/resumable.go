package tunnel

// Sessions that outlive links (docs/protocol.md section 4): where the
// tunnel meets tunnel/resume. A link's record.Conn, after the handshake:
//
//	client: Negotiate ─ both? ─ hello(session, proof, received) ─ welcome ─┬ resumed: old resume.Conn.Attach(link)
//	                                                                       └ new: resume.New(link) ─ mux
//	        an older server: mux on the link, plain
//	server: Negotiate ─ both? ─ hello ─ check ─ welcome ─ as the client; an older client: plain
//
// A resumable session's mux runs without keepalives (the resume layer's
// acks are the liveness probe), so that an outage does not end it.

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/mux"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/redial"
	"github.com/offload-dev/offload/tunnel/resume"
)

// Indexes of counters.resumes.
const (
	resumeOK = iota
	resumeRefused
)

// Why a session ended without being resumed.
var (
	errResumeExpired = errors.New("link lost and not resumed within resume_window")
	errNoResume      = errors.New("the server does not resume sessions (an older server, or resume_window: 0)")
)

// The reasons a server refuses a resumption (welcome status 2).
const (
	refuseUnknown  = "unknown session (the server restarted, or this is another server)"
	refuseExpired  = "session expired: resume_window over"
	refuseOther    = "session belongs to another client"
	refuseBadProof = "bad proof"
)

// linkAttacked reports whether a link died of a failure that is no blip
// of the path: a frame that failed authentication or broke the record
// layer's rules (tampering, a replay, a broken peer). Such a session is
// not resumed; its streams end with the error, as without resumption
// (docs/tunnel.md's defences are unchanged).
func linkAttacked(err error) bool {
	for _, e := range []error{record.ErrAuth, record.ErrFrameTooLarge, record.ErrBadLength, record.ErrPadding, record.ErrKeyExhausted} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// prefixConn is a link whose first bytes were read before the session
// started (an older peer's yamux frames): Read returns them first.
// Embedding keeps record.Conn's WriteInPlace for the mux.
type prefixConn struct {
	*record.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// ReadLent is record.Conn.ReadLent after the prefix, which it lends as it
// is (its memory is the prefixConn's own: the lease keeps nothing).
func (p *prefixConn) ReadLent(most int) ([]byte, record.Lease, error) {
	if len(p.prefix) > 0 && most > 0 {
		b := p.prefix[:min(most, len(p.prefix))]
		p.prefix = p.prefix[len(b):]
		return b, ownLease{}, nil
	}
	return p.Conn.ReadLent(most)
}

// ownLease is the lease of bytes that need no giving back.
type ownLease struct{}

func (ownLease) Release()  {}
func (ownLease) Size() int { return 0 }

// endingConn is a resumable session as its mux sees it, at either end. A
// mux closes only when its end retires the session for good (the client:
// a new key, a server going away, shutdown; the server: shutdown, a
// reload that removed the client or its key) or the session already
// ended; End tells the peer, which ends the session at once instead of
// keeping it for resume_window (a client then redials, or fails over, at
// once). A link that is already down cannot carry the word: the peer
// keeps that session for the window.
type endingConn struct{ *resume.Conn }

func (e endingConn) Close() error {
	e.End()
	return nil
}

// resumeBound is what one end keeps for resending: half of link_buffer,
// the other half being the mux's receive budget's share of the session.
func (o *Options) resumeBound() int { return max(o.LinkBuffer/2, resume.MinBound) }

// linkSecrets draws a link's resumption secret and binding from its keys
// (before they are wiped); client says which direction Send is.
func linkSecrets(keys record.Keys, client bool) (secret, binding [32]byte, err error) {
	c2s, s2c := keys.Send.MAC, keys.Recv.MAC
	if !client {
		c2s, s2c = s2c, c2s
	}
	return resume.Secrets(c2s, s2c)
}

// withDeadline runs f with rc's deadline at d from now, then clears it.
func withDeadline(rc *record.Conn, d time.Duration, f func() error) error {
	_ = rc.SetDeadline(time.Now().Add(d))
	err := f()
	_ = rc.SetDeadline(time.Time{})
	return err
}

// resumeProbe is how long the client lets its link go silent while in
// use before it probes, and then waits for the answer before it dials a
// new link alongside (resume.Config.Probe). A second: well above a WAN's
// round trip, and well below TCP's backoff on a dead path.
const resumeProbe = time.Second

// resumeDials is the client's dial schedule while its session waits
// (redial.Overlap): four overlapping connects a second, so that bytes move
// within about a quarter second of the path's return rather than after a
// lone dial's SYN retries back off (1, 3, 7 s); rounds get longer after
// every 32 (a path whose round trip exceeds a second), up to dial_timeout.
func (o *Options) resumeDials() redial.Overlap {
	return redial.Overlap{Attempts: 4, Round: time.Second, Max: o.DialTimeout}
}

// resumeConfig is a session's resume.Config; onDetach gets its links'
// failures.
func (o *Options) resumeConfig(peerBound uint32, onDetach func(error)) resume.Config {
	return resume.Config{Bound: o.resumeBound(), PeerBound: int(peerBound), Keepalive: o.Keepalive, OnDetach: onDetach}
}

// clientSession is the client's resumable session: what it needs to
// resume it on the next link.
type clientSession struct {
	conn     *resume.Conn
	id       [16]byte
	secret   [32]byte      // the current link's: proves the session on the next
	detached chan error    // a link failed (resume.Config.OnDetach)
	stalled  chan struct{} // the link went silent (resume.Config.OnStall)
	noResume atomic.Bool   // retired or going away: a failed link ends it
	expiry   *time.Timer   // armed while detached: the session ends at resume_window
	server   string        // the server it lives on
	lost     time.Time     // when the last link went
	sess     *mux.Session  // the session on conn
}

// clientResume runs the client's side on a new link rc to server: it
// returns the connection the mux runs on, and resumed if rc now carries
// the session old (whose mux goes on). old is nil or the session whose
// link died. A refused old session is ended with the server's reason.
func (c *Client) clientResume(rc *record.Conn, secret, binding [32]byte, server string, old *clientSession) (conn io.ReadWriteCloser, cs *clientSession, resumed bool, err error) {
	var accepted bool
	var prefix []byte
	var w resume.Welcome
	err = withDeadline(rc, c.opt.HandshakeTimeout, func() error {
		var err error
		if accepted, prefix, err = resume.Negotiate(rc); err != nil || !accepted {
			return err
		}
		h := resume.Hello{Bound: uint32(c.opt.resumeBound())}
		if old != nil && old.server == server {
			// A stalled link may still be attached: cut it first, so
			// that Received is final (else bytes arriving on it after
			// the hello would come again on this link).
			old.conn.Detach(errors.New("replaced by a new link"))
			drain(old.detached)
			drain(old.stalled)
			h.Session, h.Received = old.id, old.conn.Received()
			h.Proof = resume.Proof(old.secret, old.id, binding)
		}
		if err := resume.WriteHello(rc, h); err != nil {
			return err
		}
		w, err = resume.ReadWelcome(rc)
		return err
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("resumption: %w", err)
	}
	if !accepted {
		if old != nil {
			old.conn.CloseWithError(fmt.Errorf("%w: %w", ErrLinkDown, errNoResume))
		}
		return &prefixConn{Conn: rc, prefix: prefix}, nil, false, nil
	}
	switch {
	case w.Status == resume.StatusResumed && old != nil && w.Session == old.id:
		if old.expiry != nil {
			old.expiry.Stop()
			old.expiry = nil
		}
		if err := old.conn.Attach(rc, w.Received); err != nil {
			return nil, nil, false, fmt.Errorf("resumption: %w", err)
		}
		old.secret = secret
		c.log.Info("session resumed", zap.String("server", server), zap.Duration("outage", time.Since(old.lost)))
		old.lost = time.Time{}
		return old.conn, old, true, nil
	case w.Status == resume.StatusResumed:
		return nil, nil, false, fmt.Errorf("resumption: %w: resumed a session we did not ask for", resume.ErrProtocol)
	}
	if old != nil {
		why := "the server does not hold it"
		if w.Status == resume.StatusRefused {
			why = w.Reason
		}
		if old.server != server {
			why = "the link is to another server (" + server + "), which cannot resume it"
		}
		old.conn.CloseWithError(fmt.Errorf("%w: session not resumed: %s", ErrLinkDown, why))
		c.log.Warn("session not resumed: its streams end", zap.String("server", server), zap.String("reason", why))
	}
	cs = &clientSession{id: w.Session, secret: secret, detached: make(chan error, 1), stalled: make(chan struct{}, 1), server: server}
	cfg := c.opt.resumeConfig(w.Bound, nil)
	cfg.Probe, cfg.OnStall = resumeProbe, func() {
		select {
		case cs.stalled <- struct{}{}:
		default:
		}
	}
	cfg.OnDetach = func(err error) {
		if cs.noResume.Load() || linkAttacked(err) {
			cs.conn.CloseWithError(err)
			return
		}
		select {
		case cs.detached <- err:
		default:
		}
	}
	if cs.conn, err = resume.New(rc, cfg); err != nil {
		return nil, nil, false, err
	}
	return cs.conn, cs, false, nil
}

// drain empties a signal channel of the link just cut.
func drain[T any](ch chan T) {
	select {
	case <-ch:
	default:
	}
}

// lostLink arms cs's expiry after its link failed with err (once per
// outage: a stalled link's failure may come while the client redials).
func (c *Client) lostLink(cs *clientSession, err error) {
	if cs.expiry != nil {
		return
	}
	if cs.lost.IsZero() {
		cs.lost = time.Now()
	}
	c.waiting.Store(cs)
	cs.expiry = time.AfterFunc(c.opt.ResumeWindow, func() { cs.conn.CloseWithError(fmt.Errorf("%w: %w", ErrLinkDown, errResumeExpired)) })
	c.log.Warn("link lost; resuming the session", zap.String("server", cs.server), zap.Error(err),
		zap.Int("bytes_kept", cs.conn.State().Kept))
}

// serverSession is a resumable session on the server, attached or
// waiting for its client.
type serverSession struct {
	id      [16]byte
	client  string
	conn    *resume.Conn
	secret  [32]byte // the current link's
	waiting time.Time
	timer   *time.Timer
	link    *link // the link it began on, which serves its streams
	// claiming: a resumption is attaching it to a new link (resumeTable.mu)
	claiming bool
	remote   string // the current link's client address (resumeTable.mu)
}

// resumeTable holds the server's resumable sessions, and the ids of the
// last expired ones (to tell a late client why).
type resumeTable struct {
	mu      sync.Mutex
	byID    map[[16]byte]*serverSession
	expired [256][16]byte
	next    int
	log     netguard.RateLimit
}

func (t *resumeTable) add(s *serverSession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID == nil {
		t.byID = make(map[[16]byte]*serverSession)
	}
	t.byID[s.id] = s
}

// remove forgets s; expired marks it so.
func (t *resumeTable) remove(s *serverSession, expired bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[s.id] == s {
		delete(t.byID, s.id)
	}
	if expired {
		t.expired[t.next] = s.id
		t.next = (t.next + 1) % len(t.expired)
	}
}

// claim checks a resumption of h.Session by client on a link with
// binding, and on success hands back the session with its new secret set
// and its expiry stopped; else the reason (one of refuse*).
func (t *resumeTable) claim(h resume.Hello, client string, binding, secret [32]byte) (*serverSession, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.byID[h.Session]
	if s == nil {
		for _, id := range t.expired {
			if id == h.Session {
				return nil, refuseExpired
			}
		}
		return nil, refuseUnknown
	}
	if s.client != client {
		return nil, refuseOther
	}
	if !resume.CheckProof(s.secret, s.id, binding, h.Proof) {
		return nil, refuseBadProof
	}
	if s.timer != nil && !s.timer.Stop() {
		return nil, refuseExpired // its window ended just now
	}
	s.timer, s.waiting, s.secret, s.claiming = nil, time.Time{}, secret, true
	return s, ""
}

// settled ends s's claim: its new link is attached, or failed.
func (t *resumeTable) settled(s *serverSession, remote string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.claiming, s.remote = false, remote
}

// waitingOf returns client's sessions that wait for their link, and
// forgets them.
func (t *resumeTable) waitingOf(client string) []*serverSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*serverSession
	for id, s := range t.byID {
		if s.client == client && !s.waiting.IsZero() && s.timer.Stop() {
			delete(t.byID, id)
			out = append(out, s)
		}
	}
	return out
}

// waitingSessions is what status shows: the sessions whose clients have
// not come back yet.
func (t *resumeTable) waitingSessions() []live.WaitingSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []live.WaitingSession
	for _, s := range t.byID {
		if s.waiting.IsZero() {
			continue
		}
		st := s.conn.State()
		out = append(out, live.WaitingSession{Client: s.client, Since: s.waiting, Streams: len(s.link.units), BytesKept: st.Kept})
	}
	return out
}

// serverResume runs the server's side on a new link rc of client: conn
// is what a new session's mux runs on, or nil when rc now carries a
// waiting session ss (resumed; the caller is done with rc). A resumable
// session is in s.resumes until it ends. l is rc's link.
func (s *Server) serverResume(rc *record.Conn, secret, binding [32]byte, l *link) (conn io.ReadWriteCloser, ss *serverSession, err error) {
	client := l.client
	var prefix []byte
	var h resume.Hello
	offered := false
	err = withDeadline(rc, s.opt.HandshakeTimeout, func() error {
		var err error
		if offered, prefix, err = resume.Negotiate(rc); err != nil || !offered {
			return err
		}
		h, err = resume.ReadHello(rc)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("resumption: %w", err)
	}
	if !offered {
		// An older client: its first frame belongs to its session.
		return &prefixConn{Conn: rc, prefix: prefix}, nil, nil
	}
	w := resume.Welcome{Bound: uint32(s.opt.resumeBound())}
	if h.Session != ([16]byte{}) {
		old, why := s.resumes.claim(h, client, binding, secret)
		if old != nil {
			// The old link may not have failed here yet: cut it first,
			// so that nothing more arrives on it after we say how much
			// we received (else the client resends bytes we have).
			old.conn.Detach(errors.New("the client resumed on a new link"))
			w.Status, w.Session, w.Received = resume.StatusResumed, old.id, old.conn.Received()
			if err := resume.WriteWelcome(rc, w); err != nil {
				s.resumes.settled(old, old.remote)
				old.conn.Detach(err)
				s.waitFor(old)
				return nil, nil, err
			}
			err := old.conn.Attach(rc, h.Received)
			s.resumes.settled(old, rc.RemoteAddr().String())
			if err != nil {
				return nil, nil, err
			}
			s.log.Info("session resumed", zap.String("client", client), zap.Stringer("remote", rc.RemoteAddr()))
			return nil, old, nil
		}
		s.ctr.resumes[resumeRefused].Add(1)
		if ok, n := s.resumes.log.Allow(); ok {
			s.log.Warn("resumption refused", zap.String("client", client), zap.Stringer("remote", rc.RemoteAddr()),
				zap.String("reason", why), zap.Uint64("refusals_not_logged", n))
		}
		w.Status, w.Reason = resume.StatusRefused, why
	}
	// A client holds one session: one it left waiting is over.
	for _, old := range s.resumes.waitingOf(client) {
		old.conn.CloseWithError(fmt.Errorf("%w: the client started a new session", ErrLinkDown))
	}
	ss = &serverSession{client: client, secret: secret, link: l, remote: rc.RemoteAddr().String()}
	_, _ = rand.Read(ss.id[:])
	w.Session = ss.id
	if err := resume.WriteWelcome(rc, w); err != nil {
		return nil, nil, err
	}
	ss.conn, err = resume.New(rc, s.opt.resumeConfig(h.Bound, func(err error) {
		if linkAttacked(err) {
			ss.conn.CloseWithError(err)
			return
		}
		if s.waitFor(ss) {
			// The link that went, not the one the session began on.
			s.resumes.mu.Lock()
			remote := ss.remote
			s.resumes.mu.Unlock()
			s.log.Warn("link lost; waiting for the client to resume", zap.String("remote", remote),
				zap.String("client", client), zap.Error(err), zap.Int("bytes_kept", ss.conn.State().Kept))
		}
	}))
	if err != nil {
		return nil, nil, err
	}
	s.resumes.add(ss)
	return ss.conn, ss, nil
}

// waitFor starts ss's resume window: at its end the session is freed and
// its streams reset with the reason.
// A link's failure reported after a resumption began (OnDetach runs on
// its own goroutine) is the replaced link's: no wait (false), else the
// session, attached to its new link, would expire at the window's end.
func (s *Server) waitFor(ss *serverSession) bool {
	s.resumes.mu.Lock()
	defer s.resumes.mu.Unlock()
	if ss.timer != nil || ss.claiming || ss.conn.State().Attached {
		return false
	}
	ss.waiting = time.Now()
	ss.timer = time.AfterFunc(s.opt.ResumeWindow, func() {
		s.resumes.remove(ss, true)
		ss.conn.CloseWithError(errResumeExpired)
	})
	return true
}
