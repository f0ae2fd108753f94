// Package stream is the stream layer: what one mux stream carries once it
// is open. Every forwarded connection, UDP flow and reverse listener is a
// stream that starts with a request and its response (the wire below), and a
// TCP connection's bytes then cross it as chunks, spliced both ways between
// the local socket and the stream (splice.go) with pooled copy buffers
// (copybuf.go) or straight into the link's frames (readidle_unix.go). It
// knows streams and sockets only, never a Server, a Client or a link.
package stream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// The stream protocol, version 2 (docs/protocol.md, section 3, is the
// normative text). Every yamux stream carries one forwarded connection, UDP
// flow or reverse listener. The end that opens the stream
// sends a request, the other end answers:
//
//	request:  version:u8 (=2) | kind:u8 | argLen:u16be (1..maxArg) | arg
//	response: status:u8 | msgLen:u8 | msg
//
//	kind 1 service          client → server  arg = service name (1..255 bytes)
//	kind 2 socks-connect    client → server  arg = port:u16be | host (1..255 bytes:
//	                                         an IPv4 or IPv6 literal, or a DNS name
//	                                         the server resolves)
//	kind 3 udp              client → server  arg = UDP service name (1..255 bytes)
//	kind 4 reverse-listen   client → server  arg = host:port the server listens on
//	                                         (an IP literal; IPv6 in brackets)
//	kind 5 reverse-connect  server → client  arg = the host:port of kind 4 whose
//	                                         listener accepted this connection
//
// Version 1 (before kinds) was version:u8 (=1) | nameLen:u8 | name; an end
// that reads it answers status 4 with a message that names both versions.
//
// Kinds 1, 2 and 5 then carry TCP bytes as chunks, in each direction:
//
//	chunk = len:u32be | data[len]      1 ≤ len ≤ MaxChunk
//	      | 0x00000000                 end: this direction is complete (half-close)
//	      | 0xffffffff                 abort: the connection failed on the sender's side
//
// A stream's yamux FIN (Close) is sent only once both directions are
// complete, or after an abort. A direction that ends (EOF, reset, link gone)
// before its end marker ended with an error: the receiving side resets its
// TCP connection instead of closing it cleanly.
//
// Kind 3 carries datagrams (datagram.go); kind 4 carries nothing after the
// response: the server's listener lives as long as the stream
// (tunnel/reverse.go).
const (
	Version = 2

	// maxArg bounds a request's argument, so a peer can't make the reader
	// allocate more.
	maxArg = 512

	// MaxChunk is the largest chunk: a bulk stream's copy buffer
	// (copybuf.go). A receiver takes any chunk up to it, whatever
	// buffer it holds.
	MaxChunk = 64 << 10

	ChunkHeader = 4
	chunkEnd    = 0
	chunkAbort  = 0xffffffff
)

// Statuses of the server's response.
const (
	StatusOK             byte = 0
	StatusUnknownService byte = 1
	StatusDialFailed     byte = 2
	StatusBusy           byte = 3
	StatusBadRequest     byte = 4
	// StatusDenied: the server's rules (allowlists) do not allow it.
	StatusDenied byte = 5
	// The dial failed, and why (SOCKS5 has a reply code for each).
	StatusConnRefused byte = 6
	StatusHostUnreach byte = 7 // host unreachable, or the name did not resolve
	StatusNetUnreach  byte = 8
	StatusDialTimeout byte = 9
)

// Kinds of request.
const (
	KindService        byte = 1
	KindSocks          byte = 2
	KindUDP            byte = 3
	KindReverseListen  byte = 4
	KindReverseConnect byte = 5
)

var kindNames = map[byte]string{
	KindService: "service", KindSocks: "socks-connect", KindUDP: "udp",
	KindReverseListen: "reverse-listen", KindReverseConnect: "reverse-connect",
}

// KindName names a kind of request (ReadRequest takes only these) for a
// log line or an error.
func KindName(kind byte) string { return kindNames[kind] }

// Request is a decoded stream request.
type Request struct {
	Kind byte
	Arg  string
}

// Errors a stream can end with. The client logs them; its application sees
// a reset connection.
var (
	// ErrUnknownService means the server has no service by the requested
	// name. Check the forward's service against the server's services.
	ErrUnknownService = errors.New("unknown service")
	// ErrDialFailed means the server could not connect to the service's
	// target. The message says why; check the target is up.
	ErrDialFailed = errors.New("server could not dial the service")
	// ErrBusy means the link is at its stream limit (max_streams). Retry
	// later or raise the limit.
	ErrBusy = errors.New("too many streams")
	// ErrBadRequest means the peer sent a malformed stream request or
	// response: it is not a compatible offload (the message says which
	// stream protocol versions met; upgrade the older end).
	ErrBadRequest = errors.New("malformed stream request")
	// ErrDenied means the server's rules do not allow the request: a SOCKS
	// destination outside its socks_allow, a reverse listen address
	// outside its reverse_allow, an unknown UDP service.
	ErrDenied = errors.New("not allowed by the server")
	// ErrAborted means the other end of a stream reported that its
	// connection failed (an abort marker), or that the stream ended before
	// its end marker: the transfer is incomplete.
	ErrAborted = errors.New("stream aborted")
)

// StatusError is a non-OK response from the server; it wraps one of
// ErrUnknownService, ErrDialFailed, ErrBusy, ErrBadRequest, ErrDenied.
type StatusError struct {
	Status byte
	Msg    string
}

func (e *StatusError) Error() string {
	if e.Msg == "" && e.Status == StatusBadRequest {
		// A version 1 server answers a version 2 request so, without a
		// reason.
		return fmt.Sprintf("%v: the peer gave no reason; an offload from before stream protocol %d (SOCKS, UDP, reverse forwards) answers so: upgrade it", ErrBadRequest, Version)
	}
	base := e.Unwrap().Error()
	if e.Msg == "" {
		return base
	}
	// The server's reason is often its own error, which already starts
	// with the status's text: say it once.
	if e.Msg == base || strings.HasPrefix(e.Msg, base+": ") {
		return e.Msg
	}
	return base + ": " + e.Msg
}

// Unwrap returns the sentinel for the status.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case StatusUnknownService:
		return ErrUnknownService
	case StatusDialFailed, StatusConnRefused, StatusHostUnreach, StatusNetUnreach, StatusDialTimeout:
		return ErrDialFailed
	case StatusDenied:
		return ErrDenied
	case StatusBusy:
		return ErrBusy
	}
	return ErrBadRequest
}

// AppendRequest appends a request of kind with arg.
func AppendRequest(b []byte, kind byte, arg string) ([]byte, error) {
	if err := checkArg(kind, arg); err != nil {
		return nil, err
	}
	b = append(b, Version, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(len(arg)))
	return append(b, arg...), nil
}

// checkArg checks a request's argument by kind.
func checkArg(kind byte, arg string) error {
	switch kind {
	case KindService, KindUDP:
		if len(arg) == 0 || len(arg) > 255 {
			return fmt.Errorf("%w: service name of %d bytes (want 1..255)", ErrBadRequest, len(arg))
		}
	case KindSocks:
		if len(arg) < 3 || len(arg) > 2+255 {
			return fmt.Errorf("%w: socks-connect argument of %d bytes (want port and a host of 1..255 bytes)", ErrBadRequest, len(arg))
		}
	case KindReverseListen, KindReverseConnect:
		if _, err := netip.ParseAddrPort(arg); err != nil {
			return fmt.Errorf("%w: %s address %q: %w", ErrBadRequest, kindNames[kind], arg, err)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrBadRequest, kind)
	}
	return nil
}

// ReadRequest reads and checks a request; the argument is at most maxArg
// bytes, so a peer can't make it allocate more.
func ReadRequest(r io.Reader) (Request, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:2]); err != nil {
		return Request{}, fmt.Errorf("reading stream request: %w", err)
	}
	if hdr[0] != Version {
		return Request{}, fmt.Errorf("%w: stream protocol version %d from the peer, this end speaks %d: upgrade the older end", ErrBadRequest, hdr[0], Version)
	}
	if _, err := io.ReadFull(r, hdr[2:]); err != nil {
		return Request{}, fmt.Errorf("reading stream request: %w", err)
	}
	n := binary.BigEndian.Uint16(hdr[2:])
	if n == 0 || n > maxArg {
		return Request{}, fmt.Errorf("%w: argument of %d bytes (want 1..%d)", ErrBadRequest, n, maxArg)
	}
	arg := make([]byte, n)
	if _, err := io.ReadFull(r, arg); err != nil {
		return Request{}, fmt.Errorf("reading stream request: %w", err)
	}
	req := Request{Kind: hdr[1], Arg: string(arg)}
	if err := checkArg(req.Kind, req.Arg); err != nil {
		return Request{}, err
	}
	return req, nil
}

// SocksArg encodes a socks-connect destination: port:u16be | host.
func SocksArg(host string, port uint16) string {
	return string(binary.BigEndian.AppendUint16(nil, port)) + host
}

// ParseSocksArg decodes SocksArg's encoding (checkArg checked the length).
func ParseSocksArg(arg string) (host string, port uint16) {
	return arg[2:], binary.BigEndian.Uint16([]byte(arg[:2]))
}

// AppendResponse appends a response; msg is cut to 255 bytes.
func AppendResponse(b []byte, status byte, msg string) []byte {
	if len(msg) > 255 {
		msg = msg[:255]
	}
	b = append(b, status, byte(len(msg)))
	return append(b, msg...)
}

// ReadResponse reads the server's response: nil for OK, a *StatusError
// otherwise.
func ReadResponse(r io.Reader) error {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("reading stream response: %w", err)
	}
	msg := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, msg); err != nil {
		return fmt.Errorf("reading stream response: %w", err)
	}
	if hdr[0] == StatusOK {
		return nil
	}
	return &StatusError{Status: hdr[0], Msg: string(msg)}
}

func putChunkHeader(b []byte, n uint32) { binary.BigEndian.PutUint32(b, n) }
