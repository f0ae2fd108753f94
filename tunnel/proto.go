package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The stream protocol. Every yamux stream carries one forwarded connection:
//
//	client → server   request:  version:u8 (=1) | nameLen:u8 (1..255) | name
//	server → client   response: status:u8 | msgLen:u8 | msg
//
// then, in each direction, chunks:
//
//	chunk = len:u32be | data[len]      1 ≤ len ≤ maxChunk
//	      | 0x00000000                 end: this direction is complete (half-close)
//	      | 0xffffffff                 abort: the connection failed on the sender's side
//
// A stream's yamux FIN (Close) is sent only once both directions are
// complete, or after an abort. A direction that ends (EOF, reset, link gone)
// before its end marker ended with an error: the receiving side resets its
// TCP connection instead of closing it cleanly.
const (
	protoVersion = 1

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
)

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
	// response: it is not a compatible offload.
	ErrBadRequest = errors.New("malformed stream request")
	// ErrAborted means the other end of a stream reported that its
	// connection failed (an abort marker), or that the stream ended before
	// its end marker: the transfer is incomplete.
	ErrAborted = errors.New("stream aborted")
	// ErrLinkDown means no link to the server came up within the dial
	// timeout, so a local connection was refused.
	ErrLinkDown = errors.New("link to the server is down")
)

// StatusError is a non-OK response from the server; it wraps one of
// ErrUnknownService, ErrDialFailed, ErrBusy, ErrBadRequest.
type StatusError struct {
	Status byte
	Msg    string
}

func (e *StatusError) Error() string {
	if e.Msg == "" {
		return e.Unwrap().Error()
	}
	return e.Unwrap().Error() + ": " + e.Msg
}

// Unwrap returns the sentinel for the status.
func (e *StatusError) Unwrap() error {
	switch e.Status {
	case statusUnknownService:
		return ErrUnknownService
	case statusDialFailed:
		return ErrDialFailed
	case statusBusy:
		return ErrBusy
	}
	return ErrBadRequest
}

// appendRequest appends the request for service.
func appendRequest(b []byte, service string) ([]byte, error) {
	if len(service) == 0 || len(service) > 255 {
		return nil, fmt.Errorf("%w: service name of %d bytes (want 1..255)", ErrBadRequest, len(service))
	}
	b = append(b, protoVersion, byte(len(service)))
	return append(b, service...), nil
}

// readRequest reads a request; the name is at most 255 bytes, so a peer
// can't make it allocate more.
func readRequest(r io.Reader) (string, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", fmt.Errorf("reading stream request: %w", err)
	}
	if hdr[0] != protoVersion {
		return "", fmt.Errorf("%w: version %d, want %d", ErrBadRequest, hdr[0], protoVersion)
	}
	if hdr[1] == 0 {
		return "", fmt.Errorf("%w: empty service name", ErrBadRequest)
	}
	name := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, name); err != nil {
		return "", fmt.Errorf("reading stream request: %w", err)
	}
	return string(name), nil
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
