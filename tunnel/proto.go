package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// The stream protocol, version 2. Every yamux stream carries one forwarded
// connection, UDP flow or reverse listener. The end that opens the stream
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
//	chunk = len:u32be | data[len]      1 ≤ len ≤ maxChunk
//	      | 0x00000000                 end: this direction is complete (half-close)
//	      | 0xffffffff                 abort: the connection failed on the sender's side
//
// A stream's yamux FIN (Close) is sent only once both directions are
// complete, or after an abort. A direction that ends (EOF, reset, link gone)
// before its end marker ended with an error: the receiving side resets its
// TCP connection instead of closing it cleanly.
//
// Kind 3 carries datagrams (udp.go); kind 4 carries nothing after the
// response: the server's listener lives as long as the stream (reverse.go).
const (
	protoVersion = 2

	// maxArg bounds a request's argument, so a peer can't make the reader
	// allocate more.
	maxArg = 512

	// maxChunk is the largest chunk: a bulk stream's copy buffer
	// (copybuf.go). A receiver takes any chunk up to it, whatever
	// buffer it holds.
	maxChunk = 64 << 10

	chunkHeader = 4
	chunkEnd    = 0
	chunkAbort  = 0xffffffff
)

// Statuses of the server's response.
const (
	statusOK             byte = 0
	statusUnknownService byte = 1
	statusDialFailed     byte = 2
	statusBusy           byte = 3
	statusBadRequest     byte = 4
	// statusDenied: the server's rules (allowlists) do not allow it.
	statusDenied byte = 5
	// The dial failed, and why (SOCKS5 has a reply code for each).
	statusConnRefused byte = 6
	statusHostUnreach byte = 7 // host unreachable, or the name did not resolve
	statusNetUnreach  byte = 8
	statusDialTimeout byte = 9
)

// Kinds of request.
const (
	kindService        byte = 1
	kindSocks          byte = 2
	kindUDP            byte = 3
	kindReverseListen  byte = 4
	kindReverseConnect byte = 5
)

var kindNames = map[byte]string{
	kindService: "service", kindSocks: "socks-connect", kindUDP: "udp",
	kindReverseListen: "reverse-listen", kindReverseConnect: "reverse-connect",
}

// request is a decoded stream request.
type request struct {
	kind byte
	arg  string
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
	// ErrLinkDown means there was no link to the server, and none came up
	// within the link wait (linkwait.go), so a local connection was
	// refused; the error says why the last dial failed.
	ErrLinkDown = errors.New("link to the server is down")
)

// StatusError is a non-OK response from the server; it wraps one of
// ErrUnknownService, ErrDialFailed, ErrBusy, ErrBadRequest, ErrDenied.
type StatusError struct {
	Status byte
	Msg    string
}

func (e *StatusError) Error() string {
	if e.Msg == "" && e.Status == statusBadRequest {
		// A version 1 server answers a version 2 request so, without a
		// reason.
		return fmt.Sprintf("%v: the peer gave no reason; an offload from before stream protocol %d (SOCKS, UDP, reverse forwards) answers so: upgrade it", ErrBadRequest, protoVersion)
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
	case statusUnknownService:
		return ErrUnknownService
	case statusDialFailed, statusConnRefused, statusHostUnreach, statusNetUnreach, statusDialTimeout:
		return ErrDialFailed
	case statusDenied:
		return ErrDenied
	case statusBusy:
		return ErrBusy
	}
	return ErrBadRequest
}

// appendRequest appends a request of kind with arg.
func appendRequest(b []byte, kind byte, arg string) ([]byte, error) {
	if err := checkArg(kind, arg); err != nil {
		return nil, err
	}
	b = append(b, protoVersion, kind)
	b = binary.BigEndian.AppendUint16(b, uint16(len(arg)))
	return append(b, arg...), nil
}

// checkArg checks a request's argument by kind.
func checkArg(kind byte, arg string) error {
	switch kind {
	case kindService, kindUDP:
		if len(arg) == 0 || len(arg) > 255 {
			return fmt.Errorf("%w: service name of %d bytes (want 1..255)", ErrBadRequest, len(arg))
		}
	case kindSocks:
		if len(arg) < 3 || len(arg) > 2+255 {
			return fmt.Errorf("%w: socks-connect argument of %d bytes (want port and a host of 1..255 bytes)", ErrBadRequest, len(arg))
		}
	case kindReverseListen, kindReverseConnect:
		if _, err := netip.ParseAddrPort(arg); err != nil {
			return fmt.Errorf("%w: %s address %q: %w", ErrBadRequest, kindNames[kind], arg, err)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrBadRequest, kind)
	}
	return nil
}

// readRequest reads and checks a request; the argument is at most maxArg
// bytes, so a peer can't make it allocate more.
func readRequest(r io.Reader) (request, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:2]); err != nil {
		return request{}, fmt.Errorf("reading stream request: %w", err)
	}
	if hdr[0] != protoVersion {
		return request{}, fmt.Errorf("%w: stream protocol version %d from the peer, this end speaks %d: upgrade the older end", ErrBadRequest, hdr[0], protoVersion)
	}
	if _, err := io.ReadFull(r, hdr[2:]); err != nil {
		return request{}, fmt.Errorf("reading stream request: %w", err)
	}
	n := binary.BigEndian.Uint16(hdr[2:])
	if n == 0 || n > maxArg {
		return request{}, fmt.Errorf("%w: argument of %d bytes (want 1..%d)", ErrBadRequest, n, maxArg)
	}
	arg := make([]byte, n)
	if _, err := io.ReadFull(r, arg); err != nil {
		return request{}, fmt.Errorf("reading stream request: %w", err)
	}
	req := request{kind: hdr[1], arg: string(arg)}
	if err := checkArg(req.kind, req.arg); err != nil {
		return request{}, err
	}
	return req, nil
}

// socksArg encodes a socks-connect destination: port:u16be | host.
func socksArg(host string, port uint16) string {
	return string(binary.BigEndian.AppendUint16(nil, port)) + host
}

// parseSocksArg decodes socksArg's encoding (checkArg checked the length).
func parseSocksArg(arg string) (host string, port uint16) {
	return arg[2:], binary.BigEndian.Uint16([]byte(arg[:2]))
}

// appendResponse appends a response; msg is cut to 255 bytes.
func appendResponse(b []byte, status byte, msg string) []byte {
	if len(msg) > 255 {
		msg = msg[:255]
	}
	b = append(b, status, byte(len(msg)))
	return append(b, msg...)
}

// readResponse reads the server's response: nil for OK, a *StatusError
// otherwise.
func readResponse(r io.Reader) error {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("reading stream response: %w", err)
	}
	msg := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, msg); err != nil {
		return fmt.Errorf("reading stream response: %w", err)
	}
	if hdr[0] == statusOK {
		return nil
	}
	return &StatusError{Status: hdr[0], Msg: string(msg)}
}

func putChunkHeader(b []byte, n uint32) { binary.BigEndian.PutUint32(b, n) }
