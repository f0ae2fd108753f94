package record

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
)

// worker seals or opens frames of one direction (frames and their buffers:
// frame.go). It owns its Crypters (one
// per engine, made on first use: Crypters are not safe for concurrent use),
// its MAC state and a spare buffer for engines that write out of place.
// Keys, Crypters, MAC and sealers are those of one epoch, ep (rekey.go).
type worker struct {
	c        *Conn
	dir      engine.Direction
	ep       *epoch
	keys     *DirKeys // &ep.keys
	crypters [MaxEngines]engine.Crypter
	retryAt  [MaxEngines]time.Time // no NewCrypter before this after a failure
	mac      MAC
	macErr   error // why mac could not be made (keys not Checked)
	sum      [TagSize]byte
	blk, iv  [engine.BlockSize]byte
	zero     [engine.BlockSize]byte
	spare    []byte

	// Whole-frame sealers of engines that have them (wholeframe.go).
	sealers   [MaxEngines]engine.FrameSealer
	sealRetry [MaxEngines]time.Time
	ad        [12]byte // seq | hdr, their associated data

	work     <-chan *frame
	released sync.Once // the Conn's wait group is done with this worker

	// resume is how a worker that takes over from this one goes on, in
	// its own goroutine: the inline goroutines (writer.go, reader.go)
	// redo the frame and carry on with their loop. nil: redo the frame,
	// then run (a pipeline worker).
	resume func(nw *worker, f *frame)

	// The stall watchdog's view (stall.go): busy is the watchdog's clock
	// when the worker handed cur to engine busyIdx, 0 when it holds no
	// request, busyTaken once the watchdog took cur over. softOnly makes
	// pick answer software (redo).
	busy     atomic.Int64
	busyIdx  atomic.Int32
	cur      *frame
	softOnly bool
}

// errTakenOver unwinds a worker whose frame the stall watchdog took over:
// the frame is not its own any more.
var errTakenOver = errors.New("record: frame taken over by the stall watchdog")

// newWorker returns a worker of c for work; run starts it. The caller
// has counted it in c.wg (release says it is done).
func newWorker(c *Conn, dir engine.Direction, work <-chan *frame) *worker {
	w := &worker{c: c, dir: dir, work: work}
	if c.dog != nil {
		c.dog.add(w)
	}
	return w
}

// release tells c's wait group the worker is done: when it exits, or when
// the stall watchdog gives up on it, whichever comes first.
func (w *worker) release() { w.released.Do(w.c.wg.Done) }

// run processes frames until work is closed. Every frame it takes gets its
// done signal, so consumers may wait for it even while the link goes down
// (a frame the stall watchdog took over gets it from the new worker).
func (w *worker) run() {
	defer w.close()
	for {
		f, ok := w.next(w.work)
		if !ok {
			return
		}
		if !w.do(f) {
			return
		}
	}
}

// do seals or opens f and signals its done. It reports false when the
// stall watchdog took f over meanwhile: f is no longer this worker's, and
// the worker must stop.
func (w *worker) do(f *frame) bool {
	w.enter(f)
	w.cur = f
	var err error
	if w.dir == engine.Encrypt {
		err = w.seal(f)
	} else {
		err = w.open(f)
	}
	if err == errTakenOver {
		return false
	}
	if f.err = err; err != nil && w.dir == engine.Decrypt {
		// Close the link now rather than when Read gets here; Read
		// still delivers the frames before this one.
		w.c.fail(err)
	}
	w.leave(f)
	f.done <- struct{}{}
	return true
}

// redo processes f, taken over from a stalled worker, in software. The
// stuck request may still be reading f's buffer (a device, by DMA): it
// keeps that one, and the frame is redone in a copy.
func (w *worker) redo(f *frame) {
	buf := getBuf(len(f.buf))
	f.buf = buf[:copy(buf, f.buf)]
	w.softOnly = true
	w.do(f) // software requests are not watched: never taken over
	w.softOnly = false
}

func (w *worker) close() {
	w.dropEpoch()
	if w.spare != nil {
		putBuf(w.spare)
		w.spare = nil
	}
}

// frameIV computes the IV of frame seq into w.iv.
func (w *worker) frameIV(seq uint64) error {
	s := &w.keys.IV
	if w.c.suite.Cipher.Mode == engine.CTR {
		// S_iv + seq·2^32 (mod 2^128).
		lo, carry := bits.Add64(binary.BigEndian.Uint64(s[8:]), seq<<32, 0)
		hi := binary.BigEndian.Uint64(s[:8]) + seq>>32 + carry
		binary.BigEndian.PutUint64(w.iv[:8], hi)
		binary.BigEndian.PutUint64(w.iv[8:], lo)
		return nil
	}
	// AES_K_enc(S_iv XOR seq:u128be): one CBC block under a zero IV is one
	// AES block encryption, through the software engine.
	w.blk = *s
	binary.BigEndian.PutUint64(w.blk[8:], binary.BigEndian.Uint64(s[8:])^seq)
	cr, err := w.crypter(0)
	if err != nil {
		return err
	}
	if err := cr.Encrypt(w.iv[:], w.blk[:], w.zero[:]); err != nil {
		return fmt.Errorf("record: frame %d: deriving CBC IV: %w", seq, err)
	}
	return nil
}

// seal encrypts and tags f in place: f.buf[HeaderSize:][:f.n] holds the
// plaintext, with room for padding and the tag after it.
func (w *worker) seal(f *frame) error {
	if w.macErr != nil {
		return w.macErr
	}
	n := f.n
	if w.c.suite.Cipher.Mode == engine.CBC {
		pad := engine.BlockSize - n%engine.BlockSize
		for i := range pad {
			f.buf[HeaderSize+n+i] = byte(pad)
		}
		n += pad
	}
	binary.BigEndian.PutUint32(f.buf[:HeaderSize], uint32(n)|f.flag)
	if err := w.frameIV(f.seq); err != nil {
		return err
	}
	idx, done, err := w.sealWhole(f, n, w.pick(n))
	if done && err == nil && w.c.opt.Verify.checkSealed(w, idx, f, n) != nil {
		idx, done = 0, false // verify.go put the plaintext back: software seals it
	}
	if done {
		return err
	}
	if err := w.crypt(f, n, idx); err != nil {
		if err == errTakenOver {
			return err // f is not this worker's to read any more
		}
		return fmt.Errorf("record: sealing frame %d: %w", f.seq, err)
	}
	w.mac.Sum(&w.sum, f.seq, f.buf[:HeaderSize+n])
	copy(f.buf[HeaderSize+n:], w.sum[:])
	f.n = n
	return nil
}

// open verifies and decrypts f: f.buf holds a whole wire frame with
// ciphertext length f.n. Nothing is decrypted unless the tag verified.
func (w *worker) open(f *frame) error {
	if w.macErr != nil {
		return w.macErr
	}
	n := f.n
	idx := w.pick(n)
	if w.sealerFor(idx, n) {
		// A whole-frame engine checks the tag itself, before it decrypts.
		if err := w.frameIV(f.seq); err != nil {
			return err
		}
		var done bool
		var err error
		if idx, done, err = w.openWhole(f, n, idx); done {
			if err != nil {
				return err
			}
			if err = w.c.opt.Verify.checkOpened(w, idx, f, n); err == nil {
				return w.unpad(f, n)
			}
			idx = 0 // verify.go put the frame back: software checks and opens it
		}
	}
	if !w.mac.Verify(f.buf[HeaderSize+n:HeaderSize+n+TagSize], f.seq, f.buf[:HeaderSize+n]) {
		w.c.stats.AuthFailures.Add(1)
		return fmt.Errorf("frame %d: %w", f.seq, ErrAuth)
	}
	if err := w.frameIV(f.seq); err != nil {
		return err
	}
	if err := w.crypt(f, n, idx); err != nil {
		if err == errTakenOver {
			return err // f is not this worker's to read any more
		}
		return fmt.Errorf("record: opening frame %d: %w", f.seq, err)
	}
	return w.unpad(f, n)
}

// unpad sets the opened plaintext of f (ciphertext length n) and, for CBC,
// checks and strips its PKCS#7 padding.
func (w *worker) unpad(f *frame, n int) error {
	f.off, f.end = HeaderSize, HeaderSize+n
	if w.c.suite.Cipher.Mode == engine.CBC {
		pt := f.buf[HeaderSize : HeaderSize+n]
		pad := int(pt[n-1])
		bad := pad == 0 || pad > engine.BlockSize
		if !bad {
			for _, b := range pt[n-pad:] {
				bad = bad || int(b) != pad
			}
		}
		if bad {
			return fmt.Errorf("frame %d: %w", f.seq, ErrPadding)
		}
		f.end -= pad
	}
	return nil
}

// pick asks the policy for the engine of a frame of n bytes.
func (w *worker) pick(n int) int {
	if w.softOnly {
		return 0
	}
	idx := w.c.opt.Policy.Pick(n, w.dir)
	if idx < 0 || idx >= len(w.c.opt.Engines) {
		idx = 0
	}
	return idx
}

// crypt runs the cipher over f.buf[HeaderSize:][:n] with w.iv on engine
// idx (from pick). Engines other than software write out of place into
// w.spare (then the buffers swap), so that when one fails the input is
// intact and software redoes the frame: counted, logged (rate limited),
// and the link stays up. Argument errors are bugs and fail the frame.
func (w *worker) crypt(f *frame, n, idx int) error {
	src := f.buf[HeaderSize : HeaderSize+n]
	if idx != 0 {
		cr, err := w.crypter(idx)
		if err == nil {
			w.ensureSpare(len(f.buf))
			w.begin(idx, n)
			err = engine.Crypt(cr, w.dir, w.spare[HeaderSize:HeaderSize+n], src, w.iv[:])
			if !w.end(idx, n) {
				return errTakenOver
			}
			if err == nil {
				err = w.c.opt.Verify.check(w, idx, w.spare[HeaderSize:HeaderSize+n], src) // verify.go
			}
			if err == nil {
				copy(w.spare[:HeaderSize], f.buf[:HeaderSize])
				f.buf, w.spare = w.spare[:len(w.spare)], f.buf
				w.c.stats.count(w.dir, idx, n)
				return nil
			}
			if engine.IsArgError(err) {
				return fmt.Errorf("engine %s: %w", w.c.opt.Engines[idx].Name(), err)
			}
			_ = cr.Close()
			w.crypters[idx] = nil
		}
		w.fallback(idx, err)
	}
	cr, err := w.crypter(0)
	if err != nil {
		return err
	}
	if err := engine.Crypt(cr, w.dir, src, src, w.iv[:]); err != nil {
		return fmt.Errorf("engine %s: %w", w.c.opt.Engines[0].Name(), err)
	}
	w.c.stats.count(w.dir, 0, n)
	return nil
}

// begin and end tell a Tracker policy that engine idx (> 0) holds a frame
// of n bytes of this worker, and that it gave it back; and the stall
// watchdog when the request began. end reports false when the watchdog
// took the frame over meanwhile: the caller returns errTakenOver and
// touches the frame no more.
func (w *worker) begin(idx, n int) {
	if t := w.c.tracker; t != nil {
		t.Begin(idx, n, w.dir)
	}
	if d := w.c.dog; d != nil {
		w.busyIdx.Store(int32(idx))
		w.busy.Store(d.now())
	}
}

func (w *worker) end(idx, n int) bool {
	if t := w.c.tracker; t != nil {
		t.End(idx, n, w.dir)
	}
	return w.c.dog == nil || w.busy.Swap(0) != busyTaken
}

// crypter returns the worker's Crypter for engine idx, making it on first
// use. After a failure to make one, it does not try again for a second.
func (w *worker) crypter(idx int) (engine.Crypter, error) {
	if cr := w.crypters[idx]; cr != nil {
		return cr, nil
	}
	if idx != 0 && time.Now().Before(w.retryAt[idx]) {
		return nil, errEngineBackoff
	}
	cr, err := w.c.opt.Engines[idx].NewCrypter(w.c.suite.Cipher, w.keys.Enc)
	if err != nil {
		w.retryAt[idx] = time.Now().Add(time.Second)
		return nil, fmt.Errorf("record: engine %s: %w", w.c.opt.Engines[idx].Name(), err)
	}
	w.crypters[idx] = cr
	return cr, nil
}

// errEngineBackoff stands for an engine that failed to make a Crypter a
// moment ago.
var errEngineBackoff = fmt.Errorf("record: engine recently failed to make a crypter")

func (w *worker) fallback(idx int, err error) {
	total := w.c.stats.Fallbacks[idx].Add(1)
	if w.c.warn.allow() {
		w.c.log.Warn("engine failed, frame redone in software",
			zap.String("engine", w.c.opt.Engines[idx].Name()),
			zap.Int("engine_index", idx),
			zap.Stringer("direction", w.dir),
			zap.Uint64("fallbacks", total),
			zap.Error(err))
	}
}
