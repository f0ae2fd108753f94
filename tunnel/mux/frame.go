// Package mux multiplexes streams over one connection with the yamux wire
// protocol (hashicorp/yamux's spec.md, version 0), so that either end may
// be hashicorp/yamux. It is offload's own implementation, built for the
// tunnel's data path on router CPUs: no goroutine per stream, no buffer
// held by a stream with nothing buffered, a frame's body read straight
// into the receiving stream's pooled segment and handed to the consumer
// without another copy, a Write put on the connection by the writer
// itself (or, with Fill, its body written by the caller straight into the
// connection's buffer), and one receive budget in bytes for the whole
// session.
//
// The wire format, every frame a 12-byte header, big-endian:
//
//	 0        1        2        4                8                12
//	+--------+--------+--------+----------------+----------------+
//	| ver=0  | type   | flags  | stream id u32  | length u32     |
//	+--------+--------+--------+----------------+----------------+
//	| body: length bytes, Data frames only                       |
//
//	type 0 Data          length = body bytes (each counts against the
//	                     receiver's window of the stream)
//	type 1 WindowUpdate  length = window credit added (a delta)
//	type 2 Ping          stream 0; length = opaque, echoed back with ACK
//	type 3 GoAway        stream 0; length = code: 0 normal, 1 protocol
//	                     error, 2 internal error
//
//	flags (on Data and WindowUpdate; SYN/ACK also on Ping):
//	  0x1 SYN  opens a stream (client ids odd, server ids even; 0 is the
//	           session), or asks for a ping's echo
//	  0x2 ACK  accepts a stream, or is a ping's echo
//	  0x4 FIN  half-close: the sender sends no more data
//	  0x8 RST  resets the stream at once (also: the stream is refused)
//
// Every stream starts with a 256 KiB window in each direction; the
// receiver raises it with WindowUpdate frames as its consumer reads.
// Sending past the window is a protocol error: the session is closed.
package mux

import (
	"encoding/binary"
	"fmt"
)

// Frame types.
const (
	typeData         uint8 = 0
	typeWindowUpdate uint8 = 1
	typePing         uint8 = 2
	typeGoAway       uint8 = 3
)

// Flags.
const (
	flagSYN uint16 = 1
	flagACK uint16 = 2
	flagFIN uint16 = 4
	flagRST uint16 = 8
)

// GoAway codes.
const (
	goAwayNormal   uint32 = 0
	goAwayProtocol uint32 = 1
	goAwayInternal uint32 = 2
)

const (
	protoVersion = 0
	// HeaderSize is the size of a frame header.
	HeaderSize = 12
	// InitialWindow is every stream's receive window at its start, in
	// each direction; no frame can take it back.
	InitialWindow = 256 << 10
)

// header is a decoded frame header.
type header struct {
	typ    uint8
	flags  uint16
	stream uint32
	length uint32
}

func (h header) String() string {
	return fmt.Sprintf("type %d flags %#x stream %d length %d", h.typ, h.flags, h.stream, h.length)
}

// encode writes h to b (HeaderSize bytes).
func (h header) encode(b []byte) {
	_ = b[HeaderSize-1]
	b[0] = protoVersion
	b[1] = h.typ
	binary.BigEndian.PutUint16(b[2:], h.flags)
	binary.BigEndian.PutUint32(b[4:], h.stream)
	binary.BigEndian.PutUint32(b[8:], h.length)
}

// decodeHeader checks and decodes a frame header: a version or type this
// end does not know is a protocol error (as for hashicorp/yamux). A
// stream frame for stream 0 is a stray frame like one for any stream that
// does not exist; the stream id of a session frame is ignored.
func decodeHeader(b []byte) (header, error) {
	_ = b[HeaderSize-1]
	h := header{
		typ:    b[1],
		flags:  binary.BigEndian.Uint16(b[2:]),
		stream: binary.BigEndian.Uint32(b[4:]),
		length: binary.BigEndian.Uint32(b[8:]),
	}
	if b[0] != protoVersion {
		return h, fmt.Errorf("%w: version %d (want %d)", ErrProtocol, b[0], protoVersion)
	}
	if h.typ > typeGoAway {
		return h, fmt.Errorf("%w: unknown frame type %d", ErrProtocol, h.typ)
	}
	return h, nil
}
