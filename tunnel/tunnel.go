// Package tunnel carries many TCP connections between two hosts over one
// authenticated, encrypted TCP link: the offload server and client.
//
//	app ──TCP──> Client forward ──stream──┐                       ┌──stream──> Server ──TCP──> target
//	app ──TCP──> Client forward ──stream──┼─> yamux ─> record ─TCP─> record ─> yamux ─┤  (services only)
//
// A link is a TCP connection on which handshake.Client/Server ran, then a
// record.Conn (the encrypted frames) and on top a session of the yamux
// wire protocol (tunnel/mux, our implementation). Every forwarded
// connection is one stream. A stream starts with a request
// naming a service and the server's status answer (tunnel/stream); after that
// each direction carries chunks ending with an explicit end marker, so that
// a stream that stops without its end marker (link died, peer aborted) is
// an error, never a clean EOF (tunnel/stream). docs/tunnel.md explains the
// choices.
package tunnel

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/mux"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Defaults for the zero values of Options, and the limits the tunnel
// checks. config takes them from here (it never copies them), so a
// setting left out of a config file means what the zero value means here.
const (
	// DefaultYamuxWindow is the per-stream receive window. yamux's own
	// default (256 KiB) caps one stream at window/RTT (hashicorp/yamux#24),
	// so offload uses a larger one.
	DefaultYamuxWindow            = 1 << 20
	DefaultDialTimeout            = 10 * time.Second
	DefaultHandshakeTimeout       = 10 * time.Second
	DefaultMaxStreams             = 1024
	DefaultStatusInterval         = time.Minute
	DefaultMaxHandshakes          = 64 // unauthenticated connections in their handshake
	DefaultMaxHandshakesPerSource = 8  // of them from one IPv4 address or IPv6 /64
	DefaultMaxLinks               = 4  // with one client; 2 per client with Clients
	DefaultMaxLinksPerClient      = 2  // one, and one while it redials before the server noticed
	// DefaultLinkBuffer is the budget of one link's stream receive
	// buffers, in bytes: a stream whose data would take the link past it
	// is reset, and credit beyond a stream's initial window is granted
	// only within half of it (tunnel/mux, docs/tunnel.md). 16 MiB: with
	// the 8 MiB a running end takes, one link fits the 24 MiB a 64 MB
	// router can spare (docs/budgets.md).
	DefaultLinkBuffer = 16 << 20
	DefaultRedialMin  = 500 * time.Millisecond
	DefaultRedialMax  = 30 * time.Second
	// DefaultLinkWait is how long a client's local connection that finds
	// no link waits for a dial under way (linkwait.go).
	DefaultLinkWait = 2 * time.Second

	// MinYamuxWindow is yamux's own initial window; it refuses less.
	// It is also what a peer may send on a new stream before it is
	// accepted, so a link buffer holds at least one stream's window and
	// this much.
	MinYamuxWindow = 256 << 10
)

// ErrConfig is wrapped by the errors NewServer and NewClient return for
// options that can not work. Fix the configuration.
var ErrConfig = errors.New("tunnel: bad configuration")

// Options are what the server and the client share.
type Options struct {
	// Suite is the cipher suite; both ends must use the same one.
	Suite suite.Suite
	// PSK is the pre-shared key (handshake.PSKSize bytes).
	PSK []byte
	// Engines and Policy go to record.Options: selector.Engines makes them
	// from an engine spec. nil means software only.
	Engines []engine.Engine
	Policy  record.Policy
	// Stats receives the record layer's counters of every link. A policy
	// that watches them (selector's, made with EngineOptions.Stats) must
	// get this same Stats: cmd/offload makes both in one place. nil means
	// a new one.
	Stats *record.Stats
	// MaxFrame is record.Options.MaxFrame, the largest ciphertext of a
	// frame (0: the record layer's default).
	MaxFrame int
	// YamuxWindow is the per-stream receive window (MaxStreamWindowSize).
	YamuxWindow int
	// Keepalive is the session's keepalive interval; 0 disables keepalives,
	// else at least MinKeepalive.
	Keepalive time.Duration
	// RekeyInterval is the longest this end sends under one epoch's keys
	// (0: record.DefaultRekeyInterval).
	RekeyInterval time.Duration
	// DialTimeout bounds a dial: a target on the server, the server on
	// the client.
	DialTimeout time.Duration
	// LinkWait is how long a client's local connection that finds no
	// link waits for a dial under way or due (linkwait.go); it is refused
	// at once when the dial fails or none is due. 0 means
	// DefaultLinkWait, negative refuses at once.
	LinkWait time.Duration
	// HandshakeTimeout bounds a handshake.
	HandshakeTimeout time.Duration
	// MaxStreams caps concurrent streams (server: per link; client: all
	// forwarded connections). Excess connections are refused at once,
	// with the reason.
	MaxStreams int
	// LinkBuffer is the most one link's stream receive buffers may hold,
	// in bytes (0: DefaultLinkBuffer): a stream whose data would take the
	// link past it is reset (tunnel/mux). docs/tunnel.md has the
	// arithmetic.
	LinkBuffer int
	// DrainTimeout is how long a shutdown waits for open streams before
	// it closes them (with an error); 0 closes them at once.
	DrainTimeout time.Duration
	// StatusInterval is how often a status line is logged at info; 0
	// means DefaultStatusInterval, negative disables it.
	StatusInterval time.Duration
	// Logger gets the tunnel's events; nil means none.
	Logger *zap.Logger
	// EngineCheckInterval is how often every engine runs its known-answer
	// test after the one at start (enginecheck.go); 0 means
	// DefaultEngineCheckInterval, negative only at start.
	EngineCheckInterval time.Duration
	// Verify re-checks one in Verify frames an engine other than software
	// sealed or opened against software (record.Verifier); 0 is off.
	Verify int

	// verifier is made from Verify by NewServer and NewClient, stall
	// likewise (with engines besides software); every link's record layer
	// shares them.
	verifier *record.Verifier
	stall    *record.StallWatch

	// rekeyFrames overrides record.DefaultRekeyFrames (tests); the record
	// layer's rekey defaults apply otherwise.
	rekeyFrames uint64
	// engineCheckTimeout overrides DefaultEngineCheckTimeout (tests).
	engineCheckTimeout time.Duration
	// engineStallTimeout overrides DefaultEngineStallTimeout (tests).
	engineStallTimeout time.Duration
}

// Check reports whether NewServer or NewClient would accept o, without
// changing o or starting anything: what offload validate runs, so that a
// config that validates also starts.
func (o Options) Check() error { return o.setDefaults() }

func (o *Options) setDefaults() error {
	// A server with Clients has no PSK of its own (newServerState
	// checks the keys it has); a client needs one (NewClient).
	if o.PSK != nil && len(o.PSK) != handshake.PSKSize {
		return fmt.Errorf("%w: pre-shared key is %d bytes, want %d", ErrConfig, len(o.PSK), handshake.PSKSize)
	}
	if !o.Suite.Cipher.Valid() {
		return fmt.Errorf("%w: no cipher suite", ErrConfig)
	}
	// 0 goes to the record layer as it is: its default is its own.
	if err := record.CheckMaxFrame(cmp.Or(o.MaxFrame, record.DefaultMaxFrame)); err != nil {
		return fmt.Errorf("%w: max frame %w", ErrConfig, err)
	}
	if o.YamuxWindow == 0 {
		o.YamuxWindow = DefaultYamuxWindow
	}
	if o.YamuxWindow < MinYamuxWindow {
		return fmt.Errorf("%w: yamux window %d is less than yamux's minimum %d", ErrConfig, o.YamuxWindow, MinYamuxWindow)
	}
	if o.Keepalive > 0 && o.Keepalive < MinKeepalive {
		return fmt.Errorf("%w: keepalive %v: want 0 (off) or at least %v (a peer cuts a link that pings more often than %d times a second)",
			ErrConfig, o.Keepalive, MinKeepalive, mux.PingRate)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.LinkWait == 0 {
		o.LinkWait = DefaultLinkWait
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.LinkBuffer == 0 {
		o.LinkBuffer = DefaultLinkBuffer
	}
	if o.LinkBuffer < o.YamuxWindow+MinYamuxWindow {
		return fmt.Errorf("%w: link buffer %d holds no stream: want at least yamux window + %d (%d)",
			ErrConfig, o.LinkBuffer, MinYamuxWindow, o.YamuxWindow+MinYamuxWindow)
	}
	if o.DrainTimeout < 0 {
		o.DrainTimeout = 0
	}
	if o.StatusInterval == 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	if o.EngineCheckInterval == 0 {
		o.EngineCheckInterval = DefaultEngineCheckInterval
	}
	if o.Verify < 0 {
		return fmt.Errorf("%w: verify %d: want 0 (off) or N, to check one in N frames", ErrConfig, o.Verify)
	}
	if o.Engines == nil {
		o.Engines = []engine.Engine{engine.Software{}}
	}
	if o.Policy == nil {
		o.Policy = record.SoftwareOnly{}
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return nil
}

func (o *Options) handshakeConfig() handshake.Config {
	return handshake.Config{Suite: o.Suite, PSK: o.PSK, Timeout: o.HandshakeTimeout, Logger: o.Logger}
}

func (o *Options) recordOptions(stats *record.Stats) record.Options {
	return record.Options{
		MaxFrame: o.MaxFrame,
		Engines:  o.Engines,
		Policy:   o.Policy,
		Logger:   o.Logger,
		Stats:    stats,
		Verify:   o.verifier,
		Stall:    o.stall,

		RekeyFrames:   o.rekeyFrames,
		RekeyInterval: o.RekeyInterval,
	}
}

// aLongTimeAgo is a deadline in the past, to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)
