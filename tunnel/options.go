package tunnel

import (
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

// Options are what the server and the client share. Start from
// DefaultOptions and change what you need: every field means what it
// says, and 0 is off (no keepalives, no drain, no status lines, the known
// answers only at start, a connection without a link refused at once,
// verify off). A size, count or timeout that has no off (MaxFrame,
// YamuxWindow, LinkBuffer, MaxStreams, DialTimeout, HandshakeTimeout,
// RekeyInterval) must be set: Check refuses 0. nil Engines, Policy,
// Stats and Logger mean software only, a new Stats, and no logs.
//
// Each setting has one name: the config file's key (link_buffer) is the
// field's name in snake case (LinkBuffer), which is what Check's
// SettingError says and what config maps to the file's line. config
// (package offload/config) starts from DefaultOptions too, so a setting
// left out of a file is the default here and a 0 in the file is off.
// docs/settings.md lists them all.
type Options struct {
	// Suite is the cipher suite; both ends must use the same one.
	Suite suite.Suite
	// PSK is the pre-shared key (handshake.PSKSize bytes); nil for a
	// server with Clients, which has their keys instead.
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
	// MaxFrame (max_frame) is record.Options.MaxFrame, the largest
	// ciphertext of a frame this end accepts (record.CheckMaxFrame); it
	// sends none longer than the peer's, which the handshake says.
	MaxFrame int
	// YamuxWindow (yamux_window) is the per-stream receive window
	// (mux.Config.MaxStreamWindow), MinYamuxWindow to MaxYamuxWindow.
	YamuxWindow int
	// LinkBuffer (link_buffer) is the most one link's stream receive
	// buffers may hold, in bytes (mux.Config.ReceiveBudget): a stream
	// whose data would take the link past it is reset. It holds at least
	// one stream: YamuxWindow + MinYamuxWindow (LinkBufferFor).
	// docs/defences.md has the arithmetic.
	LinkBuffer int
	// MaxStreams (max_streams) caps concurrent streams (server: per link;
	// client: all forwarded connections). Excess connections are refused
	// at once, with the reason.
	MaxStreams int
	// Keepalive (keepalive) is the session's keepalive interval; 0 is off,
	// else at least MinKeepalive.
	Keepalive time.Duration
	// ResumeWindow (resume_window) is how long both ends keep a session
	// whose link died for its client to come back on a new link and
	// resume it (docs/protocol.md section 4, tunnel/resume); its streams
	// then see a pause, not a reset. 0 is off: a dropped link resets its
	// streams, and links are version-2 links. At most MaxResumeWindow.
	// On by default: a minute rides out a PPPoE reconnect or a modem
	// reboot; what a session keeps meanwhile counts against LinkBuffer.
	ResumeWindow time.Duration
	// RekeyInterval (rekey_interval) is the longest this end sends under
	// one epoch's keys, MinRekeyInterval to MaxRekeyInterval; the frame
	// and byte limits are the record layer's and fixed.
	RekeyInterval time.Duration
	// DialTimeout (dial_timeout) bounds a dial: a target on the server,
	// the server on the client.
	DialTimeout time.Duration
	// HandshakeTimeout (handshake_timeout) bounds a handshake.
	HandshakeTimeout time.Duration
	// LinkWait (link_wait, client) is how long a client's local connection
	// that finds no link waits for a dial under way or due (linkwait.go);
	// it is refused at once when the dial fails or none is due, and
	// always when LinkWait is 0. At most MaxLinkWait.
	LinkWait time.Duration
	// DrainTimeout (drain_timeout) is how long a shutdown waits for open
	// streams before it closes them (with an error); 0 closes them at
	// once.
	DrainTimeout time.Duration
	// StatusInterval is how often a status line is logged at info; 0 is
	// never. (No config key: a start logs one a minute.)
	StatusInterval time.Duration
	// EngineCheckInterval (engine_check_interval) is how often every
	// engine runs its known-answer test after the one at start
	// (tunnel/enginecheck); 0 is only at start, else at least
	// MinEngineCheckInterval.
	EngineCheckInterval time.Duration
	// Verify (verify) re-checks one in Verify frames an engine other than
	// software sealed or opened against software (record.Verifier); 0 is
	// off, at most MaxVerify.
	Verify int
	// Logger gets the tunnel's events; nil means none.
	Logger *zap.Logger

	// verifier is made from Verify by NewServer and NewClient, stall
	// likewise (with engines besides software); every link's record layer
	// shares them.
	verifier *record.Verifier
	stall    *record.StallWatch

	// rekeyFrames overrides record.DefaultRekeyFrames (tests); the record
	// layer's rekey defaults apply otherwise.
	rekeyFrames uint64
	// engineCheckEvery overrides EngineCheckInterval (tests: below
	// MinEngineCheckInterval, which Check holds the option to).
	engineCheckEvery time.Duration
	// engineCheckTimeout overrides enginecheck.DefaultTimeout (tests).
	engineCheckTimeout time.Duration
	// engineStallTimeout overrides enginecheck.DefaultStallTimeout (tests).
	engineStallTimeout time.Duration
}

// DefaultOptions returns every setting's default: what a config file
// that leaves a setting out gets, and what a program that embeds the
// tunnel starts from (then sets Suite's keys, PSK, Engines, Logger).
func DefaultOptions() Options {
	return Options{
		Suite: suite.Default,
		// Bulk data goes in frames this large: where a router's crypto
		// device is far ahead of its CPU (record.DefaultMaxFrame).
		MaxFrame: record.DefaultMaxFrame,
		// yamux's own default (256 KiB) caps one stream at window/RTT
		// (hashicorp/yamux#24), so offload uses a larger one.
		YamuxWindow: 1 << 20,
		// 16 MiB: with the 8 MiB a running end takes, one link fits the
		// 24 MiB a 64 MB router can spare (docs/budgets.md).
		LinkBuffer:       16 << 20,
		MaxStreams:       1024,
		Keepalive:        15 * time.Second,
		RekeyInterval:    record.DefaultRekeyInterval,
		DialTimeout:      10 * time.Second,
		HandshakeTimeout: 10 * time.Second,
		// Fail fast: a local connection that finds no link waits this
		// long for a dial under way (linkwait.go).
		LinkWait:            2 * time.Second,
		DrainTimeout:        10 * time.Second,
		StatusInterval:      time.Minute,
		EngineCheckInterval: 5 * time.Minute,
		// Sessions outlive a dropped link (docs/protocol.md section 4):
		// long enough for a PPPoE reconnect.
		ResumeWindow: time.Minute,
	}
}

// The defaults of ServerConfig's caps and ClientConfig's redial, for
// their zero values (those are not Options: a 0 there is the default).
const (
	DefaultMaxHandshakes          = 64 // unauthenticated connections in their handshake
	DefaultMaxHandshakesPerSource = 8  // of them from one IPv4 address or IPv6 /64
	DefaultMaxLinks               = 4  // with one client; 2 per client with Clients
	DefaultMaxLinksPerClient      = 2  // one, and one while it redials before the server noticed
	DefaultRedialMin              = 500 * time.Millisecond
	DefaultRedialMax              = 30 * time.Second
)

// Limits Check holds the options to. config's file syntax refuses a size
// or count outside them as it reads it (quoting the file's spelling);
// Check is the rule either way.
const (
	// MinYamuxWindow is yamux's own initial window; it refuses less.
	// It is also what a peer may send on a new stream before it is
	// accepted, so a link buffer holds at least one stream's window and
	// this much (LinkBufferFor).
	MinYamuxWindow = 256 << 10
	MaxYamuxWindow = 16 << 20
	// MaxLinkBuffer, MaxMaxStreams, MaxVerify and the interval bounds
	// keep a typo from asking for gigabytes or a tight loop.
	MaxLinkBuffer          = 1 << 30
	MaxMaxStreams          = 65536
	MinRekeyInterval       = time.Second
	MaxRekeyInterval       = 24 * time.Hour
	MaxLinkWait            = time.Minute
	MaxResumeWindow        = time.Hour
	MinEngineCheckInterval = time.Second
	MaxVerify              = 1 << 20
)

// LinkBufferFor is the smallest LinkBuffer that holds streams streams at
// once, each with a full window of yamuxWindow bytes: every stream may
// hold its window, and a new one MinYamuxWindow before it is accepted.
func LinkBufferFor(streams, yamuxWindow int) int {
	return streams * (yamuxWindow + MinYamuxWindow)
}

// ErrConfig is wrapped by the errors NewServer, NewClient and Check
// return for options that can not work. Fix the configuration.
var ErrConfig = errors.New("tunnel: bad configuration")

// A SettingError is one option Check refuses. Setting is its name as a
// config file spells it (max_frame; see Options); Others are the
// settings the rule weighs it against (link_buffer's yamux_window), for
// a config that did not set Setting itself to blame one it did set.
type SettingError struct {
	Setting string
	Others  []string
	Err     error
}

func (e *SettingError) Error() string { return e.Setting + ": " + e.Err.Error() }

// Unwrap is ErrConfig and the cause.
func (e *SettingError) Unwrap() []error { return []error{ErrConfig, e.Err} }

// Check reports whether NewServer or NewClient would accept o, without
// changing o or starting anything: every problem, each a *SettingError,
// joined (errors.Join). offload validate and config run it, so a config
// that loads also starts.
func (o Options) Check() error {
	var errs []error
	bad := func(setting string, others []string, format string, args ...any) {
		errs = append(errs, &SettingError{Setting: setting, Others: others, Err: fmt.Errorf(format, args...)})
	}
	// A server with Clients has no PSK of its own (newServerState checks
	// the keys it has); a client needs one (NewClient).
	if o.PSK != nil && len(o.PSK) != handshake.PSKSize {
		bad("key_file", nil, "pre-shared key is %d bytes, want %d", len(o.PSK), handshake.PSKSize)
	}
	if !o.Suite.Cipher.Valid() {
		bad("suite", nil, "no cipher suite")
	}
	if err := record.CheckMaxFrame(o.MaxFrame); err != nil {
		bad("max_frame", nil, "%w", err)
	}
	if o.YamuxWindow < MinYamuxWindow || o.YamuxWindow > MaxYamuxWindow {
		bad("yamux_window", nil, "%d bytes: want %d (yamux's minimum) to %d", o.YamuxWindow, MinYamuxWindow, MaxYamuxWindow)
	}
	switch need := LinkBufferFor(1, o.YamuxWindow); {
	case o.LinkBuffer > MaxLinkBuffer:
		bad("link_buffer", nil, "%d bytes is more than the maximum of %d", o.LinkBuffer, MaxLinkBuffer)
	case o.LinkBuffer < need:
		bad("link_buffer", []string{"yamux_window"}, "link_buffer %d holds no stream at yamux_window %d: want at least yamux_window + 256KiB (%d)",
			o.LinkBuffer, o.YamuxWindow, need)
	}
	if o.MaxStreams < 1 || o.MaxStreams > MaxMaxStreams {
		bad("max_streams", nil, "%d: want a number from 1 to %d", o.MaxStreams, MaxMaxStreams)
	}
	if o.Keepalive < 0 || o.Keepalive > 0 && o.Keepalive < MinKeepalive {
		bad("keepalive", nil, "%v: want 0 (off) or at least %v (a peer cuts a link that pings more often than %d times a second)",
			o.Keepalive, MinKeepalive, mux.PingRate)
	}
	if o.RekeyInterval < MinRekeyInterval || o.RekeyInterval > MaxRekeyInterval {
		bad("rekey_interval", nil, "%v: want %v to %v", o.RekeyInterval, MinRekeyInterval, MaxRekeyInterval)
	}
	if o.DialTimeout <= 0 {
		bad("dial_timeout", nil, "must be more than 0")
	}
	if o.HandshakeTimeout <= 0 {
		bad("handshake_timeout", nil, "must be more than 0")
	}
	if o.ResumeWindow < 0 || o.ResumeWindow > MaxResumeWindow {
		bad("resume_window", nil, "%v: want 0 (off) to %v", o.ResumeWindow, MaxResumeWindow)
	}
	if o.LinkWait < 0 || o.LinkWait > MaxLinkWait {
		bad("link_wait", nil, "%v: want 0 (reset at once) to %v", o.LinkWait, MaxLinkWait)
	}
	if o.DrainTimeout < 0 {
		bad("drain_timeout", nil, "%v: want 0 (close at once) or more", o.DrainTimeout)
	}
	if o.StatusInterval < 0 {
		bad("status_interval", nil, "%v: want 0 (never) or more", o.StatusInterval)
	}
	if o.EngineCheckInterval < 0 || o.EngineCheckInterval > 0 && o.EngineCheckInterval < MinEngineCheckInterval {
		bad("engine_check_interval", nil, "%v: want 0 (only at start) or at least %v; the known answers would run back to back",
			o.EngineCheckInterval, MinEngineCheckInterval)
	}
	if o.Verify < 0 || o.Verify > MaxVerify {
		bad("verify", nil, "%d: want 0 (off) or N from 1 to %d, to re-check one in N engine frames", o.Verify, MaxVerify)
	}
	return errors.Join(errs...)
}

// setDefaults checks o and fills in the nil ones that mean none.
func (o *Options) setDefaults() error {
	if err := o.Check(); err != nil {
		return err
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
