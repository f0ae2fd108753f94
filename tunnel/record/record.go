// Package record is offload's record layer: it turns a byte stream (yamux)
// into self-contained encrypted frames on a TCP link and back.
//
// Per direction, with the keys (K_enc, K_mac, S_iv) of the frame's epoch
// (docs/protocol.md, section 2, is the normative text):
//
//	frame = hdr:u32be | ciphertext[len] | tag[16]
//	hdr   = new:1 | len:31          new: first frame of a new epoch
//	tag   = HMAC-SHA256(K_mac, seq:u64be | hdr:u32be | ciphertext)[:16]
//
// for the *-hmac-sha256 suites; the gmac, poly1305 and nhpoly1305 suites
// tag the same frame their own way (MAC, docs/macs.md), with the same layout.
//
// Epoch 0's keys are the handshake's; a frame with new = 1 is sealed with
// the next epoch's, HKDF-SHA256(K_enc | K_mac | S_iv of the epoch before,
// info "offload record rekey <suite> <epoch>"). The sender chooses when
// (rekey.go); len ≤ HardMaxFrame keeps the top bit free.
//
// seq is implicit: 0 for the first frame of each epoch, +1 per frame, never
// sent. CTR frames start at counter block S_iv + seq·2^32 (mod 2^128); CBC
// frames use IV = AES_K_enc(S_iv XOR seq) and PKCS#7 padding, checked after
// the tag. Every frame carries its own IV, so each can be sealed or opened
// by any engine, several at once, and the result is sent or delivered in
// seq order.
//
// Conn is a net.Conn. Any failure (bad tag, bad length, truncation, engine
// argument error, I/O error, a peer over the key-use limit) closes the
// link; Read delivers the frames verified before the failure and then
// returns the error, never a byte of a frame that failed. A clean io.EOF from Read means the peer
// closed the TCP connection exactly between two frames; the record layer
// has no close message, so whether that ended a complete transfer is for the
// protocol above (yamux's FIN and GoAway) to decide.
package record

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Frame sizes and limits.
const (
	// HeaderSize is the length prefix of a frame.
	HeaderSize = 4
	// TagSize is the length of a frame's tag.
	TagSize = suite.TagSize
	// Overhead is what a frame adds to its ciphertext.
	Overhead = HeaderSize + TagSize

	// DefaultMaxFrame is the largest ciphertext per frame unless
	// Options.MaxFrame says otherwise. Bulk data goes in frames this large
	// (idle links send small ones): 64 KiB is where a router's crypto
	// device is far ahead of its CPU, and per-frame costs (hand-offs,
	// syscalls, tag finalisation) are a quarter of 16 KiB frames'. The
	// pipeline is bounded in bytes (pipelineBytes), not frames.
	DefaultMaxFrame = 64 << 10
	// HardMaxFrame caps Options.MaxFrame.
	HardMaxFrame = 1 << 20
	// MinMaxFrame is the smallest Options.MaxFrame, the one floor of
	// every max_frame (a config's, a tunnel's, calibrate's): below 1 KiB
	// a frame spends more on its header and tag than it carries, and a
	// profile calibrated below it would fit no link.
	MinMaxFrame = 1 << 10

	// MaxFrames is the key-use limit: the keys of one epoch (rekey.go)
	// seal (and open) at most this many frames. A sender moves to the next
	// epoch long before (RekeyFrames); a peer that sends more in one epoch
	// fails the link with ErrKeyExhausted. It is half of the 2^32 frames
	// the design allows a key, far below where seq (u64) could wrap or CTR
	// counter ranges (2^32 blocks apart) could meet.
	MaxFrames = 1 << 31

	// DefaultWorkers is the number of sealing and of opening workers.
	DefaultWorkers = 2
	// MaxWorkers caps Options.Workers.
	MaxWorkers = 16
	// MaxEngines caps len(Options.Engines).
	MaxEngines = 8
)

// closeFlushTimeout bounds how long Close waits for buffered data to be
// sent when no write deadline is set.
const closeFlushTimeout = 5 * time.Second

// Policy picks the engine for a frame: an index into Options.Engines.
// Out-of-range answers mean 0 (software). Pick is called by every worker
// concurrently and must be fast (it runs once per frame).
type Policy interface {
	Pick(size int, dir engine.Direction) int
}

// Tracker is what a Policy implements to see the load on each engine: the
// record layer calls Begin just before it hands a frame of size bytes in
// direction dir to engine idx (idx > 0) and End when the engine has
// returned it, whatever the outcome. A policy that spreads frames between
// a device and the CPU (the selector's hybrid) needs it to know how many
// frames the device holds and how much work it was given. Both are called
// by every worker concurrently and must be fast.
type Tracker interface {
	Begin(idx, size int, dir engine.Direction)
	End(idx, size int, dir engine.Direction)
}

// HandedCounter is what a Policy implements (the selector's hybrid) to
// count the frames of a device's band it gave a CPU engine instead; the
// record layer never asks, the status and bench's report do.
type HandedCounter interface{ HandedToCPU() uint64 }

// SoftwareOnly is the default Policy: every frame goes to Engines[0].
type SoftwareOnly struct{}

// Pick implements Policy.
func (SoftwareOnly) Pick(int, engine.Direction) int { return 0 }

// Options configure a Conn. The zero value is usable.
type Options struct {
	// MaxFrame is the largest ciphertext of a frame this end accepts,
	// and sends unless Keys.PeerMaxFrame is smaller. 0 means
	// DefaultMaxFrame; it must be a multiple of 16 between MinMaxFrame
	// and HardMaxFrame.
	MaxFrame int
	// Workers is how many frames are sealed, and how many opened, at
	// once. 0 means DefaultWorkers.
	Workers int
	// WriteBuffer is how many plaintext bytes Write may buffer before it
	// blocks. 0 means twice the frames this end sends; at least one.
	WriteBuffer int
	// Engines are the engines a Policy can pick from. Engines[0] must be
	// the software engine: it redoes every frame another engine failed.
	// nil means just engine.Software{}.
	Engines []engine.Engine
	// Policy picks an engine per frame. nil means SoftwareOnly.
	Policy Policy
	// Logger gets link failures (debug) and engine fallbacks (warn, rate
	// limited). nil means none.
	Logger *zap.Logger
	// Stats receives the counters; share one Stats between Conns to add
	// them up. nil means a new Stats (see Conn.Stats).
	Stats *Stats
	// Verify re-checks engine output against software (verify.go); nil
	// means no checks.
	Verify *Verifier
	// Stall takes over frames whose engine request hangs (stall.go); nil
	// means none are.
	Stall *StallWatch
	// Traffic counts this link's plaintext bytes (traffic.go); nil means
	// a new one (see Conn.Traffic).
	Traffic *Traffic

	// RekeyFrames, RekeyBytes and RekeyInterval say when this end moves
	// its sending keys to the next epoch (rekey.go): after that many
	// frames or plaintext bytes under one epoch's keys, or that long after
	// the epoch began, whichever comes first. The peer follows whatever
	// this end chooses, so the two ends need not agree. 0 means
	// DefaultRekeyFrames, DefaultRekeyBytes, DefaultRekeyInterval;
	// RekeyFrames is at most MaxFrames.
	RekeyFrames   uint64
	RekeyBytes    uint64
	RekeyInterval time.Duration

	// DataPath chooses how frames move between goroutines (writer.go,
	// reader.go): the zero value, DataPathAuto, is the pipeline.
	DataPath DataPath

	// maxFrames overrides MaxFrames (tests).
	maxFrames uint64
}

// DataPath is how a Conn's frames are sealed, opened and moved.
type DataPath uint8

const (
	// DataPathAuto is DataPathPipeline, on every CPU count: on the
	// router anchor (1 CPU, docs/lab/router-anchor.md, 2026-12-02 inline)
	// the inline path cost more per byte than the pipeline (0.30x
	// WireGuard against 0.37x): its goroutines run frame after frame
	// past the runtime's 10 ms slice and are preempted by signal, and
	// its device requests block holding the P. On two routers, each end
	// on its own CPU, it was dearer too (2026-12-07: 0.95x and 0.84x the
	// pipeline's bytes per CPU second, afalg and cryptodev;
	// docs/lab/performance.md). Until that is fixed the inline path is
	// opt-in.
	DataPathAuto DataPath = iota
	// DataPathPipeline seals and opens in Workers worker goroutines
	// between a cutter and a sender, and a reader and Read: frames are
	// sealed and opened in parallel on several CPUs, and each frame
	// changes goroutine three times on the way.
	DataPathPipeline
	// DataPathInline seals in the goroutine that cuts and writes, and
	// opens in the goroutine that reads the link: one goroutine per
	// direction, two hand-offs per frame fewer on send and one fewer on
	// receive. On one CPU the pipeline's parallelism buys nothing and
	// each hand-off is a scheduling round.
	DataPathInline
)

func (d DataPath) String() string {
	switch d {
	case DataPathAuto:
		return "auto"
	case DataPathPipeline:
		return "pipeline"
	case DataPathInline:
		return "inline"
	}
	return fmt.Sprintf("DataPath(%d)", uint8(d))
}

// Conn is an encrypted link. It is a net.Conn: Read, Write, the deadline
// setters and Close may be called concurrently. Deadlines apply to the
// calls, not to the underlying connection, which the Conn's goroutines own.
type Conn struct {
	conn     net.Conn
	suite    suite.Suite
	send     chain // the cutter's
	recv     chain // the reader goroutine's
	opt      Options
	maxFrame int // the largest frame accepted (Options.MaxFrame)
	// sendFrame is the largest frame sent: maxFrame, or the peer's
	// Keys.PeerMaxFrame if smaller.
	sendFrame int
	maxPlain  int // plaintext per sealed frame
	limit     uint64
	stats     *Stats
	traffic   *Traffic  // this link's bytes
	epochs    epochs    // this link's rekeys
	tracker   Tracker   // opt.Policy, if it is one; else nil
	dog       *watchdog // opt.Stall's, with engines to watch; else nil
	log       *zap.Logger
	warn      rateLimit

	errMu       sync.Mutex
	err         error         // first link error; set once
	dead        chan struct{} // closed when err is set
	localClosed chan struct{} // closed by Close
	quit        chan struct{} // closed when the goroutines must stop
	stopOnce    sync.Once
	closeOnce   sync.Once
	wg          sync.WaitGroup

	inline bool // DataPathInline, as New resolved it

	w writer
	r reader
}

var _ net.Conn = (*Conn)(nil)

// New starts a record layer on conn, which it owns from now on (Close
// closes it). keys are this end's keys for s; New copies them, so the
// caller may Wipe its copy.
func New(conn net.Conn, keys Keys, s suite.Suite, opt Options) (*Conn, error) {
	if err := keys.Send.Check(s); err != nil {
		return nil, fmt.Errorf("send keys: %w", err)
	}
	if err := keys.Recv.Check(s); err != nil {
		return nil, fmt.Errorf("receive keys: %w", err)
	}
	if opt.MaxFrame == 0 {
		opt.MaxFrame = DefaultMaxFrame
	}
	if err := CheckMaxFrame(opt.MaxFrame); err != nil {
		return nil, fmt.Errorf("record: MaxFrame: %w", err)
	}
	sendFrame := opt.MaxFrame
	if p := keys.PeerMaxFrame; p != 0 {
		if err := CheckMaxFrame(p); err != nil {
			return nil, fmt.Errorf("record: the peer's MaxFrame: %w", err)
		}
		sendFrame = min(sendFrame, p)
	}
	if opt.Workers == 0 {
		opt.Workers = DefaultWorkers
	}
	if opt.Workers < 1 || opt.Workers > MaxWorkers {
		return nil, fmt.Errorf("record: Workers %d: want 1..%d", opt.Workers, MaxWorkers)
	}
	if opt.WriteBuffer == 0 {
		opt.WriteBuffer = 2 * sendFrame
	}
	if opt.WriteBuffer < sendFrame {
		return nil, fmt.Errorf("record: WriteBuffer %d is less than a frame sent, %d", opt.WriteBuffer, sendFrame)
	}
	if opt.Engines == nil {
		opt.Engines = []engine.Engine{engine.Software{}}
	}
	if len(opt.Engines) == 0 || len(opt.Engines) > MaxEngines {
		return nil, fmt.Errorf("record: %d engines: want 1..%d", len(opt.Engines), MaxEngines)
	}
	if opt.Policy == nil {
		opt.Policy = SoftwareOnly{}
	}
	if opt.Stats == nil {
		opt.Stats = new(Stats)
	}
	if opt.Traffic == nil {
		opt.Traffic = new(Traffic)
	}
	if opt.RekeyFrames == 0 {
		opt.RekeyFrames = DefaultRekeyFrames
	}
	if opt.RekeyFrames > MaxFrames {
		return nil, fmt.Errorf("record: RekeyFrames %d: want at most MaxFrames (%d)", opt.RekeyFrames, uint64(MaxFrames))
	}
	if opt.RekeyBytes == 0 {
		opt.RekeyBytes = DefaultRekeyBytes
	}
	if opt.RekeyInterval == 0 {
		opt.RekeyInterval = DefaultRekeyInterval
	}
	if opt.DataPath > DataPathInline {
		return nil, fmt.Errorf("record: unknown %v", opt.DataPath)
	}
	if opt.RekeyInterval < 0 {
		return nil, fmt.Errorf("record: RekeyInterval %v is negative", opt.RekeyInterval)
	}
	log := opt.Logger
	if log == nil {
		log = zap.NewNop()
	}
	c := &Conn{
		conn:        conn,
		suite:       s,
		opt:         opt,
		maxFrame:    opt.MaxFrame,
		sendFrame:   sendFrame,
		maxPlain:    sendFrame,
		limit:       MaxFrames,
		stats:       opt.Stats,
		traffic:     opt.Traffic,
		log:         log.Named("record"),
		warn:        rateLimit{every: 10 * time.Second},
		dead:        make(chan struct{}),
		localClosed: make(chan struct{}),
		quit:        make(chan struct{}),
	}
	if s.Cipher.Mode == engine.CBC {
		c.maxPlain = sendFrame - 1 // PKCS#7 adds 1..16 bytes
	}
	if opt.maxFrames != 0 {
		c.limit = opt.maxFrames
	}
	c.inline = opt.DataPath == DataPathInline
	c.tracker, _ = opt.Policy.(Tracker)
	if opt.Stall != nil && len(opt.Engines) > 1 {
		c.dog = &watchdog{s: opt.Stall, done: make(chan struct{})}
		c.dog.tick.Store(1)
	}
	c.send.init(c, engine.Encrypt, keys.Send.clone())
	c.recv.init(c, engine.Decrypt, keys.Recv.clone())
	c.w.init(c)
	c.r.init(c)
	if c.dog != nil {
		c.dog.start(c)
	}
	return c, nil
}

// CheckMaxFrame is the rule for a MaxFrame, the one config, tunnel,
// calibrate (selector) and New all apply: a multiple of 16 (CBC frames
// are whole blocks; the frame buffers' size classes assume it) from
// MinMaxFrame to HardMaxFrame.
func CheckMaxFrame(n int) error {
	if n < MinMaxFrame || n > HardMaxFrame || n%engine.BlockSize != 0 {
		return fmt.Errorf("%d bytes: want a multiple of %d from %d to %d", n, engine.BlockSize, MinMaxFrame, HardMaxFrame)
	}
	return nil
}

// Stats returns the counters this Conn adds to.
func (c *Conn) Stats() *Stats { return c.stats }

// DataPath returns the data path New chose: DataPathInline or
// DataPathPipeline.
func (c *Conn) DataPath() DataPath {
	if c.inline {
		return DataPathInline
	}
	return DataPathPipeline
}

// Suite returns the suite the Conn was made for.
func (c *Conn) Suite() suite.Suite { return c.suite }

// SendFrame returns the largest frame this end sends: Options.MaxFrame,
// or Keys.PeerMaxFrame if that is smaller.
func (c *Conn) SendFrame() int { return c.sendFrame }

// Err returns the error that ended the link, or nil while it is up. It is
// the first failure detected, which may belong to a later frame than the
// one Read reports: Read returns the failure of the first bad frame in
// stream order.
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// setErr records the link's first error and wakes every blocked call.
func (c *Conn) setErr(err error) bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err != nil {
		return false
	}
	c.err = err
	close(c.dead)
	return true
}

// fail ends the link with err: the first error wins, the connection is
// closed and the goroutines stop. It does not wait for them (they may be
// the caller); Close does.
func (c *Conn) fail(err error) {
	if c.setErr(err) {
		c.log.Debug("link failed", zap.Error(err), zap.Stringer("remote", addr{c.conn.RemoteAddr()}))
	}
	c.stop()
}

func (c *Conn) stop() {
	c.stopOnce.Do(func() {
		_ = c.conn.Close()
		close(c.quit)
	})
}

// Close flushes what Write has buffered (until the write deadline, or at
// most a few seconds), closes the connection and waits for the Conn's
// goroutines. Pending and later Reads and Writes return ErrClosed.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() { first = true })
	if !first {
		return ErrClosed
	}
	c.setErr(ErrClosed)
	close(c.localClosed)

	c.w.beginClose()
	timer := time.NewTimer(closeFlushTimeout)
	defer timer.Stop()
	wdl := c.w.deadline.wait()
	// Read must stay the only consumer of the queue while it runs: a
	// frame taken here from under a Read still delivering would be a hole
	// in what it returns. A Read in progress ends soon (localClosed and
	// dead are closed), and any after it returns ErrClosed.
	c.r.rmu.Lock()
flush:
	for {
		select {
		case <-c.w.flushed:
			break flush
		case <-c.quit:
			break flush
		case <-wdl:
			break flush
		case <-timer.C:
			break flush
		case f := <-c.r.queue:
			// Keep reading so a peer blocked on writing to us keeps
			// reading what we flush.
			c.r.release(f)
		}
	}
	c.r.rmu.Unlock()
	c.stop()
	c.wg.Wait()
	c.w.drain()
	c.r.drain()
	return nil
}

// LocalAddr implements net.Conn.
func (c *Conn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// RemoteAddr implements net.Conn.
func (c *Conn) RemoteAddr() net.Addr { return c.conn.RemoteAddr() }

// SetDeadline implements net.Conn.
func (c *Conn) SetDeadline(t time.Time) error {
	c.r.deadline.set(t)
	c.w.deadline.set(t)
	return nil
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error { c.r.deadline.set(t); return nil }

// SetWriteDeadline implements net.Conn.
func (c *Conn) SetWriteDeadline(t time.Time) error { c.w.deadline.set(t); return nil }

// linkErr is the error calls return once the link is down.
func (c *Conn) linkErr() error {
	if err := c.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// addr prints a possibly nil net.Addr.
type addr struct{ a net.Addr }

func (a addr) String() string {
	if a.a == nil {
		return "none"
	}
	return a.a.String()
}

// deadline is a resettable deadline for blocking calls, as net.Pipe has:
// wait returns a channel that is closed once the deadline has passed.
type deadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	passed chan struct{}
}

func (d *deadline) init() { d.passed = make(chan struct{}) }

func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.passed // the timer fired: wait until its func closed passed
	}
	d.timer = nil
	closed := isClosed(d.passed)
	if t.IsZero() {
		if closed {
			d.passed = make(chan struct{})
		}
		return
	}
	if dur := time.Until(t); dur > 0 {
		if closed {
			d.passed = make(chan struct{})
		}
		ch := d.passed
		d.timer = time.AfterFunc(dur, func() { close(ch) })
		return
	}
	if !closed {
		close(d.passed)
	}
}

func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.passed
}

func (d *deadline) expired() bool { return isClosed(d.wait()) }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errTimeout is what a call returns when its deadline passed: a net.Error
// with Timeout() true, as net.Conn requires.
var errTimeout = os.ErrDeadlineExceeded

// rateLimit allows one event per interval.
type rateLimit struct {
	every time.Duration
	last  atomic.Int64
}

func (r *rateLimit) allow() bool {
	now := int64(time.Since(limitStart)) + 1 // never 0, which is "none yet"
	last := r.last.Load()
	if last != 0 && now-last < int64(r.every) {
		return false
	}
	return r.last.CompareAndSwap(last, now)
}

// limitStart anchors rate limits to the monotonic clock: a wall clock
// stepped back (a guest's clock corrected, a router's first NTP answer)
// would otherwise hold every log line back for the length of the step.
var limitStart = time.Now()
