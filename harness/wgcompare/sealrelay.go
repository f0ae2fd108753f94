package wgcompare

// The sealed relay (issue 28): the least a user-space tunnel with offload's
// crypto can do, measured instead of computed. It is the bare relay pair
// (Relay) whose hop between the two relays carries frames sealed as
// offload's record layer seals one: the cipher through an engine
// (software, AF_ALG or /dev/crypto: the same engine.Open spec a config
// names), the suite's MAC over the header and the ciphertext. One goroutine
// per direction does read, seal, write (or read, verify, open, write) in
// turn with blocking calls: no mux, no pipeline, no resumption, no
// handshake, one frame per Read of the plaintext side. What it costs per
// byte beside Relay is the price of the crypto alone on a router, so
// offload beside it is the price of offload's design.
//
// Wire format between the two relays, one frame:
//
//	len     4 bytes  big-endian n, the plaintext bytes in the frame (1..64 KiB)
//	body    pad16(n) bytes  the ciphertext (CBC's plaintext zero-padded)
//	tag     16 bytes  the suite's MAC (record.MAC) of seq, len and body
//
// seq counts the frames of one direction from 0. The IV of frame seq is
// AES(K, seq:u128be) under a fixed key, one software block as offload's
// CBC IV; CTR takes seq·2^32 as its counter. The keys are fixed: this is
// an instrument on a private wire, not a tunnel. A frame whose tag does
// not verify ends the connection.

import (
	"context"
	"crypto/aes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// sealTag is record.TagSize, named here for the wire format above.
const sealTag = record.TagSize

// SealOptions configure a sealed relay.
type SealOptions struct {
	Spec  string // the engine spec, as a config names it
	Suite string // the suite, e.g. aes-256-cbc-poly1305
	// Full makes every frame but a stream's last a full 64 KiB, and
	// wakes each reader only for a whole one: the plaintext socket only
	// when 64 KiB are queued, the sealed one only when a full frame is
	// (SO_RCVLOWAT; either also at the stream's end). So frames are as
	// offload's fill while its pipeline is busy, and neither side pays a
	// wake-up per arriving segment. Without it a frame is whatever one
	// Read returns, and the opening side reads each as it trickles in.
	Full bool
	// Report, if not nil, gets each direction's counts when it ends.
	Report func(SealStats, error)
}

// SealedRelay is Relay with the hop toward target sealed (sealTarget, the
// relay in front of the sender) or the hop from l sealed (the relay in
// front of the sink).
func SealedRelay(l net.Listener, target string, dial func(context.Context, string, string) (net.Conn, error), sealTarget bool, o SealOptions) error {
	s, err := suite.Parse(o.Suite)
	if err != nil {
		return err
	}
	eng, err := engine.Open(o.Spec, engine.Options{})
	if err != nil {
		return err
	}
	// Each direction gets its own crypter and MAC (neither is safe for
	// concurrent use); made before the relay starts so a missing engine
	// fails the command, not the first stream.
	newHop := func() (*sealHop, error) { return newSealHop(eng, s) }
	h, err := newHop()
	if err != nil {
		return err
	}
	h.close()
	return relay(l, target, dial, func(dst, src net.Conn, toTarget bool) {
		defer closeWrite(dst)
		seal := toTarget == sealTarget
		h, err := newHop()
		if err != nil {
			if o.Report != nil {
				o.Report(SealStats{Sealed: seal}, err)
			}
			return
		}
		defer h.close()
		h.st.Sealed = seal
		if o.Full {
			lowat := relayBuf // the plaintext side: a frame's worth
			if !seal {
				lowat = 4 + relayBuf + sealTag // the sealed side: a whole frame
			}
			err = setLowat(src, lowat)
		}
		switch {
		case err != nil:
		case seal:
			err = h.seal(dst, src)
		default:
			err = h.open(dst, src)
		}
		if o.Report != nil {
			o.Report(h.st, err)
		}
	})
}

// SealStats is what one direction of a sealed relay did.
type SealStats struct {
	Sealed bool  // it sealed (else it opened)
	Frames int64 // frames sealed or opened
	Bytes  int64 // their plaintext bytes
	Reads  int64 // Read calls on the source (wake-ups, with Full)
}

func (s SealStats) String() string {
	verb := "opened"
	if s.Sealed {
		verb = "sealed"
	}
	return fmt.Sprintf("%s %d frames, %d bytes (%d a frame, %d reads)", verb, s.Frames, s.Bytes, s.Bytes/max(s.Frames, 1), s.Reads)
}

// sealHop is one direction's crypto: a crypter, a MAC, the IV key and seq.
type sealHop struct {
	st  SealStats
	cr  engine.Crypter
	mac record.MAC
	ivk interface{ Encrypt(dst, src []byte) }
	ctr bool
	seq uint64
	iv  [16]byte
	buf []byte
}

func newSealHop(eng engine.Engine, s suite.Suite) (*sealHop, error) {
	key := make([]byte, s.Cipher.KeySize())
	for i := range key {
		key[i] = byte(i + 1)
	}
	cr, err := eng.NewCrypter(s.Cipher, key)
	if err != nil {
		return nil, fmt.Errorf("sealed relay: %s: %w", eng.Name(), err)
	}
	mk := make([]byte, record.MACKeySize)
	for i := range mk {
		mk[i] = byte(0x80 + i)
	}
	mac, err := record.NewMAC(s.MAC, mk)
	if err != nil {
		_ = cr.Close()
		return nil, err
	}
	ivk, err := aes.NewCipher(mk[:32])
	if err != nil {
		_ = cr.Close()
		return nil, err
	}
	return &sealHop{cr: cr, mac: mac, ivk: ivk, ctr: s.Cipher.Mode == engine.CTR, buf: make([]byte, 4+relayBuf+sealTag)}, nil
}

func (h *sealHop) close() { _ = h.cr.Close() }

// nextIV sets h.iv for frame h.seq.
func (h *sealHop) nextIV() {
	clear(h.iv[:])
	if h.ctr {
		binary.BigEndian.PutUint64(h.iv[:8], h.seq>>32)
		binary.BigEndian.PutUint64(h.iv[8:], h.seq<<32)
		return
	}
	binary.BigEndian.PutUint64(h.iv[8:], h.seq)
	h.ivk.Encrypt(h.iv[:], h.iv[:])
}

func pad16(n int) int { return (n + 15) &^ 15 }

// seal reads plaintext from src and writes frames to dst until src ends.
func (h *sealHop) seal(dst, src net.Conn) error {
	for {
		n, err := src.Read(h.buf[4 : 4+relayBuf])
		h.st.Reads++
		if n > 0 {
			p := n
			if !h.ctr {
				p = pad16(n)
				clear(h.buf[4+n : 4+p])
			}
			binary.BigEndian.PutUint32(h.buf, uint32(n))
			body := h.buf[4 : 4+p]
			h.nextIV()
			if cerr := h.cr.Encrypt(body, body, h.iv[:]); cerr != nil {
				return cerr
			}
			var tag [sealTag]byte
			h.mac.Sum(&tag, h.seq, h.buf[:4+p])
			copy(h.buf[4+p:], tag[:])
			h.seq++
			h.st.Frames, h.st.Bytes = h.st.Frames+1, h.st.Bytes+int64(n)
			if _, werr := dst.Write(h.buf[:4+p+sealTag]); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// errSealTag is a frame whose tag did not verify.
var errSealTag = errors.New("sealed relay: a frame's tag does not verify")

// open reads frames from src and writes their plaintext to dst until src
// ends.
func (h *sealHop) open(dst, src net.Conn) error {
	r := countingReader{src, &h.st.Reads}
	for {
		if _, err := io.ReadFull(r, h.buf[:4]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(h.buf))
		if n == 0 || n > relayBuf {
			return fmt.Errorf("sealed relay: frame of %d bytes", n)
		}
		p := n
		if !h.ctr {
			p = pad16(n)
		}
		if _, err := io.ReadFull(r, h.buf[4:4+p+sealTag]); err != nil {
			return err
		}
		if !h.mac.Verify(h.buf[4+p:4+p+sealTag], h.seq, h.buf[:4+p]) {
			return errSealTag
		}
		body := h.buf[4 : 4+p]
		h.nextIV()
		if err := h.cr.Decrypt(body, body, h.iv[:]); err != nil {
			return err
		}
		h.seq++
		h.st.Frames, h.st.Bytes = h.st.Frames+1, h.st.Bytes+int64(n)
		if _, err := dst.Write(body[:n]); err != nil {
			return err
		}
	}
}

// countingReader counts the Read calls on r.
type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	*c.n++
	return c.r.Read(p)
}
