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
// (worker.go), right after the engine returned:
//
//	if err == nil {
//		err = w.c.opt.Verify.check(w, idx, w.spare[HeaderSize:HeaderSize+n], src)
//	}
//
// A mismatch is an engine failure like any other there: the engine's
// output is dropped, software redoes the frame (Stats.Fallbacks, the rate
// limited warning), and the link stays up. The Verifier also counts it and
// calls OnMismatch, which takes the engine out for good (the tunnel's
// engine checks).
//
// Frames an engine seals or opens whole (a FrameSealer: cipher and HMAC in
// one request, wholeframe.go) are checked whole: ciphertext and tag against
// software's, and on opening also the tag the engine accepted. Two more
// hooks in worker.go do that, in worker.seal after sealWhole:
//
//	if done && err == nil && w.c.opt.Verify.checkSealed(w, idx, f, n) != nil {
//		idx, done = 0, false // verify.go put the plaintext back: software seals it
//	}
//
// and in worker.open after openWhole succeeded:
//
//	if err = w.c.opt.Verify.checkOpened(w, idx, f, n); err == nil {
//		return w.unpad(f, n)
//	}
//	idx = 0 // verify.go put the frame back: software checks and opens it

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

// picked reports whether this frame of engine idx is one to check.
func (v *Verifier) picked(idx int) bool {
	return v != nil && v.every != 0 && idx != 0 && v.n.Add(1)%v.every == 0
}

// mismatch counts and reports a mismatch of engine idx.
func (v *Verifier) mismatch(w *worker, idx int, what string, n int) error {
	v.Mismatches[idx].Add(1)
	err := fmt.Errorf("%w: engine %s, %s of %d bytes", ErrMismatch, w.c.opt.Engines[idx].Name(), what, n)
	if v.onMismatch != nil {
		v.onMismatch(idx, err)
	}
	return err
}

// check compares out, what engine idx produced from in with w.iv in w's
// direction, with what software produces, for one in v.every calls. It
// returns an error wrapping ErrMismatch when they differ, and nil when
// they agree or the frame is not picked. in must still hold the input
// (engines other than software write out of place).
func (v *Verifier) check(w *worker, idx int, out, in []byte) error {
	if !v.picked(idx) {
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
	return v.mismatch(w, idx, w.dir.String(), len(in))
}

// checkSealed checks frame f that engine idx sealed whole (sealWhole): f.buf
// holds header | ciphertext[n] | tag, and w.spare still holds the padded
// plaintext at HeaderSize. When the ciphertext or the tag differs from
// software's it puts the plaintext back into f.buf, takes the frame off
// the engine's count, reports the engine's failure (w.fallback) and
// returns an error wrapping ErrMismatch: the caller then seals f in
// software. Whenever it returns an error, f is back as it was before
// sealWhole (if software itself failed, the caller's software seal fails
// the frame too).
func (v *Verifier) checkSealed(w *worker, idx int, f *frame, n int) error {
	if !v.picked(idx) {
		return nil
	}
	cr, err := w.crypter(0)
	if err == nil {
		ref := getBuf(HeaderSize + n)
		defer putBuf(ref)
		copy(ref[:HeaderSize], f.buf[:HeaderSize])
		err = cr.Encrypt(ref[HeaderSize:HeaderSize+n], w.spare[HeaderSize:HeaderSize+n], w.iv[:])
		if err == nil {
			w.mac.Sum(&w.sum, f.seq, ref[:HeaderSize+n])
			v.Checked[idx].Add(1)
			if bytes.Equal(ref[HeaderSize:HeaderSize+n], f.buf[HeaderSize:HeaderSize+n]) && bytes.Equal(w.sum[:], f.buf[HeaderSize+n:HeaderSize+n+TagSize]) {
				return nil
			}
			err = v.mismatch(w, idx, "whole-frame seal", n)
		}
	}
	v.undo(w, idx, f, n, err)
	return err
}

// checkOpened checks frame f that engine idx opened whole (openWhole):
// f.buf holds the padded plaintext[n] at HeaderSize, and w.spare still
// holds the wire frame the engine accepted. The tag must verify in
// software too and the plaintext must be software's. Otherwise it puts the
// wire frame back into f.buf, as checkSealed does, and returns an error
// wrapping ErrMismatch: the caller then checks the tag and opens f in
// software (a forged frame the engine let through fails there, ErrAuth).
// Whenever it returns an error, f is back as it was before openWhole.
func (v *Verifier) checkOpened(w *worker, idx int, f *frame, n int) error {
	if !v.picked(idx) {
		return nil
	}
	cr, err := w.crypter(0)
	if err == nil {
		wire := w.spare[:HeaderSize+n+TagSize]
		v.Checked[idx].Add(1)
		what := "whole-frame open of a frame whose tag does not verify"
		if w.mac.Verify(wire[HeaderSize+n:], f.seq, wire[:HeaderSize+n]) {
			ref := getBuf(n)
			defer putBuf(ref)
			if err = cr.Decrypt(ref[:n], wire[HeaderSize:HeaderSize+n], w.iv[:]); err == nil && bytes.Equal(ref[:n], f.buf[HeaderSize:HeaderSize+n]) {
				return nil
			}
			what = "whole-frame open"
		}
		if err == nil {
			err = v.mismatch(w, idx, what, n)
		}
	}
	v.undo(w, idx, f, n, err)
	return err
}

// undo puts the frame's input back into f.buf (the engine wrote out of
// place, so it is in w.spare), moves its count off engine idx (software
// will count it) and reports the engine's failure.
func (v *Verifier) undo(w *worker, idx int, f *frame, n int, err error) {
	f.buf, w.spare = w.spare[:len(w.spare)], f.buf
	w.c.stats.Frames[w.dir][idx].Add(^uint64(0))
	w.c.stats.Bytes[w.dir][idx].Add(^uint64(n - 1))
	w.fallback(idx, err)
}
