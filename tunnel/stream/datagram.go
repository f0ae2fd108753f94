package stream

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Datagrams. A udp stream (kind 3) carries, after the response, each
// direction's datagrams one by one, framed with their length:
//
//	datagram = len:u16be | data[len]      1 ≤ len ≤ MaxDatagram
//
// A datagram larger than MaxDatagram is dropped where it is read, never
// cut; a frame larger than it on a stream is a protocol error.
const (
	// MaxDatagram is the largest datagram carried: a jumbo frame's
	// payload (9000-byte MTU) fits, so does any DNS answer over UDP
	// (EDNS0 is at most 4096 in practice); a bigger one is refused.
	MaxDatagram = 9216
	// DatagramHeader is the length before each datagram.
	DatagramHeader = 2
)

// PutDatagramHeader writes the header of a datagram of n bytes to b.
func PutDatagramHeader(b []byte, n int) { binary.BigEndian.PutUint16(b, uint16(n)) }

// ReadDatagrams reads framed datagrams from r until it fails, calling
// send with each; send's error ends it too. A frame of 0 or more than
// MaxDatagram bytes is a protocol error.
func ReadDatagrams(r io.Reader, send func([]byte) error) error {
	buf := make([]byte, MaxDatagram)
	var hdr [DatagramHeader]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n == 0 || n > MaxDatagram {
			return fmt.Errorf("%w: datagram frame of %d bytes (want 1..%d)", ErrBadRequest, n, MaxDatagram)
		}
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return err
		}
		if err := send(buf[:n]); err != nil {
			return err
		}
	}
}
