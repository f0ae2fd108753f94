package mux

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"go.uber.org/zap"
)

/* A Session, its goroutines and locks:

   recvLoop (one per session) reads frame headers from conn; a Data body
   goes straight from conn into the receiving stream's segments (segment.go)
   and the stream's reader is woken: the one hand-off per received frame.
   On a conn that lends what it reads (record.Conn.ReadLent, through
   resume.Conn's), the body's big pieces become segments as they are, the
   opened frame's own buffer, which the stream's WriteTo/CopyTo writes to
   the target and gives back once read; small ones are copied:

     record frame, opened ──ReadLent──> lent segment ──WriteTo──> target
     (no copy of ours from the decryption to the target's socket)
     small piece ──copy──> pooled segment ──WriteTo / Read──> target
   It never writes to conn: what it answers (ping echoes, RSTs, GoAway) it
   queues for ctrlLoop, so a peer that stops reading can not stop this end
   from reading.

   Stream.Write puts a Data frame on conn itself: it takes wsem (one frame
   on conn at a time), writes header and body, gives wsem back. No send
   goroutine, no copy besides the connection's own. Stream.Fill, on a conn
   that lends its buffer (record.Conn.WriteInPlace), has its caller write
   the body straight into that buffer behind the header, header and body
   one write under wsem: no copy at all, so the caller's fill must not
   block (the tunnel's reads only what its socket already holds).

   ctrlLoop (one per session) writes the queued control frames: window
   updates, ACKs, FINs, RSTs, ping echoes, GoAway, taking wsem like a
   Write. keepalive (one per session, if on) pings every interval.

   Locks: mu guards streams, the id counter and the go-away flags; each
   Stream has its own mu for its buffers and windows; ctrlMu the control
   queue. A goroutine holding a stream's mu takes no other lock except
   ctrlMu and never blocks.

   Receive budget (Config.ReceiveBudget, offload's link_buffer): held is the
   segment memory all streams hold (a lent segment's bytes; what its
   buffer keeps beyond them is pinned, within a quarter of the budget:
   segment.go). A Data frame that would take held past
   the budget resets its stream (RST, Counters.Overruns, a log line that
   names the setting) and its body is discarded. Credit: a stream grants
   its peer window only as its consumer reads. Up to InitialWindow of
   exposure (buffered + credit) a stream always gets back what its consumer
   read, so a reading stream never stalls; beyond that, up to
   MaxStreamWindow, only while extra (the exposure of all streams beyond
   their initial windows) stays within half the budget. So credit beyond the
   initial windows never exceeds half the budget, and the rest is room for
   the initial windows the protocol gives every new stream, which no frame
   can take back. */

// Config configures a Session; the zero value takes every default.
type Config struct {
	// AcceptBacklog bounds the streams the peer opened that AcceptStream
	// has not returned yet; one more is refused at once (RST). 0: 256.
	AcceptBacklog int
	// MaxStreams bounds the streams the session holds at once (both
	// sides'); a new stream of the peer's beyond it is refused at once
	// (RST). 0: 1024.
	MaxStreams int
	// MaxStreamWindow is the most window credit a stream grants its peer,
	// at least InitialWindow. 0: InitialWindow.
	MaxStreamWindow uint32
	// ReceiveBudget bounds the bytes all streams' receive buffers hold.
	// 0: 16 MiB.
	ReceiveBudget int
	// KeepAliveInterval is how often the session pings its peer; 0 is
	// off. A ping not answered within ConnectionWriteTimeout closes the
	// session, unless frames from the peer kept arriving meanwhile
	// (keepalive).
	KeepAliveInterval time.Duration
	// ConnectionWriteTimeout bounds a keepalive's round trip. 0: 10 s.
	ConnectionWriteTimeout time.Duration
	// StreamOpenTimeout: a stream this end opened that the peer did not
	// acknowledge within it is reset. 0: 75 s; negative: no timeout.
	StreamOpenTimeout time.Duration
	// StreamCloseTimeout: a stream this end closed that the peer did not
	// close within it is reset. 0: 5 min; negative: no timeout.
	StreamCloseTimeout time.Duration
	// MaxFrameBody is the largest Data body a Write sends in one frame,
	// so that one stream's big Write does not hold the connection for
	// long. 0: 256 KiB.
	MaxFrameBody int
	// Logger gets the session's warnings; nil means none.
	Logger *zap.Logger
	// MaxStreamsName and ReceiveBudgetName name the settings behind
	// MaxStreams and ReceiveBudget in the log lines that say which to
	// raise. Defaults: "MaxStreams", "ReceiveBudget".
	MaxStreamsName, ReceiveBudgetName string
	// Counters, if not nil, adds up the session's refusals and overruns
	// (shared by sessions, for metrics).
	Counters *Counters
}

// Counters are a session's events that a peer can cause.
type Counters struct {
	// Refused counts the peer's new streams refused with an RST: past
	// MaxStreams, the accept backlog full, or after GoAway.
	Refused atomic.Uint64
	// Overruns counts streams reset because their data would have taken
	// the session past ReceiveBudget.
	Overruns atomic.Uint64
}

func (c *Config) setDefaults() error {
	if c.AcceptBacklog <= 0 {
		c.AcceptBacklog = 256
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = 1024
	}
	if c.MaxStreamWindow == 0 {
		c.MaxStreamWindow = InitialWindow
	}
	if c.MaxStreamWindow < InitialWindow {
		return fmt.Errorf("mux: stream window %d is less than the protocol's initial %d", c.MaxStreamWindow, InitialWindow)
	}
	if c.ReceiveBudget <= 0 {
		c.ReceiveBudget = 16 << 20
	}
	if c.ConnectionWriteTimeout <= 0 {
		c.ConnectionWriteTimeout = 10 * time.Second
	}
	if c.StreamOpenTimeout == 0 {
		c.StreamOpenTimeout = 75 * time.Second
	}
	if c.StreamCloseTimeout == 0 {
		c.StreamCloseTimeout = 5 * time.Minute
	}
	if c.MaxFrameBody <= 0 {
		c.MaxFrameBody = 256 << 10
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.MaxStreamsName == "" {
		c.MaxStreamsName = "MaxStreams"
	}
	if c.ReceiveBudgetName == "" {
		c.ReceiveBudgetName = "ReceiveBudget"
	}
	if c.Counters == nil {
		c.Counters = new(Counters)
	}
	return nil
}

// maxCtrlQueue bounds the control frames queued for a peer that does not
// read them (RSTs for its refused streams, ping echoes): past it the
// session is closed.
const maxCtrlQueue = 1 << 20

// Session is one end of a multiplexed connection.
type Session struct {
	conn   io.ReadWriteCloser
	place  placeWriter // conn, if it can be written in place; else nil
	lend   lender      // conn, if it lends what it reads; else nil
	cfg    Config
	client bool
	log    *zap.Logger

	mu           sync.Mutex
	streams      map[uint32]*Stream
	nextID       uint32
	peerHigh     uint32 // the highest stream id the peer opened (SYN), 0 before
	localGoAway  bool
	remoteGoAway bool
	pings        map[uint32]chan struct{}
	pingID       uint32

	pingLimit pingBucket // the peer's pings (pinglimit.go); recvLoop's alone

	acceptCh chan *Stream
	wsem     chan struct{} // one frame on conn at a time

	ctrlMu   sync.Mutex
	ctrlBuf  []byte
	ctrlSpar []byte
	ctrlCh   chan struct{}

	recvd  atomic.Uint64 // frames read from the peer: keepalive's sign of life
	held   atomic.Int64  // segment bytes held by all streams
	pinned atomic.Int64  // lent buffers' memory beyond their pieces' bytes (segment.go)
	extra  atomic.Int64  // exposure beyond the streams' initial windows

	strayLog, lateLog, refuseLog, overrunLog netguard.RateLimit

	closed    chan struct{}
	closeOnce sync.Once
	errMu     sync.Mutex
	err       error
	wg        sync.WaitGroup
}

// Client starts the client end of a session on conn (stream ids odd).
func Client(conn io.ReadWriteCloser, cfg *Config) (*Session, error) {
	return newSession(conn, cfg, true)
}

// Server starts the server end of a session on conn (stream ids even).
func Server(conn io.ReadWriteCloser, cfg *Config) (*Session, error) {
	return newSession(conn, cfg, false)
}

func newSession(conn io.ReadWriteCloser, cfg *Config, client bool) (*Session, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.setDefaults(); err != nil {
		return nil, err
	}
	s := &Session{
		conn:     conn,
		cfg:      c,
		client:   client,
		log:      c.Logger,
		streams:  map[uint32]*Stream{},
		pings:    map[uint32]chan struct{}{},
		acceptCh: make(chan *Stream, c.AcceptBacklog),
		wsem:     make(chan struct{}, 1),
		ctrlCh:   make(chan struct{}, 1),
		closed:   make(chan struct{}),

		pingLimit: newPingBucket(time.Now()),
	}
	s.place, _ = conn.(placeWriter)
	s.lend, _ = conn.(lender)
	for _, r := range []*netguard.RateLimit{&s.strayLog, &s.lateLog, &s.refuseLog, &s.overrunLog} {
		r.Every = 10 * time.Second
	}
	if client {
		s.nextID = 1
	} else {
		s.nextID = 2
	}
	s.wg.Add(2)
	go s.recvLoop()
	go s.ctrlLoop()
	if c.KeepAliveInterval > 0 {
		s.wg.Add(1)
		go s.keepalive()
	}
	return s, nil
}

// OpenStream opens a stream: its SYN is on the connection when it
// returns, and it may be written to at once (up to the initial window
// before the peer's ACK).
func (s *Session) OpenStream() (*Stream, error) {
	s.mu.Lock()
	switch {
	case s.isClosed():
		s.mu.Unlock()
		return nil, s.closeErr()
	case s.remoteGoAway:
		s.mu.Unlock()
		return nil, ErrRemoteGoAway
	case s.nextID >= 1<<32-2:
		s.mu.Unlock()
		return nil, ErrStreamsExhausted
	}
	id := s.nextID
	s.nextID += 2
	st := newStream(s, id)
	st.synSent = true
	s.streams[id] = st
	s.mu.Unlock()

	var hdr [HeaderSize]byte
	header{typ: typeWindowUpdate, flags: flagSYN, stream: id}.encode(hdr[:])
	if err := s.writeFrame(hdr[:], nil, nil); err != nil {
		s.removeStream(st)
		return nil, err
	}
	if d := s.cfg.StreamOpenTimeout; d > 0 {
		st.mu.Lock()
		if !st.acked && !st.dead() {
			st.openTimer = time.AfterFunc(d, st.openTimedOut)
		}
		st.mu.Unlock()
	}
	return st, nil
}

// Open is OpenStream as a net.Conn.
func (s *Session) Open() (net.Conn, error) { return s.OpenStream() }

// AcceptStream waits for the next stream the peer opens and acknowledges
// it.
func (s *Session) AcceptStream() (*Stream, error) {
	select {
	case st := <-s.acceptCh:
		s.queueStream(st, flagACK, 0)
		return st, nil
	case <-s.closed:
		return nil, s.closeErr()
	}
}

// Accept is AcceptStream as a net.Listener's.
func (s *Session) Accept() (net.Conn, error) { return s.AcceptStream() }

// Addr is the connection's local address, if it has one.
func (s *Session) Addr() net.Addr {
	if c, ok := s.conn.(net.Conn); ok {
		return c.LocalAddr()
	}
	return nil
}

// NumStreams is the number of streams the session holds.
func (s *Session) NumStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

// Buffered is the memory the streams' receive buffers hold now, in bytes:
// their segments and the whole of every buffer lent to them.
func (s *Session) Buffered() int64 { return s.held.Load() + s.pinned.Load() }

// GoAway tells the peer this end takes no new streams; the streams open
// go on.
func (s *Session) GoAway() error {
	s.mu.Lock()
	s.localGoAway = true
	s.mu.Unlock()
	return s.queue(header{typ: typeGoAway, length: goAwayNormal})
}

// Ping sends a ping and waits for its echo: the round-trip time.
func (s *Session) Ping() (time.Duration, error) {
	id, ch := s.newPing()
	defer s.forgetPing(id)
	start := time.Now()
	if err := s.queue(header{typ: typePing, flags: flagSYN, length: id}); err != nil {
		return 0, err
	}
	t := time.NewTimer(s.cfg.ConnectionWriteTimeout)
	defer t.Stop()
	select {
	case <-ch:
		return time.Since(start), nil
	case <-t.C:
		return 0, ErrTimeout
	case <-s.closed:
		return 0, s.closeErr()
	}
}

// newPing registers a ping: its id, and the channel its echo closes.
func (s *Session) newPing() (uint32, chan struct{}) {
	ch := make(chan struct{})
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pingID++
	s.pings[s.pingID] = ch
	return s.pingID, ch
}

func (s *Session) forgetPing(id uint32) {
	s.mu.Lock()
	delete(s.pings, id)
	s.mu.Unlock()
}

// CloseChan is closed when the session is.
func (s *Session) CloseChan() <-chan struct{} { return s.closed }

// IsClosed reports whether the session is closed.
func (s *Session) IsClosed() bool { return s.isClosed() }

func (s *Session) isClosed() bool { return isClosed(s.closed) }

// Err is why the session closed (nil: Close, or still open).
func (s *Session) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

func (s *Session) closeErr() error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrSessionShutdown, err)
	}
	return ErrSessionShutdown
}

// Close closes the session and its connection; every stream's pending
// and later I/O fails with ErrSessionShutdown. It waits for the session's
// goroutines.
func (s *Session) Close() error {
	s.shutdown(nil)
	s.wg.Wait()
	return nil
}

// shutdown closes the session for err (nil: a local Close) without
// waiting; the first cause wins.
func (s *Session) shutdown(err error) {
	s.closeOnce.Do(func() {
		s.errMu.Lock()
		s.err = err
		s.errMu.Unlock()
		close(s.closed)
		_ = s.conn.Close()
		s.mu.Lock()
		streams := make([]*Stream, 0, len(s.streams))
		for _, st := range s.streams {
			streams = append(streams, st)
		}
		s.mu.Unlock()
		for _, st := range streams {
			st.sessionClosed()
		}
	})
}

// protocolError closes the session for a peer that broke the protocol,
// with a GoAway that says so if it can still go out.
func (s *Session) protocolError(err error) {
	s.log.Warn("peer broke the yamux protocol: closing the session", zap.Error(err))
	var hdr [HeaderSize]byte
	header{typ: typeGoAway, length: goAwayProtocol}.encode(hdr[:])
	select {
	case s.wsem <- struct{}{}:
		_, _ = s.conn.Write(hdr[:])
		<-s.wsem
	default:
	}
	s.shutdown(err)
}

// writeFrame writes a frame (header, then body) to the connection, waiting
// for it until timeout (nil: no deadline) or the session's end.
func (s *Session) writeFrame(hdr, body []byte, timeout <-chan struct{}) error {
	select {
	case s.wsem <- struct{}{}:
	case <-timeout:
		return ErrTimeout
	case <-s.closed:
		return s.closeErr()
	}
	_, err := s.conn.Write(hdr)
	if err == nil && len(body) > 0 {
		_, err = s.conn.Write(body)
	}
	<-s.wsem
	if err != nil {
		s.shutdown(err)
		return fmt.Errorf("%w: %w", ErrSessionShutdown, err)
	}
	return nil
}

// Filler writes bytes into room it is lent (Stream.Fill) and returns how
// many it wrote at the start of b; the same type as record.Filler.
type Filler = interface {
	Fill(b []byte) int
}

// placeWriter is a connection that lets its writer put bytes straight
// into its own buffer (record.Conn.WriteInPlace): Fill gets need to most
// bytes of room, must not block, and returns how many it wrote.
type placeWriter interface {
	WriteInPlace(need, most int, fill Filler) (int, error)
}

// dataFiller puts a Data frame's header in front of the body its stream's
// Filler writes (Stream.Fill); one per stream, so a frame costs no
// allocation.
type dataFiller struct {
	id   uint32
	body Filler
	n    int // the last frame's body length
}

func (d *dataFiller) Fill(b []byte) int {
	d.n = min(max(0, d.body.Fill(b[HeaderSize:])), len(b)-HeaderSize)
	if d.n == 0 {
		return 0
	}
	header{typ: typeData, stream: d.id, length: uint32(d.n)}.encode(b)
	return HeaderSize + d.n
}

// fillFrame puts a Data frame on the connection whose body, need to most
// bytes, d's Filler writes in place behind the header; a body of 0 sends
// nothing. It waits for the connection as writeFrame does and returns the
// body's length.
func (s *Session) fillFrame(d *dataFiller, need, most int, timeout <-chan struct{}) (int, error) {
	select {
	case s.wsem <- struct{}{}:
	case <-timeout:
		return 0, ErrTimeout
	case <-s.closed:
		return 0, s.closeErr()
	}
	d.n = 0
	_, err := s.place.WriteInPlace(HeaderSize+need, HeaderSize+most, d)
	<-s.wsem
	if err != nil {
		s.shutdown(err)
		return 0, fmt.Errorf("%w: %w", ErrSessionShutdown, err)
	}
	return d.n, nil
}

// queue queues a control frame for ctrlLoop.
func (s *Session) queue(h header) error {
	s.ctrlMu.Lock()
	if len(s.ctrlBuf)+HeaderSize > maxCtrlQueue {
		s.ctrlMu.Unlock()
		err := fmt.Errorf("%w: the peer does not read: %d bytes of control frames queued", ErrProtocol, maxCtrlQueue)
		s.shutdown(err)
		return err
	}
	var b [HeaderSize]byte
	h.encode(b[:])
	s.ctrlBuf = append(s.ctrlBuf, b[:]...)
	s.ctrlMu.Unlock()
	notify(s.ctrlCh)
	if s.isClosed() {
		return s.closeErr()
	}
	return nil
}

// queueStream queues a window update with flags and delta for st.
func (s *Session) queueStream(st *Stream, flags uint16, delta uint32) {
	_ = s.queue(header{typ: typeWindowUpdate, flags: flags, stream: st.id, length: delta})
}

func (s *Session) ctrlLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctrlCh:
		case <-s.closed:
			return
		}
		s.ctrlMu.Lock()
		b := s.ctrlBuf
		s.ctrlBuf, s.ctrlSpar = s.ctrlSpar[:0], nil
		s.ctrlMu.Unlock()
		if len(b) == 0 {
			continue
		}
		select {
		case s.wsem <- struct{}{}:
		case <-s.closed:
			return
		}
		_, err := s.conn.Write(b)
		<-s.wsem
		if err != nil {
			s.shutdown(err)
			return
		}
		s.ctrlMu.Lock()
		if cap(b) <= 64<<10 {
			s.ctrlSpar = b[:0]
		} else {
			s.ctrlSpar = nil
		}
		s.ctrlMu.Unlock()
	}
}

// keepalive pings the peer every interval. A peer is dead when neither the
// echo nor any other frame came from it for a whole timeout: a late echo
// while frames keep arriving is an echo queued behind the peer's data (or
// a peer busy elsewhere), not a dead link; and a timeout is judged twice,
// the second time a grace after the first, because a guest that was
// stopped (an emulated router whose host is busy, a laptop waking up)
// resumes with its timers expired before its receive loop has read what
// arrived meanwhile (docs/lab/router-anchor.md, 2026-12-07).
func (s *Session) keepalive() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.KeepAliveInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.closed:
			return
		}
		if err := s.keepalivePing(); err != nil {
			if !s.isClosed() {
				s.log.Warn("keepalive failed: closing the session", zap.Error(err))
				s.shutdown(fmt.Errorf("%w: %w", ErrKeepAlive, err))
			}
			return
		}
	}
}

// keepaliveGrace is the second look keepalive takes at a timeout.
const keepaliveGrace = time.Second

// keepalivePing sends one ping and waits for its echo, or for a timeout
// (ConnectionWriteTimeout, then keepaliveGrace) in which nothing at all
// arrived from the peer.
func (s *Session) keepalivePing() error {
	id, ch := s.newPing()
	defer s.forgetPing(id)
	seen := s.recvd.Load()
	if err := s.queue(header{typ: typePing, flags: flagSYN, length: id}); err != nil {
		return err
	}
	t := time.NewTimer(s.cfg.ConnectionWriteTimeout)
	defer t.Stop()
	graced := false
	for {
		select {
		case <-ch:
			return nil
		case <-s.closed:
			return s.closeErr()
		case <-t.C:
		}
		switch now := s.recvd.Load(); {
		case now != seen:
			seen, graced = now, false // alive: wait a whole timeout again
			t.Reset(s.cfg.ConnectionWriteTimeout)
		case !graced:
			graced = true
			t.Reset(keepaliveGrace)
		default:
			return ErrTimeout
		}
	}
}

// recvLoop reads and handles frames until the connection fails.
func (s *Session) recvLoop() {
	defer s.wg.Done()
	var hdr [HeaderSize]byte
	for {
		if _, err := io.ReadFull(s.conn, hdr[:]); err != nil {
			s.shutdown(readErr(err))
			return
		}
		s.recvd.Add(1)
		h, err := decodeHeader(hdr[:])
		if err == nil {
			switch h.typ {
			case typeData, typeWindowUpdate:
				err = s.handleStream(h)
			case typePing:
				err = s.handlePing(h)
			case typeGoAway:
				err = s.handleGoAway(h)
			}
		}
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				s.protocolError(err)
			} else {
				s.shutdown(readErr(err))
			}
			return
		}
	}
}

// readErr is a connection's read error as the session's cause: a clean
// end of the connection is io.EOF.
func readErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("connection ended inside a frame: %w", err)
	}
	return err
}

// handlePing echoes the peer's ping, within the ping limit
// (pinglimit.go), and wakes the Ping its echo answers.
func (s *Session) handlePing(h header) error {
	switch {
	case h.flags&flagSYN != 0:
		if now := time.Now(); !s.pingLimit.take(now) {
			return s.pingLimit.flood(now)
		}
		_ = s.queue(header{typ: typePing, flags: flagACK, length: h.length})
	case h.flags&flagACK != 0:
		s.mu.Lock()
		ch := s.pings[h.length]
		delete(s.pings, h.length)
		s.mu.Unlock()
		if ch != nil {
			close(ch)
		}
	}
	return nil
}

func (s *Session) handleGoAway(h header) error {
	switch h.length {
	case goAwayNormal:
		s.mu.Lock()
		s.remoteGoAway = true
		s.mu.Unlock()
		return nil
	case goAwayProtocol:
		return errors.New("mux: the peer saw a protocol error (GoAway)")
	case goAwayInternal:
		return errors.New("mux: the peer had an internal error (GoAway)")
	}
	return fmt.Errorf("%w: GoAway code %d", ErrProtocol, h.length)
}

// stray logs a frame for a stream this end does not have (rate-limited:
// a peer decides how many).
func (s *Session) stray(msg string, h header) {
	if ok, n := s.strayLog.Allow(); ok {
		s.log.Warn(msg, zap.Stringer("frame", h), zap.Uint64("stray_frames_not_logged", n))
	}
}

// openedLocked says whether stream id was ever opened on this session:
// by this end (below its next id) or by the peer (a SYN at or below the
// highest it sent). A frame for such a stream that is gone is late, not
// stray. s.mu held.
func (s *Session) openedLocked(id uint32) bool {
	if (id%2 == 1) == s.client {
		return id != 0 && id < s.nextID
	}
	return id != 0 && id <= s.peerHigh
}

// discard reads and drops n body bytes.
func (s *Session) discard(n uint32) error {
	if n == 0 {
		return nil
	}
	_, err := io.CopyN(io.Discard, s.conn, int64(n))
	return err
}

func (s *Session) handleStream(h header) error {
	var body uint32
	if h.typ == typeData {
		body = h.length
	}
	s.mu.Lock()
	st := s.streams[h.stream]
	late := st == nil && s.openedLocked(h.stream)
	if h.flags&flagSYN != 0 {
		if st != nil {
			s.mu.Unlock()
			return fmt.Errorf("%w: SYN for stream %d, which is open", ErrProtocol, h.stream)
		}
		if (h.stream%2 == 1) == s.client {
			s.mu.Unlock()
			return fmt.Errorf("%w: SYN for stream %d, an id of this end's", ErrProtocol, h.stream)
		}
		s.peerHigh = max(s.peerHigh, h.stream)
		var why, setting string
		switch {
		case s.localGoAway:
			why = "the session is going away"
		case len(s.streams) >= s.cfg.MaxStreams:
			why, setting = fmt.Sprintf("%d streams open", len(s.streams)), s.cfg.MaxStreamsName
		}
		if why == "" {
			st = newStream(s, h.stream)
			select {
			case s.acceptCh <- st:
				s.streams[h.stream] = st
			default:
				st = nil
				why, setting = fmt.Sprintf("accept backlog full (%d streams)", s.cfg.AcceptBacklog), s.cfg.MaxStreamsName
			}
		}
		s.mu.Unlock()
		if st == nil {
			s.refuse(h.stream, why, setting)
			return s.discard(body)
		}
	} else {
		s.mu.Unlock()
	}
	switch {
	case st == nil && late:
		// The peer sent it before it saw this end's reset or refusal
		// (data after a Close is answered with a reset; a frame may
		// follow a refused SYN): frames crossing, as a FIN crosses a
		// reset in TCP. Likely after a resumption, which delivers what
		// both ends sent during the outage at once.
		if h.flags&flagRST == 0 || body > 0 {
			if ok, n := s.lateLog.Allow(); ok {
				s.log.Debug("yamux: late frame for a stream this end ended", zap.Stringer("frame", h), zap.Uint64("late_frames_not_logged", n))
			}
		}
		return s.discard(body)
	case st == nil:
		if h.flags&flagRST == 0 || body > 0 {
			s.stray("yamux: frame for missing stream", h)
		}
		return s.discard(body)
	}
	if h.flags&flagACK != 0 {
		st.acknowledged(h)
	}
	if h.typ == typeWindowUpdate {
		st.addSendWindow(h.length)
	} else if err := st.receive(body); err != nil {
		return err
	}
	if h.flags&flagFIN != 0 {
		st.remoteClose()
	}
	if h.flags&flagRST != 0 {
		st.remoteReset()
	}
	return nil
}

// refuse answers a new stream of the peer's with an RST at once.
func (s *Session) refuse(id uint32, why, setting string) {
	s.cfg.Counters.Refused.Add(1)
	_ = s.queue(header{typ: typeWindowUpdate, flags: flagRST, stream: id})
	if ok, n := s.refuseLog.Allow(); ok {
		f := []zap.Field{zap.Uint32("stream", id), zap.String("reason", why), zap.Uint64("refusals_not_logged", n)}
		if setting != "" {
			f = append(f, zap.String("raise", setting))
		}
		s.log.Warn("refused a new stream", f...)
	}
}

// removeStream forgets st (it is done at both ends, or reset).
func (s *Session) removeStream(st *Stream) {
	s.mu.Lock()
	if s.streams[st.id] == st {
		delete(s.streams, st.id)
	}
	s.mu.Unlock()
}
