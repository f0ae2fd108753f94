package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Whole frames on engines that do cipher and MAC in one request
// (engine.FrameEngine, e.g. the kernel's authenc(hmac(sha256),cbc(aes))):
// for *-hmac-sha256 suites the record's tag input seq | len | ciphertext is
// exactly authenc's HMAC input with the 12 bytes seq:u64be | len:u32be as
// associated data, and the IV is the frame's (IV_seq for CBC, the counter
// block for CTR), so the frame on the wire is byte for byte the one the
// software path makes. Frames the engine cannot take whole (other MACs,
// more than engine.MaxFrameRequest bytes) go the usual way.
//
// As with Crypters, the sealer writes out of place into w.spare, so when
// it fails the frame is intact and is redone in software: counted, logged,
// and the link stays up. A tag that does not verify (engine.ErrAuth, the
// kernel's EBADMSG) is the peer's fault, not the engine's: ErrAuth.

// sealerFor reports whether a frame of n ciphertext bytes on engine idx
// goes whole to a FrameSealer.
func (w *worker) sealerFor(idx, n int) bool {
	if idx == 0 || w.c.suite.MAC != suite.HMACSHA256 || n > engine.MaxFrameRequest {
		return false
	}
	_, ok := w.c.opt.Engines[idx].(engine.FrameEngine)
	return ok
}

// sealer returns the worker's FrameSealer for engine idx, making it on
// first use; after a failure to make one it waits a second.
func (w *worker) sealer(idx int) (engine.FrameSealer, error) {
	if s := w.sealers[idx]; s != nil {
		return s, nil
	}
	if time.Now().Before(w.sealRetry[idx]) {
		return nil, errEngineBackoff
	}
	fe := w.c.opt.Engines[idx].(engine.FrameEngine)
	s, err := fe.NewFrameSealer(w.c.suite.Cipher, w.keys.Enc, w.keys.MAC)
	if err != nil {
		w.sealRetry[idx] = time.Now().Add(time.Second)
		return nil, fmt.Errorf("record: engine %s: %w", fe.Name(), err)
	}
	w.sealers[idx] = s
	return s, nil
}

func (w *worker) dropSealer(idx int) {
	if s := w.sealers[idx]; s != nil {
		_ = s.Close()
		w.sealers[idx] = nil
	}
}

func (w *worker) closeSealers() {
	for i := range w.sealers {
		w.dropSealer(i)
	}
}

func (w *worker) ensureSpare(n int) {
	if cap(w.spare) < n {
		if w.spare != nil {
			putBuf(w.spare)
		}
		w.spare = getBuf(n)
	}
}

// setAD writes the associated data of frame seq with header hdr (its
// length and epoch flag, as on the wire).
func (w *worker) setAD(seq uint64, hdr []byte) {
	binary.BigEndian.PutUint64(w.ad[:8], seq)
	copy(w.ad[8:], hdr[:HeaderSize])
}

// sealWhole seals f (padded plaintext of n bytes, header and w.iv set) on
// engine idx's FrameSealer when it has one. done reports that f is sealed,
// or failed for good with err. Otherwise the caller seals f the usual way
// on engine next: idx when the frame is not for a sealer, 0 (software)
// after the sealer failed.
func (w *worker) sealWhole(f *frame, n, idx int) (next int, done bool, err error) {
	if !w.sealerFor(idx, n) {
		return idx, false, nil
	}
	s, err := w.sealer(idx)
	if err == nil {
		w.ensureSpare(len(f.buf))
		w.setAD(f.seq, f.buf[:HeaderSize])
		dst, src := w.spare[HeaderSize:HeaderSize+n+TagSize], f.buf[HeaderSize:HeaderSize+n] // f is read before begin: stall.go
		w.begin(idx, n)
		err = s.Seal(dst, w.ad[:], src, w.iv[:])
		if !w.end(idx, n) {
			return idx, true, errTakenOver
		}
		if err == nil {
			copy(w.spare[:HeaderSize], f.buf[:HeaderSize])
			f.buf, w.spare = w.spare[:len(w.spare)], f.buf
			f.n = n
			w.c.stats.count(w.dir, idx, n)
			return idx, true, nil
		}
		if engine.IsFrameArgError(err) {
			return idx, true, fmt.Errorf("record: sealing frame %d: engine %s: %w", f.seq, w.c.opt.Engines[idx].Name(), err)
		}
		w.dropSealer(idx)
	}
	w.fallback(idx, err)
	return 0, false, nil
}

// openWhole checks and decrypts f (n ciphertext bytes, w.iv set) on engine
// idx's FrameSealer, as sealWhole seals.
func (w *worker) openWhole(f *frame, n, idx int) (next int, done bool, err error) {
	s, err := w.sealer(idx)
	if err == nil {
		w.ensureSpare(len(f.buf))
		w.setAD(f.seq, f.buf[:HeaderSize])
		dst, src := w.spare[HeaderSize:HeaderSize+n], f.buf[HeaderSize:HeaderSize+n+TagSize]
		w.begin(idx, n)
		err = s.Open(dst, w.ad[:], src, w.iv[:])
		if !w.end(idx, n) {
			return idx, true, errTakenOver
		}
		switch {
		case err == nil:
			copy(w.spare[:HeaderSize], f.buf[:HeaderSize])
			f.buf, w.spare = w.spare[:len(w.spare)], f.buf
			w.c.stats.count(w.dir, idx, n)
			return idx, true, nil
		case errors.Is(err, engine.ErrAuth):
			w.c.stats.AuthFailures.Add(1)
			return idx, true, fmt.Errorf("frame %d: %w (checked by engine %s)", f.seq, ErrAuth, w.c.opt.Engines[idx].Name())
		case engine.IsFrameArgError(err):
			return idx, true, fmt.Errorf("record: opening frame %d: engine %s: %w", f.seq, w.c.opt.Engines[idx].Name(), err)
		}
		w.dropSealer(idx)
	}
	w.fallback(idx, err)
	return 0, false, nil
}
