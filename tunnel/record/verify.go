package record

import (
	"bytes"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/offload-dev/offload/engine"
)

// Verification of engine output.
//
// The tag covers whatever ciphertext an engine produced, so a device that
// silently miscomputes would send corrupt data under a valid tag, and one
// that miscomputes a decryption would deliver corrupt plaintext. A
// Verifier (Options.Verify) re-does one in Every frames that an engine
// other than software encrypted or decrypted in software, and compares,
// before the result is used: before the frame is tagged and sent, or
// before its plaintext is delivered. The hook is one call in worker.crypt
// (frame.go), right after the engine returned:
//
//	if err == nil {
//		err = w.c.opt.Verify.check(w, idx, w.spare[HeaderSize:HeaderSize+n], src)
//	}
//
// A mismatch is an engine failure like any other there: the engine's
// output is dropped, software redoes the frame (Stats.Fallbacks, the rate
// limited warning), and the link stays up. The Verifier also counts it and
// calls OnMismatch, which takes the engine out for good (the tunnel's
// engine checks). Frames an engine seals or opens whole (afalg-aead's
// FrameSealer, mac_aead.go) are not re-checked here.

// ErrMismatch means an engine's output differed from the software
// engine's for the same input: the engine miscomputes and must not be
// used. The frame is redone in software.
var ErrMismatch = errors.New("record: engine output differs from software")

// Excluder is implemented by a Policy that can stop picking an engine
// found to give wrong answers: after Exclude(idx, why), Pick never returns
// idx again. It is called rarely and from any goroutine.
type Excluder interface {
	Exclude(idx int, why error)
}

// Verifier re-checks engine output against software. One Verifier may
// serve every link of a server or client (give it to each Options), so
// its counters add up. A nil *Verifier checks nothing.
type Verifier struct {
	every      uint64
	onMismatch func(idx int, err error)
	n          atomic.Uint64 // engine frames seen, to pick one in every

	// Checked counts, per engine index, the frames re-done in software
	// and compared; Mismatches the ones that differed.
	Checked    [MaxEngines]atomic.Uint64
	Mismatches [MaxEngines]atomic.Uint64
}

// NewVerifier returns a Verifier that checks one in every frames an
// engine other than software processed (every 1: all of them; 0: none)
// and calls onMismatch (if not nil) with the engine index and an error
// wrapping ErrMismatch for each one that differed.
func NewVerifier(every int, onMismatch func(idx int, err error)) *Verifier {
	return &Verifier{every: uint64(max(every, 0)), onMismatch: onMismatch}
}

// Every is the sampling rate NewVerifier got.
func (v *Verifier) Every() int {
	if v == nil {
		return 0
	}
	return int(v.every)
}

// check compares out, what engine idx produced from in with w.iv in w's
// direction, with what software produces, for one in v.every calls. It
// returns an error wrapping ErrMismatch when they differ, and nil when
// they agree or the frame is not picked. in must still hold the input
// (engines other than software write out of place).
func (v *Verifier) check(w *worker, idx int, out, in []byte) error {
	if v == nil || v.every == 0 || idx == 0 || v.n.Add(1)%v.every != 0 {
		return nil
	}
	cr, err := w.crypter(0)
	if err != nil {
		return err
	}
	ref := getBuf(len(in))
	defer putBuf(ref)
	if err := engine.Crypt(cr, w.dir, ref[:len(in)], in, w.iv[:]); err != nil {
		return fmt.Errorf("record: verifying against software: %w", err)
	}
	v.Checked[idx].Add(1)
	if bytes.Equal(ref[:len(in)], out[:len(in)]) {
		return nil
	}
	v.Mismatches[idx].Add(1)
	err = fmt.Errorf("%w: engine %s, %v of %d bytes", ErrMismatch, w.c.opt.Engines[idx].Name(), w.dir, len(in))
	if v.onMismatch != nil {
		v.onMismatch(idx, err)
	}
	return err
}
