package record

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

/* Rekey in place (docs/protocol.md, "Rekey"). Each direction's keys live in
   epochs: epoch 0 has the handshake's keys, epoch e+1's keys are
   HKDF-SHA256 of epoch e's, so a link outlives any key-use limit and
   knowing an epoch's keys tells nothing of the epochs before it.

   The sender decides: its cutter moves to the next epoch when the current
   one has sealed RekeyFrames frames or RekeyBytes bytes, or RekeyInterval
   has passed, and sets epochFlag in the length header of the new epoch's
   first frame. seq restarts at 0 in every epoch. The receiver's reader
   goroutine sees frames in order and moves when it sees the flag; a peer
   that sends MaxFrames frames in one epoch fails the link (ErrKeyExhausted).

   Frames carry their epoch (frame.ep) to the workers, which keep the MAC,
   Crypters and FrameSealers of one epoch and remake them when a frame of
   another comes; several epochs may be in flight at once (with tiny limits,
   one per frame). An epoch's key bytes are wiped once no one holds it: the
   chain holds its current epoch, each frame its own until a worker is done
   with it, each worker the one its engine state was made from. A worker
   drops that state as soon as the chain has moved on (retired is closed),
   even while it waits for work, so an idle link keeps only the current
   epoch's keys. */

// epochFlag in a frame's length header marks the first frame of a new
// epoch. Lengths are at most HardMaxFrame, so the top bit is free; the tag
// covers the header as sent, flag included.
const epochFlag = 1 << 31

// Rekey defaults (Options.RekeyFrames, RekeyBytes, RekeyInterval).
const (
	// DefaultRekeyFrames is 2^24 frames per epoch: as TLS 1.3 limits
	// AES-GCM to 2^24.5 records per key (RFC 8446 §5.5), and 128 times
	// below MaxFrames. At 100,000 frames/s an epoch lasts about 3 minutes.
	DefaultRekeyFrames = 1 << 24
	// DefaultRekeyBytes is 64 GiB (2^32 AES blocks) of ciphertext per
	// epoch, which bounds a key's use when frames are large (MaxFrame up
	// to 1 MiB).
	DefaultRekeyBytes = 1 << 36
	// DefaultRekeyInterval bounds an epoch's age, so keys that were in
	// memory are forgotten within the hour even on a quiet link.
	DefaultRekeyInterval = time.Hour
)

// epoch is one epoch's keys of one direction.
type epoch struct {
	n       uint64
	keys    DirKeys
	refs    atomic.Int64
	retired chan struct{} // closed when the chain moved past this epoch
}

func newEpoch(n uint64, keys DirKeys) *epoch {
	e := &epoch{n: n, keys: keys, retired: make(chan struct{})}
	e.refs.Store(1) // the chain's
	return e
}

func (e *epoch) hold() { e.refs.Add(1) }

// release drops a reference; the last one wipes the keys.
func (e *epoch) release() {
	if e.refs.Add(-1) == 0 {
		clear(e.keys.Enc)
		clear(e.keys.MAC)
		clear(e.keys.IV[:])
	}
}

// rekeyLabel is the HKDF info of epoch n's keys, e.g.
// "offload record rekey aes-256-ctr-hmac-sha256 1".
func rekeyLabel(s suite.Suite, n uint64) string {
	return "offload record rekey " + s.String() + " " + strconv.FormatUint(n, 10)
}

// nextKeys derives epoch n's keys from k, epoch n-1's:
// HKDF-SHA256(secret = K_enc | K_mac | S_iv, no salt, info = rekeyLabel),
// split as the handshake splits its output.
func nextKeys(k *DirKeys, s suite.Suite, n uint64) (DirKeys, error) {
	secret := make([]byte, 0, len(k.Enc)+len(k.MAC)+len(k.IV))
	secret = append(append(append(secret, k.Enc...), k.MAC...), k.IV[:]...)
	defer clear(secret)
	kl := s.Cipher.KeySize()
	okm, err := hkdf.Key(sha256.New, secret, nil, rekeyLabel(s, n), kl+MACKeySize+engine.BlockSize)
	if err != nil {
		return DirKeys{}, fmt.Errorf("record: deriving epoch %d keys: %w", n, err)
	}
	nk := DirKeys{Enc: okm[:kl:kl], MAC: okm[kl : kl+MACKeySize : kl+MACKeySize]}
	copy(nk.IV[:], okm[kl+MACKeySize:])
	clear(okm[kl+MACKeySize:])
	return nk, nil
}

// chain is one direction's walk through its epochs, owned by the
// goroutine that sees the frames in order: the cutter (send) or the
// reader (receive).
type chain struct {
	c     *Conn
	dir   engine.Direction
	cur   *epoch
	seq   uint64 // seq of the next frame in cur
	bytes uint64 // plaintext bytes cut in cur so far (sending)
	limit uint64 // frames per epoch: rekey (send) or refuse (receive) at

	// Sending only.
	maxBytes uint64
	interval time.Duration
	timer    *time.Timer
	due      atomic.Bool // RekeyInterval passed
}

func (ch *chain) init(c *Conn, dir engine.Direction, keys DirKeys) {
	ch.c, ch.dir, ch.cur = c, dir, newEpoch(0, keys)
	ch.limit = c.limit
	if dir == engine.Encrypt {
		ch.limit = min(c.opt.RekeyFrames, c.limit)
		ch.maxBytes = c.opt.RekeyBytes
		ch.interval = c.opt.RekeyInterval
		ch.timer = time.AfterFunc(ch.interval, func() { ch.due.Store(true) })
	}
}

// advance moves to the next epoch: derives its keys, then lets go of the
// current one, which is wiped once its last frame is done.
func (ch *chain) advance() error {
	n := ch.cur.n + 1
	keys, err := nextKeys(&ch.cur.keys, ch.c.suite, n)
	if err != nil {
		return err
	}
	old := ch.cur
	ch.cur, ch.seq, ch.bytes = newEpoch(n, keys), 0, 0
	close(old.retired)
	old.release()
	if ch.timer != nil {
		ch.due.Store(false)
		ch.timer.Reset(ch.interval)
	}
	ch.c.stats.Rekeys[ch.dir].Add(1)
	ch.c.epochs.began(ch.dir)
	return nil
}

// assign gives a cut frame (f.n plaintext bytes) its epoch and seq,
// moving to a new epoch first when the current one is used up or old; the
// new epoch's first frame gets epochFlag. The cutter calls it per frame.
func (ch *chain) assign(f *frame) error {
	if ch.seq >= ch.limit || ch.bytes >= ch.maxBytes || ch.due.Load() {
		if err := ch.advance(); err != nil {
			return err
		}
		f.flag = epochFlag
	}
	ch.cur.hold()
	f.ep, f.seq = ch.cur, ch.seq
	ch.seq++
	ch.bytes += uint64(f.n)
	return nil
}

// accept gives the next frame read its epoch (holding it) and seq: a new
// epoch if its header had epochFlag. The reader calls it per frame, after
// the length check.
func (ch *chain) accept(flag bool) (*epoch, uint64, error) {
	if flag {
		if err := ch.advance(); err != nil {
			return nil, 0, err
		}
	}
	if ch.seq >= ch.limit {
		return nil, 0, fmt.Errorf("%d frames in epoch %d: %w", ch.seq, ch.cur.n, ErrKeyExhausted)
	}
	ch.cur.hold()
	seq := ch.seq
	ch.seq++
	return ch.cur, seq, nil
}

// close lets go of the current epoch when the goroutine that owns the
// chain exits.
func (ch *chain) close() {
	if ch.timer != nil {
		ch.timer.Stop()
	}
	if ch.cur != nil {
		close(ch.cur.retired)
		ch.cur.release()
		ch.cur = nil
	}
}

// next waits for the worker's next frame. While it waits, it drops the
// engine state of an epoch the chain has left, so old keys do not outlive
// their frames on an idle link.
func (w *worker) next(work <-chan *frame) (*frame, bool) {
	for {
		var retired chan struct{}
		if w.ep != nil {
			retired = w.ep.retired
		}
		select {
		case f, ok := <-work:
			return f, ok
		case <-retired:
			w.dropEpoch()
		}
	}
}

// enter makes the worker's keys, MAC, Crypters and FrameSealers those of
// f's epoch. Crypters and sealers are made again on first use.
func (w *worker) enter(f *frame) {
	if f.ep == w.ep {
		return
	}
	w.dropEpoch()
	f.ep.hold()
	w.ep, w.keys = f.ep, &f.ep.keys
	// New has Checked epoch 0's keys and nextKeys makes keys of the same
	// sizes, so this does not fail; should it, every frame of the epoch
	// fails with the reason instead of a panic.
	w.mac, w.macErr = NewMAC(w.c.suite.MAC, w.keys.MAC)
}

// leave lets go of f's epoch once the worker is done with f.
func (w *worker) leave(f *frame) {
	f.ep.release()
	f.ep = nil
}

// dropEpoch closes the worker's engine state and lets go of its epoch.
func (w *worker) dropEpoch() {
	for i, cr := range w.crypters {
		if cr != nil {
			_ = cr.Close()
			w.crypters[i] = nil
		}
	}
	w.closeSealers()
	w.mac, w.macErr = nil, nil
	if w.ep != nil {
		w.ep.release()
		w.ep, w.keys = nil, nil
	}
}
