package record

import (
	"errors"
	"fmt"
	"net"
)

// Errors of the record layer. Every one of them but ErrSuite and ErrClosed
// means the link failed and is closed: every pending and later Read and
// Write returns it. The tunnel should drop the link (and every stream on
// it) and, on the client, redial: a fresh handshake gives fresh keys.
var (
	// ErrAuth means a frame's tag did not verify: the frame was corrupted,
	// forged, replayed or reordered on the way, or the peer has other keys.
	// Nothing of the frame was delivered.
	ErrAuth = errors.New("record: frame authentication failed")

	// ErrFrameTooLarge means a frame header announced more than this
	// end's MaxFrame. Nothing of the body was read. A peer that knows it
	// (Keys.PeerMaxFrame, protocol version 3) sends no more, so this is
	// an attack or corruption; an older peer may have a larger MaxFrame
	// set.
	ErrFrameTooLarge = errors.New("record: frame too large")

	// ErrBadLength means a frame header announced a length the cipher can
	// not have produced (zero, or not a multiple of 16 for CBC).
	ErrBadLength = errors.New("record: bad frame length")

	// ErrPadding means a CBC frame whose tag verified carried bad PKCS#7
	// padding: the peer is broken. It is checked only after the tag, so it
	// is no padding oracle.
	ErrPadding = errors.New("record: bad padding")

	// ErrKeyExhausted means the peer sent MaxFrames frames under one
	// epoch's keys without moving to the next (rekey.go): a broken or
	// hostile peer. The link is closed before the key is used further.
	// Redial: the next handshake gives fresh keys.
	ErrKeyExhausted = errors.New("record: key use limit reached, link must be re-established")

	// ErrClosed is returned by Read and Write after Close. It wraps
	// net.ErrClosed, like a closed TCP connection.
	ErrClosed = fmt.Errorf("record: %w", net.ErrClosed)

	// ErrPeerReset means the connection was reset (ECONNRESET) while
	// the link waited for the next frame's header: the peer closed its
	// socket with data unread, which makes its kernel reset rather than
	// close, so it is a hang-up, not tampering. Nothing of any frame was
	// lost or delivered in part. A reset inside a frame is not this.
	ErrPeerReset = errors.New("record: the peer reset the link between frames")

	// ErrSuite means New was given a suite the record layer does not
	// implement (unknown MAC). Fix the configuration.
	ErrSuite = errors.New("record: unsupported suite")
)
