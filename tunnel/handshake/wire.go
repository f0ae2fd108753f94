package handshake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/offload-dev/offload/tunnel/suite"
)

// Wire format (docs/protocol.md):
//
//	hello   = "OFLD" | version:u8 | n:u8 | suite[n]        client → server, once
//	message = type:u8 | len:u16be | body[len]              both ways, len ≤ msgMax
//	alert   = code:u8 | detail                             body of a msgAlert
//	confirm = 32 bytes                                     body of a msgConfirm
//	payload = max_frame:u32be                              each Noise payload, version 3
//
// Flow: hello | noise(msg1) →, ← noise(msg2) or alert, confirm → (then
// record frames). Version 3 carries each end's max_frame, the largest
// frame it accepts, in its Noise payload (encrypted and authenticated);
// version 2's payloads are empty.
const (
	magic        = "OFLD"
	helloFixed   = len(magic) + 2
	suiteNameMax = 64
	helloMax     = helloFixed + suiteNameMax

	msgHeader = 3
	// msgMax caps every message body a peer can make us read: the read
	// buffer is a fixed array of msgHeader+msgMax bytes, so an
	// unauthenticated peer makes the server allocate nothing per byte sent.
	msgMax = 256

	msgNoise   byte = 1
	msgAlert   byte = 2
	msgConfirm byte = 3 // the client's key confirmation, version 2 on

	// confirmLen is the length of the key confirmation (HKDF-SHA256 output).
	confirmLen = 32

	// noiseMsgLen is the length of both Noise messages of version 2,
	// whose payload is empty: an ephemeral key (32) and the AEAD tag of
	// the payload (16).
	noiseMsgLen = 32 + 16
	// payloadLen is the payload from payloadVersion on: max_frame, u32be.
	payloadLen = 4
	// payloadVersion is the first version whose Noise messages carry it.
	payloadVersion = 3
	// noiseMsgMax is the longest Noise message of any version.
	noiseMsgMax = noiseMsgLen + payloadLen

	alertMax = 1 + suiteNameMax
)

// Alert codes.
const (
	alertVersion  byte = 1 // detail: the server's version, one byte
	alertSuite    byte = 2 // detail: the server's suite name
	alertAuth     byte = 3 // detail: empty
	alertProtocol byte = 4 // detail: empty
	alertBusy     byte = 5 // detail: empty; the server is at its link limit
)

// noiseLen is the length of both Noise messages of version v.
func noiseLen(v byte) int {
	if v >= payloadVersion {
		return noiseMsgLen + payloadLen
	}
	return noiseMsgLen
}

// prologue is the hello as this side would send it: both sides compute it
// from their own configuration (and the version the client chose), so a
// hello altered in transit makes the prologues, and then the first AEAD
// tag, differ.
func prologue(v byte, s suite.Suite) []byte {
	return appendHello(make([]byte, 0, helloMax), v, s.String())
}

func appendHello(b []byte, version byte, suiteName string) []byte {
	b = append(b, magic...)
	b = append(b, version, byte(len(suiteName)))
	return append(b, suiteName...)
}

// readHello reads the client hello into fixed buffers. The suite name is
// returned only if it is well formed.
func readHello(r io.Reader) (version byte, suiteName string, err error) {
	var buf [helloMax]byte
	if _, err := io.ReadFull(r, buf[:helloFixed]); err != nil {
		return 0, "", fmt.Errorf("%w: reading hello: %w", ErrProtocol, eof(err))
	}
	if string(buf[:len(magic)]) != magic {
		return 0, "", fmt.Errorf("%w: bad magic %q (peer is not an offload client)", ErrProtocol, buf[:len(magic)])
	}
	version = buf[len(magic)]
	n := int(buf[len(magic)+1])
	if n == 0 || n > suiteNameMax {
		return 0, "", fmt.Errorf("%w: suite name of %d bytes", ErrProtocol, n)
	}
	name := buf[helloFixed : helloFixed+n]
	if _, err := io.ReadFull(r, name); err != nil {
		return 0, "", fmt.Errorf("%w: reading hello: %w", ErrProtocol, eof(err))
	}
	if !validSuiteName(name) {
		return 0, "", fmt.Errorf("%w: malformed suite name", ErrProtocol)
	}
	return version, string(name), nil
}

// validSuiteName accepts what a suite name can look like ([a-z0-9-], at
// most 64 bytes), so error messages never carry a peer's arbitrary bytes.
func validSuiteName(b []byte) bool {
	if len(b) == 0 || len(b) > suiteNameMax {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func appendAlert(b []byte, code byte, detail string) []byte {
	b = append(b, msgAlert)
	b = binary.BigEndian.AppendUint16(b, uint16(1+len(detail)))
	b = append(b, code)
	return append(b, detail...)
}

func parseAlert(body []byte) (code byte, detail []byte, err error) {
	if len(body) < 1 || len(body) > alertMax {
		return 0, nil, fmt.Errorf("%w: alert of %d bytes", ErrProtocol, len(body))
	}
	return body[0], body[1:], nil
}

// msgReader reads messages into its fixed buffer; a body is valid until
// the next read.
type msgReader struct {
	buf [msgHeader + msgMax]byte
}

func (m *msgReader) read(r io.Reader) (typ byte, body []byte, err error) {
	if _, err := io.ReadFull(r, m.buf[:msgHeader]); err != nil {
		return 0, nil, fmt.Errorf("%w: reading message header: %w", ErrProtocol, eof(err))
	}
	typ = m.buf[0]
	n := int(binary.BigEndian.Uint16(m.buf[1:msgHeader]))
	if n > msgMax {
		return 0, nil, fmt.Errorf("%w: message of %d bytes exceeds the cap of %d", ErrProtocol, n, msgMax)
	}
	body = m.buf[msgHeader : msgHeader+n]
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, fmt.Errorf("%w: reading message body: %w", ErrProtocol, eof(err))
	}
	return typ, body, nil
}

// eof makes a clean io.EOF in the middle of the handshake an unexpected one:
// the peer closed before the handshake was done.
func eof(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
