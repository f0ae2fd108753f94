// Package resume gives a session a connection that outlives its links: a
// Conn keeps every byte it sent until the peer acknowledged it, and when a
// link dies and a new one is attached, both ends resend from the byte the
// other said it received. What runs on top (the tunnel's yamux session,
// its streams and windows) sees a pause, never a gap or a repeated byte.
// docs/protocol.md, "Session resumption", is the design.
//
//	Write ──copy──> kept (unacked bytes, ≤ Bound) ──DATA──> link ──> peer's Read
//	WriteInPlace ──fill──┘ (the mux's socket read, straight into a chunk)
//	Read  <──DATA── link <── peer's kept                      ACK(received) ──> peer trims kept
//	ReadLent <──┘ (a piece of the link's opened frame, lent, not copied:
//	               record.Conn.ReadLent; the DATA headers are read with Read)
//
// Wire format, inside one link once both ends agreed to it (hello.go):
//
//	frame = 0x01 | len:u32be | data[len]     1 ≤ len ≤ MaxData: the next len bytes of this direction
//	      | 0x02 | received:u64be            ack: this end has received that many bytes in all
//	      | 0x05                             probe: answer with an ack at once
//	      | 0x06                             end: the peer ended the session on purpose
//
// Counts are cumulative over the session (every link it had), so a resend
// needs no frame boundaries: a new link starts at the byte the receiver
// named. The receiver acknowledges when 1/ackShare of the sender's bound
// (PeerBound) is unacknowledged and every Keepalive; the ack doubles as
// the liveness probe, so the session above runs without keepalives of its
// own (they would cut it during an outage). An end with Config.Probe (the
// client) also watches the link (watch): silence after the link was in
// use draws a probe, and a probe left unanswered calls OnStall, so the
// owner dials a new link alongside long before TCP gives the old one up.
package resume

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	typeData = 0x01
	typeAck  = 0x02
	// 0x03 and 0x04 are the hello and welcome (hello.go).
	typeProbe = 0x05
	typeEnd   = 0x06

	// MaxData is the largest DATA frame body.
	MaxData = 64 << 10
	// MinBound is the smallest Bound: one full DATA frame.
	MinBound = MaxData

	// ackEvery: an end receiving data acks at least this often (of the
	// frames' arrival), so a peer's watch hears a slow but healthy link.
	ackEvery = 200 * time.Millisecond
	// ackShare: the receiver acks each 1/ackShare of the sender's bound.
	// At a quarter (2 MiB at the default link_buffer), a bulk sender
	// held up to its whole bound and, under the default 20 MiB
	// memory_limit, spent a fifth of its CPU in the garbage collector and
	// more in chunk allocations: 1.5-2x a plain link's CPU per byte on
	// x86. At a sixteenth (a 9-byte ack per 512 KiB) the collector takes
	// 2 % and the cost is about a plain link's (docs/lab/sessions.md).
	ackShare = 16
)

var (
	// ErrProtocol: the peer broke the framing or acknowledged bytes it
	// was never sent; the session ends (a link error would not: it
	// comes from an authenticated peer, so it is a bug, not a blip).
	ErrProtocol = errors.New("resume: protocol error")
	// ErrLost: the peer asks for bytes this end no longer keeps (it
	// acknowledged them before), or says it has more than was sent: the
	// two ends do not hold the same session.
	ErrLost = errors.New("resume: the ends disagree on what was sent")
	// ErrClosed is returned after Close.
	ErrClosed = fmt.Errorf("resume: %w", net.ErrClosed)
	// ErrEnded: the peer ended the session on purpose (End).
	ErrEnded = errors.New("resume: the peer ended the session")
	// ErrSilent is a link's error when nothing came from the peer for
	// Config.Timeout.
	ErrSilent = errors.New("resume: peer silent")
)

// Config configures a Conn.
type Config struct {
	// Bound is the most bytes written and not yet acknowledged that the
	// Conn keeps; Write blocks while they are at Bound. At least MinBound.
	Bound int
	// PeerBound is the peer's Bound: this end acknowledges when
	// 1/ackShare of it is unacknowledged. At least MinBound.
	PeerBound int
	// Keepalive is how often an idle end sends an ack; 0 sends none but
	// the share-of-bound ones (and checks no silence).
	Keepalive time.Duration
	// Timeout: a link on which nothing arrived for this long is dead
	// (ErrSilent). 0: Keepalive + 10 s. Used only with Keepalive.
	Timeout time.Duration
	// OnDetach is called, from its own goroutine, when a link fails: the
	// owner attaches a new one (Attach) or ends the session (CloseWithError).
	OnDetach func(err error)
	// Probe, if > 0, watches the link (the client does): after Probe of
	// silence while bytes moved, a probe goes out, and if it is not
	// answered within Probe (plus twice the last answer's delay),
	// OnStall is called, from its own goroutine, once per silence.
	Probe   time.Duration
	OnStall func()
}

// Conn is one side of a resumable session. Read and Write may each be
// called from one goroutine at a time (the session above has one reader;
// its writers take turns), Close from any. The peer's acks arrive through
// Read, so the session above must keep reading (yamux's receive loop
// does) for Write to get room back.
type Conn struct {
	cfg Config

	wmu sync.Mutex // one Write at a time
	lmu sync.Mutex // one writer on the link at a time: flushes, acks, Attach

	mu      sync.Mutex
	cond    sync.Cond // link attached, space freed, closed
	link    net.Conn  // nil while detached
	gen     uint64    // counts links; bytes and acks of an old link are dropped
	err     error     // after CloseWithError
	kept    chunks    // bytes [acked, sent)
	acked   uint64
	sent    uint64
	wire    uint64 // bytes of [acked, sent) already on the current link
	recv    uint64 // bytes Read has returned
	ackSent uint64 // recv at the last ack sent
	ackAt   int64  // heard at the last ack sent
	since   time.Time
	lastErr error

	epoch  time.Time    // New's clock reading: heard counts from it
	heard  atomic.Int64 // nanoseconds from epoch to the last frame read
	probed atomic.Bool  // the peer probed: the next ack goes out at once
	kick   chan struct{}
	done   chan struct{}
	loop   sync.WaitGroup

	// The reader's own state (Read's goroutine only).
	rgen  uint64
	rleft int
	rhdr  [9]byte
}

// hear notes that a frame arrived. It counts on the monotonic clock: a
// router's wall clock steps when NTP first sets it after boot (often by
// years) and whenever a guest's clock is corrected, and a step forward
// counted as silence would fail a healthy link as ErrSilent.
func (c *Conn) hear() { c.heard.Store(int64(time.Since(c.epoch))) }

// heardAt is when the last frame arrived, with its monotonic reading.
func (c *Conn) heardAt() time.Time { return c.epoch.Add(time.Duration(c.heard.Load())) }

// New returns a Conn on its first link.
func New(link net.Conn, cfg Config) (*Conn, error) {
	if cfg.Bound < MinBound || cfg.PeerBound < MinBound {
		return nil, fmt.Errorf("resume: bound %d, peer bound %d: want at least %d", cfg.Bound, cfg.PeerBound, MinBound)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Keepalive + 10*time.Second
	}
	c := &Conn{cfg: cfg, link: link, gen: 1, kick: make(chan struct{}, 1), done: make(chan struct{})}
	c.cond.L = &c.mu
	c.epoch = time.Now()
	c.hear()
	c.loop.Add(1)
	go c.ackLoop()
	if cfg.Probe > 0 {
		c.loop.Add(1)
		go c.watchLoop()
	}
	return c, nil
}

// Received is how many bytes Read has returned: what this end tells the
// peer to resend from. Stable while the Conn is detached.
func (c *Conn) Received() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recv
}

// State is what status pages show.
type State struct {
	Attached bool
	Since    time.Time // when the link went, if not Attached
	Kept     int       // bytes kept for resending
	Sent     uint64    // bytes written in all
	Err      error     // why the last link went
}

// State returns the Conn's state.
func (c *Conn) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return State{Attached: c.link != nil, Since: c.since, Kept: int(c.sent - c.acked), Sent: c.sent, Err: c.lastErr}
}

// Detach cuts the current link (closes it) as if it had failed with err,
// without calling OnDetach. From then on nothing that arrives on it is
// delivered, so Received is final until the next Attach.
func (c *Conn) Detach(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detachLocked(err)
}

func (c *Conn) detachLocked(err error) bool {
	if c.link == nil {
		return false
	}
	closeLink(c.link)
	c.link = nil
	c.gen++
	c.since = time.Now()
	c.lastErr = err
	c.cond.Broadcast()
	return true
}

// closeLink closes a link that is given up: its deadlines pass first, so
// a write blocked on a dead path (which holds lmu) returns at once, and
// the close itself, which may flush, runs on its own.
func closeLink(l net.Conn) {
	_ = l.SetDeadline(time.Unix(1, 0))
	go l.Close()
}

// fail detaches link generation gen after an error on it.
func (c *Conn) fail(gen uint64, err error) {
	c.mu.Lock()
	detached := c.gen == gen && c.err == nil && c.detachLocked(err)
	c.mu.Unlock()
	if detached && c.cfg.OnDetach != nil {
		go c.cfg.OnDetach(err)
	}
}

// Attach makes link the Conn's link, the peer having said it received
// peerReceived bytes: the bytes after those go out again on link first.
// A current link, if any, is cut. ErrLost (the session ends) if the
// peer's count is outside what was sent and kept.
func (c *Conn) Attach(link net.Conn, peerReceived uint64) error {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		_ = link.Close()
		return err
	}
	c.detachLocked(errors.New("replaced by a new link"))
	if peerReceived < c.acked || peerReceived > c.sent {
		err := fmt.Errorf("%w: peer received %d bytes; we sent %d and keep from %d", ErrLost, peerReceived, c.sent, c.acked)
		c.mu.Unlock()
		_ = link.Close()
		c.CloseWithError(err)
		return err
	}
	c.trimLocked(peerReceived)
	c.link, c.wire = link, peerReceived
	c.hear()
	c.cond.Broadcast()
	c.mu.Unlock()
	c.flushLocked()
	return nil
}

func (c *Conn) trimLocked(to uint64) {
	c.kept.drop(int(to - c.acked))
	c.acked = to
	c.cond.Broadcast()
}

// Write keeps p for resending and sends it on the link if there is one.
// It blocks while Bound bytes are unacknowledged; a dead link is no error
// (the bytes go out on the next one), only CloseWithError is.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	total := 0
	for len(p) > 0 {
		c.mu.Lock()
		for c.err == nil && int(c.sent-c.acked) >= c.cfg.Bound {
			c.cond.Wait()
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return total, err
		}
		n := min(len(p), c.cfg.Bound-int(c.sent-c.acked))
		c.kept.add(p[:n])
		c.sent += uint64(n)
		c.mu.Unlock()
		c.lmu.Lock()
		c.flushLocked()
		c.lmu.Unlock()
		p = p[n:]
		total += n
	}
	return total, nil
}

// Filler writes bytes into room it is lent and returns how many it wrote
// at the start of it (the mux's Filler, record.Filler's shape).
type Filler = interface {
	Fill(b []byte) int
}

// minFill is the least room WriteInPlace lends from the last chunk's tail
// when the caller could use more: a smaller tail is left unused for a new
// chunk, so a bulk stream's frames are not cut into slivers (a socket read
// and a frame each) at every chunk's end. It wastes at most this much of
// a chunk.
const minFill = 4 << 10

// WriteInPlace appends what fill writes straight into the kept buffer, so
// the session above (the mux's Stream.Fill, a socket read) puts its bytes
// where they are kept without a buffer of its own and a copy out of it
// (Write): a byte is copied once from the socket and once more into the
// link's frame, where Write took two copies. fill gets room for need to
// most bytes (less where the bound or a chunk ends), is called once,
// without the locks, and must not block; WriteInPlace then sends what it
// wrote as Write does. It returns what was added, and an error only if
// fill was not called (CloseWithError, or need is not 1..MinBound).
func (c *Conn) WriteInPlace(need, most int, fill Filler) (int, error) {
	if need < 1 || need > MinBound || most < need {
		return 0, fmt.Errorf("resume: WriteInPlace of %d..%d bytes: want 1 ≤ need ≤ most, need ≤ %d", need, most, MinBound)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	for c.err == nil && c.cfg.Bound-int(c.sent-c.acked) < need {
		c.cond.Wait()
	}
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, err
	}
	// The room is past every kept byte of the last chunk, which stays
	// while it has room (drop) and is only appended to under wmu, so fill
	// writes it without mu while flushes and acks go on.
	room := c.kept.room(min(need, chunkSize), min(most, minFill, chunkSize))
	room = room[:min(len(room), most, c.cfg.Bound-int(c.sent-c.acked))]
	c.mu.Unlock()
	n := max(0, min(fill.Fill(room), len(room)))
	if n == 0 {
		return 0, nil
	}
	c.mu.Lock()
	if c.err != nil { // closed while filling: nothing is kept any more
		c.mu.Unlock()
		return n, nil
	}
	c.kept.commit(n)
	c.sent += uint64(n)
	c.mu.Unlock()
	c.lmu.Lock()
	c.flushLocked()
	c.lmu.Unlock()
	return n, nil
}

// flushLocked (lmu held) puts the kept bytes not yet on the link on it.
func (c *Conn) flushLocked() {
	c.mu.Lock()
	// An ack may pass wire while a flush is writing: the peer has
	// those bytes, so they are on the link.
	c.kept.recycle()
	link, gen, from, to := c.link, c.gen, max(c.wire, c.acked), c.sent
	var segs [][]byte
	if link != nil && to > from {
		segs = c.kept.slice(int(from-c.acked), int(to-c.acked))
	}
	c.mu.Unlock()
	if len(segs) == 0 {
		return
	}
	var hdr [5]byte
	for _, s := range segs {
		for len(s) > 0 {
			n := min(len(s), MaxData)
			hdr[0] = typeData
			binary.BigEndian.PutUint32(hdr[1:], uint32(n))
			if _, err := link.Write(hdr[:]); err != nil {
				c.fail(gen, err)
				return
			}
			if _, err := link.Write(s[:n]); err != nil {
				c.fail(gen, err)
				return
			}
			s = s[n:]
		}
	}
	c.mu.Lock()
	if c.gen == gen {
		c.wire = to
	}
	c.mu.Unlock()
}

// Read returns the peer's bytes in order, across links; it waits while
// detached.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, _, err := c.read(p, len(p), false)
	return n, err
}

// Lease keeps a piece ReadLent lent until Release; Size is the memory it
// keeps. The same type as record.Lease, which the links lend.
type Lease = interface {
	Release()
	Size() int
}

// lender is a link that lends its opened frames instead of copying them
// out (record.Conn.ReadLent).
type lender interface {
	ReadLent(most int) ([]byte, Lease, error)
}

// ReadLent is Read without a copy where the link lends (a record.Conn):
// up to most of the peer's next bytes, a piece of a DATA frame's body as
// the link lent it, and its Lease, which the caller releases once done
// with the bytes. The piece is counted as received as Read's bytes are,
// so it must be consumed, not given back. On a link that does not lend
// the bytes are read into a buffer of their own (a lease that holds
// nothing).
func (c *Conn) ReadLent(most int) ([]byte, Lease, error) {
	if most <= 0 {
		return nil, nil, nil
	}
	_, b, l, err := c.read(nil, most, true)
	return b, l, err
}

// heapLease is the lease of a piece read into a buffer of its own.
type heapLease struct{}

func (heapLease) Release()  {}
func (heapLease) Size() int { return 0 }

// read is Read (into p) or ReadLent (lend: a piece of up to most bytes
// the link lent).
func (c *Conn) read(p []byte, most int, lend bool) (int, []byte, Lease, error) {
	for {
		c.mu.Lock()
		for c.err == nil && c.link == nil {
			c.cond.Wait()
		}
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, nil, nil, err
		}
		link, gen := c.link, c.gen
		c.mu.Unlock()
		if gen != c.rgen {
			c.rgen, c.rleft = gen, 0 // a new link starts with a frame
		}
		if c.rleft == 0 {
			if err := c.readHeader(link, gen); err != nil {
				c.fail(gen, err)
			}
			continue
		}
		want := min(most, c.rleft)
		var (
			n     int
			err   error
			b     []byte
			lease Lease
		)
		switch l, ok := link.(lender); {
		case !lend:
			n, err = link.Read(p[:want])
		case ok:
			b, lease, err = l.ReadLent(want)
			n = len(b)
		default:
			b = make([]byte, min(want, 16<<10))
			n, err = link.Read(b)
			b, lease = b[:n], heapLease{}
		}
		if n > 0 {
			c.mu.Lock()
			if c.gen != gen {
				// Detached meanwhile: Received was reported without
				// these bytes, so the peer sends them again.
				c.mu.Unlock()
				if lease != nil {
					lease.Release()
				}
				continue
			}
			c.rleft -= n
			c.recv += uint64(n)
			due := c.recv-c.ackSent >= uint64(c.cfg.PeerBound/ackShare) || c.heard.Load()-c.ackAt >= int64(ackEvery)
			c.mu.Unlock()
			if due {
				select {
				case c.kick <- struct{}{}:
				default:
				}
			}
			return n, b, lease, nil
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		c.fail(gen, err)
	}
}

// readHeader reads one frame header and handles an ack whole.
func (c *Conn) readHeader(link net.Conn, gen uint64) error {
	h := c.rhdr[:]
	if _, err := io.ReadFull(link, h[:1]); err != nil {
		return err
	}
	c.hear()
	switch h[0] {
	case typeData:
		if _, err := io.ReadFull(link, h[1:5]); err != nil {
			return err
		}
		n := binary.BigEndian.Uint32(h[1:5])
		if n == 0 || n > MaxData {
			c.CloseWithError(fmt.Errorf("%w: data frame of %d bytes", ErrProtocol, n))
			return nil
		}
		c.rleft = int(n)
	case typeEnd:
		c.CloseWithError(ErrEnded)
	case typeProbe:
		c.probed.Store(true)
		select {
		case c.kick <- struct{}{}:
		default:
		}
	case typeAck:
		if _, err := io.ReadFull(link, h[1:9]); err != nil {
			return err
		}
		v := binary.BigEndian.Uint64(h[1:9])
		c.mu.Lock()
		if c.gen != gen {
			c.mu.Unlock()
			return nil
		}
		if v < c.acked || v > c.sent {
			c.mu.Unlock()
			c.CloseWithError(fmt.Errorf("%w: ack of %d bytes; %d sent, %d acknowledged", ErrProtocol, v, c.sent, c.acked))
			return nil
		}
		c.trimLocked(v)
		c.mu.Unlock()
	default:
		c.CloseWithError(fmt.Errorf("%w: frame type %#x", ErrProtocol, h[0]))
	}
	return nil
}

// ackLoop sends the acks Read asks for and, every Keepalive, one anyway
// and checks that the peer was heard within Timeout.
func (c *Conn) ackLoop() {
	defer c.loop.Done()
	var tick <-chan time.Time
	if c.cfg.Keepalive > 0 {
		t := time.NewTicker(c.cfg.Keepalive)
		defer t.Stop()
		tick = t.C
	}
	for {
		force := false
		select {
		case <-c.done:
			return
		case <-c.kick:
		case <-tick:
			force = true
			c.mu.Lock()
			link, gen := c.link, c.gen
			c.mu.Unlock()
			if link != nil && time.Since(c.heardAt()) > c.cfg.Timeout {
				c.fail(gen, fmt.Errorf("%w for %v", ErrSilent, c.cfg.Timeout))
				continue
			}
		}
		c.sendAck(force || c.probed.Swap(false))
	}
}

func (c *Conn) sendAck(force bool) {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	c.mu.Lock()
	link, gen, recv := c.link, c.gen, c.recv
	// No link: the count goes in the next hello; ackSent stays, so the
	// next ack is not skipped as already sent.
	if link == nil || (!force && recv == c.ackSent) {
		c.mu.Unlock()
		return
	}
	c.ackSent, c.ackAt = recv, c.heard.Load()
	c.mu.Unlock()
	var b [9]byte
	b[0] = typeAck
	binary.BigEndian.PutUint64(b[1:], recv)
	if _, err := link.Write(b[:]); err != nil {
		c.fail(gen, err)
	}
}

// watchLoop runs the watch every Probe/4 on its own, as a flush or an
// ack blocked on a dead path (holding lmu) must not stop it; so a probe
// goes out from its own goroutine too, one at a time.
func (c *Conn) watchLoop() {
	defer c.loop.Done()
	t := time.NewTicker(c.cfg.Probe / 4)
	defer t.Stop()
	w := watch{limit: c.cfg.Probe}
	var probing atomic.Bool
	for {
		select {
		case <-c.done:
			return
		case now := <-t.C:
			c.mu.Lock()
			attached, gen, moved, unacked := c.link != nil, c.gen, c.sent+c.recv, c.sent > c.acked
			c.mu.Unlock()
			probe, stall := w.step(now, c.heardAt(), attached, gen, moved, unacked)
			if probe && probing.CompareAndSwap(false, true) {
				go func() {
					c.sendFrame([]byte{typeProbe})
					probing.Store(false)
				}()
			}
			if stall && c.cfg.OnStall != nil {
				go c.cfg.OnStall()
			}
		}
	}
}

// sendFrame writes a probe on the current link, if any.
func (c *Conn) sendFrame(b []byte) {
	c.lmu.Lock()
	defer c.lmu.Unlock()
	c.mu.Lock()
	link, gen := c.link, c.gen
	c.mu.Unlock()
	if link == nil {
		return
	}
	if _, err := link.Write(b); err != nil {
		c.fail(gen, err)
	}
}

// End ends the session and tells the peer so (a client that shuts down),
// if the link takes the word within endWait: the peer ends its side at
// once (ErrEnded) instead of waiting for a resumption.
func (c *Conn) End() {
	deadline := time.Now().Add(endWait)
	if c.lockLinkBy(deadline) {
		c.mu.Lock()
		link := c.link
		if link != nil {
			c.link = nil // ours to close: flushed, not cut
			c.gen++
		}
		c.mu.Unlock()
		if link != nil {
			_ = link.SetWriteDeadline(deadline)
			_, _ = link.Write([]byte{typeEnd})
			_ = link.Close() // flushes until the deadline
		}
		c.lmu.Unlock()
	}
	c.CloseWithError(ErrClosed)
}

// endWait is what End gives the word to the peer, the wait for the link
// and the write together.
const endWait = time.Second

// endWaits, if set, runs when End finds the link busy and waits (tests).
var endWaits func()

// lockLinkBy takes lmu, or gives up at deadline: a flush or an ack holds
// it for a moment (End must wait for those, or the peer is never told), a
// write stuck on a dead path until the link is cut. It polls, as
// sync.Mutex has no timed lock and End runs once a session.
func (c *Conn) lockLinkBy(deadline time.Time) bool {
	if c.lmu.TryLock() {
		return true
	}
	if endWaits != nil {
		endWaits()
	}
	for !c.lmu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// Close ends the session: CloseWithError(ErrClosed).
func (c *Conn) Close() error {
	c.CloseWithError(ErrClosed)
	return nil
}

// CloseWithError ends the session: the link (if any) is closed, what is
// kept is freed, and Read and Write return err from now on. The first
// error stays.
func (c *Conn) CloseWithError(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	if c.link != nil {
		closeLink(c.link)
		c.link = nil
		c.gen++
	}
	c.kept = chunks{}
	c.acked = c.sent
	close(c.done)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// Err is the error the session ended with, nil while it runs.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Done is closed when the session ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// chunks holds the kept bytes in chunks of up to chunkSize, so that what
// is kept costs what is unacknowledged, rounded up to a chunk, and an ack
// frees whole chunks without copying.
type chunks struct {
	bufs [][]byte
	off  int                // into bufs[0]
	free []*[chunkSize]byte // acknowledged, for the pool at the next flush
}

// recycle gives the freed chunks to the pool; only with lmu held and no
// flush running.
func (k *chunks) recycle() {
	for i, b := range k.free {
		chunkPool.Put(b)
		k.free[i] = nil
	}
	k.free = k.free[:0]
}

const chunkSize = 64 << 10

// chunkPool recycles chunks an ack freed. A flush may still be inside
// its link Write over a chunk whose bytes the peer already acknowledged,
// so a freed chunk waits in chunks.free until the next flush starts
// (flushes take turns under lmu): then no one reads it.
var chunkPool = sync.Pool{New: func() any { return new([chunkSize]byte) }}

func (k *chunks) add(p []byte) {
	for len(p) > 0 {
		if n := len(k.bufs); n == 0 || len(k.bufs[n-1]) == cap(k.bufs[n-1]) {
			k.bufs = append(k.bufs, chunkPool.Get().(*[chunkSize]byte)[:0:chunkSize])
		}
		last := &k.bufs[len(k.bufs)-1]
		m := min(len(p), cap(*last)-len(*last))
		*last = append(*last, p[:m]...)
		p = p[m:]
	}
}

// room returns the last chunk's free space if it has at least want bytes
// (or need, if that is all a chunk has), else a new chunk's; commit keeps
// the first n bytes of it.
func (k *chunks) room(need, want int) []byte {
	if n := len(k.bufs); n > 0 {
		last := k.bufs[n-1]
		if free := cap(last) - len(last); free >= need && free >= want {
			return last[len(last):cap(last)]
		}
	}
	k.bufs = append(k.bufs, chunkPool.Get().(*[chunkSize]byte)[:0:chunkSize])
	return k.bufs[len(k.bufs)-1][:chunkSize]
}

func (k *chunks) commit(n int) {
	last := &k.bufs[len(k.bufs)-1]
	*last = (*last)[:len(*last)+n]
}

func (k *chunks) drop(n int) {
	for n > 0 && len(k.bufs) > 0 {
		avail := len(k.bufs[0]) - k.off
		if n < avail {
			k.off += n
			return
		}
		if len(k.bufs) == 1 && len(k.bufs[0]) < cap(k.bufs[0]) {
			// The last chunk, with room: it stays the one written
			// next (WriteInPlace may be filling its room right now).
			k.off = len(k.bufs[0])
			return
		}
		n -= avail
		if cap(k.bufs[0]) == chunkSize { // one of the pool's
			k.free = append(k.free, (*[chunkSize]byte)(k.bufs[0][:chunkSize]))
		}
		k.bufs[0] = nil
		k.bufs = k.bufs[1:]
		k.off = 0
	}
}

// slice returns the kept bytes [from, to) as sub-slices; later adds
// write only past them, so they stay valid without the lock.
func (k *chunks) slice(from, to int) [][]byte {
	var out [][]byte
	off := k.off
	for _, b := range k.bufs {
		b = b[off:]
		off = 0
		if from >= len(b) {
			from -= len(b)
			to -= len(b)
			continue
		}
		end := min(to, len(b))
		out = append(out, b[from:end:end])
		to -= end
		from = 0
		if to <= 0 {
			break
		}
	}
	return out
}

// watch is the stall detector (Config.Probe), a pure state machine
// stepped by watchLoop's ticks so that tests drive it with their own
// clock. The link is "in use" when bytes wait for the peer's ack, or bytes
// moved (written or read) since the last frame heard or within limit
// before it (a download: the peer owes nothing); silence of limit while
// in use draws a probe; a probe unanswered (no frame heard since) for
// limit plus twice the last answer's delay (answered before a stall, at
// most 2 × limit: an outage must not teach it patience) is a stall, reported once
// until something is heard again. A new link starts afresh.
type watch struct {
	limit   time.Duration
	rtt     time.Duration // the last probe's answer took this long
	gen     uint64
	moved   uint64    // bytes moved at the last step
	busy    time.Time // when bytes last moved
	probeAt time.Time // outstanding probe, zero if none
	stalled bool
}

func (w *watch) step(now, heard time.Time, attached bool, gen, moved uint64, unacked bool) (probe, stall bool) {
	if !attached || gen != w.gen {
		*w = watch{limit: w.limit, rtt: w.rtt, gen: gen, moved: moved}
		return false, false
	}
	if moved != w.moved {
		w.moved, w.busy = moved, now
	}
	if !w.probeAt.IsZero() && heard.After(w.probeAt) {
		if !w.stalled { // an answer after a stall is the path's return, not its delay
			w.rtt = min(heard.Sub(w.probeAt), 2*w.limit)
		}
		w.probeAt, w.stalled = time.Time{}, false
	}
	silent := now.Sub(heard) >= w.limit
	switch {
	case w.probeAt.IsZero():
		if silent && (unacked || !w.busy.IsZero() && w.busy.After(heard.Add(-w.limit))) {
			w.probeAt = now
			return true, false
		}
	case !w.stalled && now.Sub(w.probeAt) >= w.limit+2*w.rtt:
		w.stalled = true
		return false, true
	}
	return false, false
}
