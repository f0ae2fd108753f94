package resume

// Agreeing to resume, at the start of every link, before the session
// (docs/protocol.md section 4):
//
//	offer   = 00 02 0001 00000000 4f465233           both ends, first: a yamux ping SYN, opaque "OFR3"
//	hello   = 0x03 | bound:u32be | session[16] | proof[32] | received:u64be     client → server
//	welcome = 0x04 | status:u8 | bound:u32be | session[16] | received:u64be | n:u8 | reason[n]
//	          status 0: a new session (session zero in the hello); 1: resumed;
//	          2: resumption refused (reason), this is a new session
//
// Each end that resumes sends the offer first and reads the peer's first
// frame: the peer's offer means both resume. An end without resumption
// runs yamux from the start, whose first frame is something else (its
// answer to our ping, opaque "OFR3" with ACK, or a frame of its own): the
// link goes on as plain yamux. A yamux end answers a ping at once, so
// neither end waits on an idle older peer. The proof is
//	proof = HMAC-SHA256(secret(previous link), "offload resume proof" | session | binding(this link))
//
// with secret and binding drawn by HKDF from each link's record keys
// (Secrets): only an end of the previous link knows the secret, and the
// binding ties the proof to the link it is sent on, so a proof recorded on
// one link fails on any other. Each link draws its own secret, so a
// session's secret changes with every link: single use.

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
)

// The offer (a yamux ping: type 2, flag SYN 1) and an older peer's
// answer to it (flag ACK 2, the opaque value echoed).
var (
	offerFrame = [12]byte{0, 2, 0, 1, 0, 0, 0, 0, 'O', 'F', 'R', '3'}
	echoFrame  = [12]byte{0, 2, 0, 2, 0, 0, 0, 0, 'O', 'F', 'R', '3'}
)

const (
	typeHello   = 0x03
	typeWelcome = 0x04

	helloLen = 1 + 4 + 16 + 32 + 8

	// Welcome statuses.
	StatusNew     = 0
	StatusResumed = 1
	StatusRefused = 2
	maxReason     = 255
)

// Negotiate sends the offer on a new link and reads the peer's first
// frame. resume: the peer offered too. Otherwise prefix is the peer's
// first frame header for its yamux session to read first (nil if it was
// the answer to our offer, which the session has no use for).
func Negotiate(rw io.ReadWriter) (resume bool, prefix []byte, err error) {
	if _, err := rw.Write(offerFrame[:]); err != nil {
		return false, nil, err
	}
	var f [12]byte
	if _, err := io.ReadFull(rw, f[:]); err != nil {
		return false, nil, err
	}
	switch f {
	case offerFrame:
		return true, nil, nil
	case echoFrame:
		return false, nil, nil
	}
	return false, f[:], nil
}

// The malformed messages (the callers say which link, and wrap).
var (
	errNotHello   = fmt.Errorf("%w: not a hello", ErrProtocol)
	errNotWelcome = fmt.Errorf("%w: not a welcome (type, status or reason)", ErrProtocol)
	errBound      = fmt.Errorf("%w: bound below %d", ErrProtocol, MinBound)
)

// Hello is the client's first message on an agreed link.
type Hello struct {
	Bound    uint32
	Session  [16]byte // zero: a new session
	Proof    [32]byte
	Received uint64
}

// Welcome is the server's answer.
type Welcome struct {
	Status   byte
	Bound    uint32
	Session  [16]byte
	Received uint64
	Reason   string // why a resumption was refused
}

// WriteHello sends h.
func WriteHello(w io.Writer, h Hello) error {
	var b [helloLen]byte
	b[0] = typeHello
	binary.BigEndian.PutUint32(b[1:], h.Bound)
	copy(b[5:], h.Session[:])
	copy(b[21:], h.Proof[:])
	binary.BigEndian.PutUint64(b[53:], h.Received)
	_, err := w.Write(b[:])
	return err
}

// ReadHello reads a hello.
func ReadHello(r io.Reader) (Hello, error) {
	var b [helloLen]byte
	var h Hello
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return h, err
	}
	if b[0] != typeHello {
		return h, errNotHello
	}
	h.Bound = binary.BigEndian.Uint32(b[1:])
	copy(h.Session[:], b[5:])
	copy(h.Proof[:], b[21:])
	h.Received = binary.BigEndian.Uint64(b[53:])
	if h.Bound < MinBound {
		return h, errBound
	}
	return h, nil
}

// WriteWelcome sends w.
func WriteWelcome(wr io.Writer, w Welcome) error {
	reason := w.Reason
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b := make([]byte, 0, 31+len(reason))
	b = append(b, typeWelcome, w.Status)
	b = binary.BigEndian.AppendUint32(b, w.Bound)
	b = append(b, w.Session[:]...)
	b = binary.BigEndian.AppendUint64(b, w.Received)
	b = append(b, byte(len(reason)))
	b = append(b, reason...)
	_, err := wr.Write(b)
	return err
}

// ReadWelcome reads a welcome.
func ReadWelcome(r io.Reader) (Welcome, error) {
	var b [31]byte
	var w Welcome
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return w, err
	}
	if b[0] != typeWelcome || b[1] > StatusRefused {
		return w, errNotWelcome
	}
	w.Status = b[1]
	w.Bound = binary.BigEndian.Uint32(b[2:])
	copy(w.Session[:], b[6:])
	w.Received = binary.BigEndian.Uint64(b[22:])
	reason := make([]byte, b[30])
	if _, err := io.ReadFull(r, reason); err != nil {
		return w, err
	}
	for _, c := range reason {
		if c < 0x20 || c > 0x7e {
			return w, errNotWelcome
		}
	}
	w.Reason = string(reason)
	if w.Bound < MinBound {
		return w, errBound
	}
	return w, nil
}

// Secrets draws a link's resumption secret and binding from its epoch-0
// record MAC keys (client→server, server→client), which both ends hold:
//
//	secret  = HKDF-SHA256(secret = K_mac_c2s | K_mac_s2c, salt = none, info = "offload resume secret", 32)
//	binding = HKDF-SHA256(same, info = "offload resume binding", 32)
//
// HKDF is one-way: neither reveals the record keys.
func Secrets(macC2S, macS2C []byte) (secret, binding [32]byte, err error) {
	ikm := append(append(make([]byte, 0, len(macC2S)+len(macS2C)), macC2S...), macS2C...)
	defer clear(ikm)
	for _, x := range []struct {
		out  *[32]byte
		info string
	}{{&secret, "offload resume secret"}, {&binding, "offload resume binding"}} {
		k, err := hkdf.Key(sha256.New, ikm, nil, x.info, 32)
		if err != nil {
			return secret, binding, fmt.Errorf("resume: deriving secrets: %w", err)
		}
		copy(x.out[:], k)
		clear(k)
	}
	return secret, binding, nil
}

// Proof is what a client sends on the link with binding to resume session
// under the secret of the session's previous link.
func Proof(secret [32]byte, session [16]byte, binding [32]byte) [32]byte {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte("offload resume proof"))
	m.Write(session[:])
	m.Write(binding[:])
	var out [32]byte
	copy(out[:], m.Sum(nil))
	return out
}

// CheckProof compares in constant time.
func CheckProof(secret [32]byte, session [16]byte, binding [32]byte, proof [32]byte) bool {
	want := Proof(secret, session, binding)
	return hmac.Equal(want[:], proof[:])
}
