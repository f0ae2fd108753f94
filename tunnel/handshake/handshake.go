// Package handshake authenticates the two ends of an offload link with a
// pre-shared key and derives the record keys of both directions.
//
// The handshake is Noise_NNpsk0_25519_ChaChaPoly_SHA256 (github.com/flynn/noise):
// ephemeral X25519 on both sides for forward secrecy, the PSK mixed in before
// the first message so the responder checks the initiator's knowledge of the
// PSK with the first message's AEAD tag. Before the Noise messages the
// client sends a small plaintext hello (magic, version, suite name) so a peer
// with another version or suite fails with an error that names it; the
// Noise prologue repeats the hello as each side computes it from its own
// configuration, so tampering with the hello in transit fails the handshake
// as an authentication failure. docs/protocol.md has the wire format.
//
// NNpsk0's first message carries no freshness: anyone who recorded it can
// replay it and pass the PSK check. So version 2 ends with a key
// confirmation from the client, computed from the keys of this server's
// fresh ephemeral: the server returns keys (and the tunnel builds a link)
// only for a client that proved it holds them. A replayed first message is
// refused at once when the server's ReplayCache remembers it, and otherwise
// can never confirm. One and a half round trips:
//
//	client                                   server
//	hello | msg(noise, e + tag)   ───────>   check magic, version, suite, tag, replay cache
//	                              <───────   msg(noise, e, ee + tag)  or  msg(alert)
//	msg(confirm)                  ───────>   check the confirmation
//	record frames ...
//
// Both sides then derive K_enc, K_mac and S_iv per direction with HKDF-SHA256
// from the final Noise cipher keys, salted with the handshake hash.
//
// Version 3 puts each end's max_frame (the largest record frame it
// accepts) in its Noise payload, so each end sends frames no longer than
// the other accepts and a mismatch cannot break the link
// (record.Keys.PeerMaxFrame). A server still answers a version 2 client,
// and a client whose server says it speaks version 2 redials speaking it
// (Config.Version); to such a peer an end sends frames of at most 64 KiB,
// the default.
//
// A server with several clients holds a KeySet: it finds the key the first
// message was made with by trying each (keyset.go; at most MaxKeys), and
// ServerKey says which, so the tunnel knows the client without anything on
// the wire naming it.
package handshake

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/flynn/noise"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Version is the protocol version this package speaks. It covers the
// handshake and the record layer. Version 2 added the client's key
// confirmation; version 3, each end's max_frame in its Noise payload.
const Version = 3

// MinVersion is the oldest version this package still speaks: a server
// answers a client of any version from MinVersion to Version, and a
// client speaks Config.Version when it is set.
const MinVersion = 2

// PSKSize is the length of the pre-shared key.
const PSKSize = 32

// DefaultTimeout bounds a handshake when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Errors of the handshake. Every error returned by Client and Server wraps
// exactly one of them (and the cause, where there is one).
var (
	// ErrAuth means the peer does not hold the same PSK, or the handshake
	// was tampered with in transit (including the hello). Check that both
	// ends use the same key file; retrying will not help.
	ErrAuth = errors.New("authentication failed")

	// ErrSuiteMismatch means the peer is configured for another cipher
	// suite. It is wrapped by a *SuiteMismatchError that names the peer's
	// suite. Configure both ends with the same suite.
	ErrSuiteMismatch = errors.New("cipher suite mismatch")

	// ErrVersion means the peer speaks another protocol version. Upgrade
	// the older end.
	ErrVersion = errors.New("protocol version mismatch")

	// ErrProtocol means the peer sent something that is not an offload
	// handshake (wrong magic, malformed or oversized message, truncated
	// stream). The peer is not an offload endpoint or the link is broken.
	ErrProtocol = errors.New("handshake protocol error")

	// ErrTimeout means the handshake did not finish within Config.Timeout
	// or before the context ended. Retry with backoff.
	ErrTimeout = errors.New("handshake timed out")

	// ErrPSK means Config.PSK is not PSKSize bytes. Fix the key file
	// (offload keygen makes one).
	ErrPSK = errors.New("pre-shared key must be 32 bytes")

	// ErrReplay means the server saw this first message before: someone
	// replayed a recorded handshake. The server refuses it without an
	// answer; there is nothing to fix on either end.
	ErrReplay = errors.New("replayed first message")

	// ErrBusy means the server refused a client with the PSK because it
	// is at its link limit (Config.Admit said no). The client retries
	// with backoff; raise the server's max_links if it keeps happening.
	ErrBusy = errors.New("server busy")
)

// SuiteMismatchError says which suite the peer uses. It wraps
// ErrSuiteMismatch.
type SuiteMismatchError struct {
	PeerRole  string // "server" or "client"
	PeerSuite string // the peer's suite name, as it sent it
	Ours      string // our suite name
}

func (e *SuiteMismatchError) Error() string {
	return fmt.Sprintf("handshake failed: %s uses %s, we use %s", e.PeerRole, e.PeerSuite, e.Ours)
}

// Unwrap returns ErrSuiteMismatch.
func (e *SuiteMismatchError) Unwrap() error { return ErrSuiteMismatch }

// VersionError says which protocol version the peer speaks. It wraps
// ErrVersion.
type VersionError struct {
	PeerRole string // "server" or "client"
	Peer     byte   // the version the peer said it speaks
	Ours     byte   // the version we spoke
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("handshake failed: %s speaks protocol version %d, we speak %d", e.PeerRole, e.Peer, e.Ours)
}

// Unwrap returns ErrVersion.
func (e *VersionError) Unwrap() error { return ErrVersion }

// Config configures one handshake.
type Config struct {
	Suite   suite.Suite
	PSK     []byte        // PSKSize bytes
	Timeout time.Duration // whole handshake; 0 means DefaultTimeout
	Logger  *zap.Logger   // nil means none

	// MaxFrame is the largest record frame this end accepts (its
	// max_frame; 0 means record.DefaultMaxFrame), which version 3 tells
	// the peer. The keys' PeerMaxFrame is the peer's (a version 2 peer's
	// is taken to be record.DefaultMaxFrame).
	MaxFrame int
	// Version, on the client, is the version it speaks: 0 means Version;
	// MinVersion..Version for a server that said it speaks an older one.
	Version byte

	// Replay, on the server, remembers first messages to refuse replays
	// early; nil means no cache (a replay then fails at the key
	// confirmation). Share one cache among all handshakes of a server.
	Replay *ReplayCache
	// Admit, on the server, is called once the client's first message
	// authenticated and is not a replay, before the server answers, with
	// the index in Keys of the key it holds (0 without Keys): which
	// client it is. An error refuses the client with a busy alert; Server
	// returns it wrapped with ErrBusy. nil admits everyone.
	Admit func(key int) error
	// FlightRead, on the server, is called once the whole first flight
	// has been read, before it is checked: from then on the handshake
	// waits on the network only for the confirmation. nil means none.
	FlightRead func()
	// Keys, on the server, are the keys it accepts (one per client, two
	// while a client's key is rotated); PSK is then unused. ServerKey
	// says which one the client holds. nil means PSK alone.
	Keys *KeySet

	keyIndex int // the index in Keys of the client's key, set by server
}

// FlightHeader returns the first bytes of the first flight a client of
// this version with suite s sends (its hello and the header of its Noise
// message), and the flight's whole length. A server can look at its
// socket buffer with them and tell a complete first flight from a partial
// one before the handshake has read it.
func FlightHeader(s suite.Suite) (prefix []byte, size int) {
	f := flightOf(Version, s)
	return f.Prefix, f.Size
}

// Flight is the start of a first flight and its whole length.
type Flight struct {
	Prefix []byte
	Size   int
}

// Flights returns the first flight of every version a server of suite s
// answers (MinVersion to Version), newest first: FlightHeader's, and
// those of older clients.
func Flights(s suite.Suite) []Flight {
	var fs []Flight
	for v := byte(Version); v >= MinVersion; v-- {
		fs = append(fs, flightOf(v, s))
	}
	return fs
}

func flightOf(v byte, s suite.Suite) Flight {
	n := noiseLen(v)
	b := appendHello(make([]byte, 0, helloMax+msgHeader), v, s.String())
	b = append(b, msgNoise, 0, byte(n))
	return Flight{Prefix: b, Size: len(b) + n}
}

// Client runs the initiator's side of the handshake on conn and returns the
// record keys of this end. It returns early with ErrTimeout when ctx ends.
// On success conn's deadlines are cleared; on error the caller closes conn.
func Client(ctx context.Context, conn net.Conn, cfg Config) (record.Keys, error) {
	keys, _, err := run(ctx, conn, cfg, true)
	return keys, err
}

// Server runs the responder's side of the handshake on conn. A client with
// another version, suite or key gets an alert that says so before Server
// returns the matching error.
func Server(ctx context.Context, conn net.Conn, cfg Config) (record.Keys, error) {
	keys, _, err := run(ctx, conn, cfg, false)
	return keys, err
}

// ServerKey is Server that also returns the index in cfg.Keys of the key
// the client holds (0 without cfg.Keys): which client it is. The index is
// known only once the client's first message authenticated; a failed
// handshake returns -1.
func ServerKey(ctx context.Context, conn net.Conn, cfg Config) (record.Keys, int, error) {
	return run(ctx, conn, cfg, false)
}

// aLongTimeAgo is a deadline in the past, to interrupt blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

func run(ctx context.Context, conn net.Conn, cfg Config, initiator bool) (record.Keys, int, error) {
	keys, err := runState(ctx, conn, &cfg, initiator)
	if err != nil {
		return keys, -1, err
	}
	return keys, cfg.keyIndex, nil
}

func runState(ctx context.Context, conn net.Conn, cfgp *Config, initiator bool) (record.Keys, error) {
	cfg := *cfgp
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	role := "server"
	if initiator {
		role = "client"
	}
	log = log.Named("handshake").With(zap.String("role", role), zap.Stringer("remote", addrOf(conn)))
	switch {
	case !initiator && cfg.Keys != nil:
		if cfg.Keys.suite != cfg.Suite {
			return record.Keys{}, fmt.Errorf("%w: made for suite %v, the handshake uses %v", ErrKeySet, cfg.Keys.suite, cfg.Suite)
		}
	case len(cfg.PSK) != PSKSize:
		return record.Keys{}, fmt.Errorf("handshake: %w (got %d)", ErrPSK, len(cfg.PSK))
	}
	if !cfg.Suite.Valid() {
		return record.Keys{}, fmt.Errorf("handshake: %w: %v", record.ErrSuite, cfg.Suite)
	}
	if cfg.MaxFrame == 0 {
		cfg.MaxFrame = record.DefaultMaxFrame
	}
	if err := record.CheckMaxFrame(cfg.MaxFrame); err != nil {
		return record.Keys{}, fmt.Errorf("handshake: MaxFrame: %w", err)
	}
	version := cfg.Version // the server's is the client's, from its hello
	if !initiator || version == 0 {
		version = Version
	}
	if version < MinVersion || version > Version {
		return record.Keys{}, fmt.Errorf("handshake: Version %d: this end speaks %d to %d", version, MinVersion, Version)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return record.Keys{}, fmt.Errorf("handshake: setting deadline: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(aLongTimeAgo) })

	h := &state{conn: conn, cfg: cfg, log: log, version: version}
	var keys record.Keys
	var err error
	if initiator {
		keys, err = h.client()
	} else {
		keys, err = h.server()
		cfgp.keyIndex = h.cfg.keyIndex
	}

	if !stop() {
		// ctx ended: its deadline may have hit our I/O, or may yet hit the
		// caller's. Either way the handshake counts as not done.
		keys.Wipe()
		return record.Keys{}, fmt.Errorf("handshake failed: %w: %w", ErrTimeout, context.Cause(ctx))
	}
	if err != nil {
		if isTimeout(err) {
			err = fmt.Errorf("handshake failed: %w after %v: %w", ErrTimeout, time.Since(start).Round(time.Millisecond), err)
		}
		if initiator {
			// The server's caller logs failures rate-limited: a flood of
			// them must not cost a log line each, even at debug.
			log.Debug("handshake failed", zap.Error(err), zap.Duration("took", time.Since(start)))
		}
		return record.Keys{}, err
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		keys.Wipe()
		return record.Keys{}, fmt.Errorf("handshake: clearing deadline: %w", err)
	}
	log.Debug("handshake complete", zap.Stringer("suite", cfg.Suite), zap.Duration("took", time.Since(start)))
	return keys, nil
}

func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func addrOf(c net.Conn) fmt.Stringer {
	if a := c.RemoteAddr(); a != nil {
		return a
	}
	return stringer("unknown")
}

type stringer string

func (s stringer) String() string { return string(s) }

// cipherSuite is the Noise suite: X25519, ChaCha20-Poly1305 (constant time
// in pure Go, fast on routers without AES instructions), SHA-256.
var cipherSuite = noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashSHA256)

// state is one handshake in progress.
type state struct {
	conn    net.Conn
	cfg     Config
	log     *zap.Logger
	rd      msgReader
	version byte // the client's: what it sent, or what the server read
}

// payload is this end's Noise payload: its max_frame from version 3 on.
func (h *state) payload(buf *[payloadLen]byte) []byte {
	if h.version < payloadVersion {
		return nil
	}
	binary.BigEndian.PutUint32(buf[:], uint32(h.cfg.MaxFrame))
	return buf[:]
}

// peerMaxFrame reads the peer's Noise payload: its max_frame from
// version 3 on (a value the record layer takes). A version 2 peer says
// nothing: record.DefaultMaxFrame is what it accepts unless its config
// says otherwise, and sending no more keeps a link to it working
// whenever its max_frame is between that and ours.
func (h *state) peerMaxFrame(p []byte) (int, error) {
	if h.version < payloadVersion {
		return record.DefaultMaxFrame, nil
	}
	if len(p) != payloadLen {
		return 0, fmt.Errorf("%w: a payload of %d bytes, want %d", ErrProtocol, len(p), payloadLen)
	}
	n := int(binary.BigEndian.Uint32(p))
	if err := record.CheckMaxFrame(n); err != nil {
		return 0, fmt.Errorf("%w: the peer's max_frame: %w", ErrProtocol, err)
	}
	return n, nil
}

func (h *state) noise(initiator bool) (*noise.HandshakeState, error) {
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite:           cipherSuite,
		Pattern:               noise.HandshakeNN,
		Initiator:             initiator,
		Prologue:              prologue(h.version, h.cfg.Suite),
		PresharedKey:          h.cfg.PSK,
		PresharedKeyPlacement: 0,
	})
	if err != nil {
		return nil, fmt.Errorf("handshake: noise setup: %w", err)
	}
	return hs, nil
}

func (h *state) client() (record.Keys, error) {
	hs, err := h.noise(true)
	if err != nil {
		return record.Keys{}, err
	}
	n := noiseLen(h.version)
	var out [helloMax + msgHeader + noiseMsgMax]byte
	var pl [payloadLen]byte
	b := appendHello(out[:0], h.version, h.cfg.Suite.String())
	b = append(b, msgNoise, 0, byte(n))
	b, _, _, err = hs.WriteMessage(b, h.payload(&pl))
	if err != nil {
		return record.Keys{}, fmt.Errorf("handshake: writing message 1: %w", err)
	}
	if _, err := h.conn.Write(b); err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: sending hello: %w", err)
	}

	typ, body, err := h.rd.read(h.conn)
	if err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: reading server reply: %w", err)
	}
	switch typ {
	case msgAlert:
		return record.Keys{}, h.alertError(body)
	case msgNoise:
	default:
		return record.Keys{}, fmt.Errorf("handshake failed: %w: unexpected message type %#x", ErrProtocol, typ)
	}
	if len(body) != n {
		return record.Keys{}, fmt.Errorf("handshake failed: %w: server message of %d bytes, want %d", ErrProtocol, len(body), n)
	}
	var scratch [noiseMsgMax]byte
	p, cs1, cs2, err := hs.ReadMessage(scratch[:0], body)
	if err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: %w: server message: %w", ErrAuth, err)
	}
	peerFrame, err := h.peerMaxFrame(p)
	if err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: server message: %w", err)
	}
	hash := hs.ChannelBinding()
	confirm, err := confirmation(cs1, hash, h.cfg.Suite)
	if err != nil {
		return record.Keys{}, err
	}
	var cb [msgHeader + confirmLen]byte
	m := append(cb[:0], msgConfirm, 0, confirmLen)
	m = append(m, confirm[:]...)
	clear(confirm[:])
	if _, err := h.conn.Write(m); err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: sending key confirmation: %w", err)
	}
	c2s, s2c, err := deriveKeys(cs1, cs2, hash, h.cfg.Suite)
	if err != nil {
		return record.Keys{}, err
	}
	return record.Keys{Send: c2s, Recv: s2c, PeerMaxFrame: peerFrame}, nil
}

func (h *state) server() (record.Keys, error) {
	// Read the whole first flight (hello and one message, a framing every
	// version keeps) before answering, so the alert never races the
	// client's write on an unbuffered transport.
	v, peerSuite, err := readHello(h.conn)
	if err != nil {
		// Wrong magic or a broken stream: not an offload client, no alert.
		return record.Keys{}, fmt.Errorf("handshake failed: %w", err)
	}
	typ, body, err := h.rd.read(h.conn)
	if err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: reading client message: %w", err)
	}
	if h.cfg.FlightRead != nil {
		h.cfg.FlightRead()
	}
	if v < MinVersion || v > Version {
		h.alert(alertVersion, string([]byte{Version}))
		return record.Keys{}, &VersionError{PeerRole: "client", Peer: v, Ours: Version}
	}
	h.version = v
	n := noiseLen(v)
	if ours := h.cfg.Suite.String(); peerSuite != ours {
		h.alert(alertSuite, ours)
		return record.Keys{}, &SuiteMismatchError{PeerRole: "client", PeerSuite: peerSuite, Ours: ours}
	}
	if typ != msgNoise || len(body) != n {
		h.alert(alertProtocol, "")
		return record.Keys{}, fmt.Errorf("handshake failed: %w: client message type %#x of %d bytes, want type %#x of %d",
			ErrProtocol, typ, len(body), msgNoise, n)
	}
	if ks := h.cfg.Keys; ks != nil {
		// Which client: the one key the message authenticates under. A
		// message that fits none is tried against every key, so the
		// alert and its timing say nothing about which keys exist.
		i := ks.find(body, v)
		if i < 0 {
			h.alert(alertAuth, "")
			return record.Keys{}, fmt.Errorf("handshake failed: %w (client holds none of our %d keys, or the hello was altered)", ErrAuth, ks.Len())
		}
		h.cfg.PSK, h.cfg.keyIndex = ks.psk(i), i
	}
	hs, err := h.noise(false)
	if err != nil {
		return record.Keys{}, err
	}
	var scratch [noiseMsgMax]byte
	p, _, _, err := hs.ReadMessage(scratch[:0], body)
	if err != nil {
		h.alert(alertAuth, "")
		return record.Keys{}, fmt.Errorf("handshake failed: %w (client does not hold our PSK, or the hello was altered): %w", ErrAuth, err)
	}
	peerFrame, err := h.peerMaxFrame(p)
	if err != nil {
		h.alert(alertProtocol, "")
		return record.Keys{}, fmt.Errorf("handshake failed: client message: %w", err)
	}
	// The message authenticated, but anyone who recorded it could have
	// sent it: refuse one we have seen, silently (the replayer learns
	// nothing it did not know).
	if h.cfg.Replay != nil && !h.cfg.Replay.add(body[:32]) {
		return record.Keys{}, fmt.Errorf("handshake failed: %w: the client's ephemeral key was seen before", ErrReplay)
	}
	if h.cfg.Admit != nil {
		if err := h.cfg.Admit(h.cfg.keyIndex); err != nil {
			h.alert(alertBusy, "")
			return record.Keys{}, fmt.Errorf("handshake failed: %w: %w", ErrBusy, err)
		}
	}
	var out [msgHeader + noiseMsgMax]byte
	var pl [payloadLen]byte
	b := append(out[:0], msgNoise, 0, byte(n))
	b, cs1, cs2, err := hs.WriteMessage(b, h.payload(&pl))
	if err != nil {
		return record.Keys{}, fmt.Errorf("handshake: writing message 2: %w", err)
	}
	if _, err := h.conn.Write(b); err != nil {
		return record.Keys{}, fmt.Errorf("handshake failed: sending reply: %w", err)
	}
	hash := hs.ChannelBinding()
	if err := h.checkConfirmation(cs1, hash); err != nil {
		return record.Keys{}, err
	}
	c2s, s2c, err := deriveKeys(cs1, cs2, hash, h.cfg.Suite)
	if err != nil {
		return record.Keys{}, err
	}
	return record.Keys{Send: s2c, Recv: c2s, PeerMaxFrame: peerFrame}, nil
}

// checkConfirmation reads the client's key confirmation and checks it
// against ours. Only a client that holds the ephemeral key of the first
// message and the PSK can compute it from our fresh ephemeral, so this is
// what a replayed first message can never get past. A failure gets no
// alert: the client is already sending record frames.
func (h *state) checkConfirmation(cs1 *noise.CipherState, hash []byte) error {
	typ, body, err := h.rd.read(h.conn)
	if err != nil {
		return fmt.Errorf("handshake failed: reading the client's key confirmation: %w", err)
	}
	if typ != msgConfirm || len(body) != confirmLen {
		return fmt.Errorf("handshake failed: %w: client sent message type %#x of %d bytes, want a key confirmation (type %#x of %d)",
			ErrProtocol, typ, len(body), msgConfirm, confirmLen)
	}
	want, err := confirmation(cs1, hash, h.cfg.Suite)
	if err != nil {
		return err
	}
	defer clear(want[:])
	if subtle.ConstantTimeCompare(want[:], body) != 1 {
		return fmt.Errorf("handshake failed: %w: the client's key confirmation is wrong (a replayed first message, or the reply was altered)", ErrAuth)
	}
	return nil
}

// alert tells the client why the handshake failed, best effort: the
// handshake fails with the server's own error whether or not it arrives.
func (h *state) alert(code byte, detail string) {
	var out [msgHeader + alertMax]byte
	b := appendAlert(out[:0], code, detail)
	if _, err := h.conn.Write(b); err != nil {
		h.log.Debug("sending alert", zap.Uint8("code", code), zap.Error(err))
	}
}

// alertError turns the server's alert into the client's error.
func (h *state) alertError(body []byte) error {
	code, detail, err := parseAlert(body)
	if err != nil {
		return fmt.Errorf("handshake failed: %w", err)
	}
	switch code {
	case alertVersion:
		if len(detail) != 1 {
			return fmt.Errorf("handshake failed: %w: malformed version alert", ErrProtocol)
		}
		return &VersionError{PeerRole: "server", Peer: detail[0], Ours: h.version}
	case alertSuite:
		if !validSuiteName(detail) {
			return fmt.Errorf("handshake failed: %w: malformed suite alert", ErrProtocol)
		}
		return &SuiteMismatchError{PeerRole: "server", PeerSuite: string(detail), Ours: h.cfg.Suite.String()}
	case alertAuth:
		return fmt.Errorf("handshake failed: %w (server does not accept our PSK)", ErrAuth)
	case alertProtocol:
		return fmt.Errorf("handshake failed: %w: server rejected our messages as malformed", ErrProtocol)
	case alertBusy:
		return fmt.Errorf("handshake failed: %w: the server is at its link limit", ErrBusy)
	}
	return fmt.Errorf("handshake failed: %w: unknown alert code %d", ErrProtocol, code)
}
