package mux

import (
	"errors"
	"os"
)

// Errors of a Session and its Streams.
var (
	// ErrProtocol means the peer broke the wire protocol (a frame past a
	// stream's window, an unknown type or version, a duplicate SYN): the
	// session is closed. The peer is not a compatible yamux.
	ErrProtocol = errors.New("mux: protocol error")
	// ErrSessionShutdown means the session is closed: open a new one.
	ErrSessionShutdown = errors.New("mux: session shutdown")
	// ErrRemoteGoAway means the peer sent GoAway: it takes no new streams
	// on this session; open them on a new one.
	ErrRemoteGoAway = errors.New("mux: remote end is not accepting connections")
	// ErrStreamReset means the stream was reset, by the peer (which may
	// have refused it) or by this end (Reset, an overrun of the session's
	// receive budget, an open that timed out).
	ErrStreamReset = errors.New("mux: stream reset")
	// ErrStreamClosed means a Write after Close or CloseWrite.
	ErrStreamClosed = errors.New("mux: stream closed")
	// ErrStreamsExhausted means this end used up its stream ids: open a
	// new session.
	ErrStreamsExhausted = errors.New("mux: stream ids exhausted")
	// ErrPingFlood means the peer sent pings faster than a keepalive
	// does (more than PingBurst at once, or PingRate a second after
	// that): the session is closed.
	ErrPingFlood = errors.New("mux: peer flooded yamux pings")
	// ErrKeepAlive means a keepalive ping had no answer in time: the
	// session is closed.
	ErrKeepAlive = errors.New("mux: keepalive timeout")
	// ErrTimeout is a deadline that passed; it is a net.Error whose
	// Timeout is true, and it matches os.ErrDeadlineExceeded.
	ErrTimeout error = timeoutError{}
)

type timeoutError struct{}

func (timeoutError) Error() string        { return "mux: i/o deadline reached" }
func (timeoutError) Timeout() bool        { return true }
func (timeoutError) Temporary() bool      { return true }
func (timeoutError) Is(target error) bool { return target == os.ErrDeadlineExceeded }
