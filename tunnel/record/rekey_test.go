package record

import (
	"bytes"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// testWorker is a worker fixed on a copy of k, for tests that call seal
// and open directly.
func testWorker(c *Conn, dir engine.Direction, k *DirKeys) *worker {
	w := newWorker(c, dir, nil)
	ep := newEpoch(0, k.clone())
	w.enter(&frame{ep: ep})
	ep.release() // the worker holds it now
	return w
}

// refNextKeys is docs/protocol.md's ratchet, written from the text:
// epoch n's keys from epoch n-1's.
func refNextKeys(k *DirKeys, s suite.Suite, n uint64) DirKeys {
	secret := append(append(append([]byte(nil), k.Enc...), k.MAC...), k.IV[:]...)
	info := fmt.Sprintf("offload record rekey %s %d", s, n)
	kl := s.Cipher.KeySize()
	okm, _ := hkdf.Key(sha256.New, secret, nil, info, kl+32+16) // fails only past 8160 bytes
	nk := DirKeys{Enc: okm[:kl], MAC: okm[kl : kl+32]}
	copy(nk.IV[:], okm[kl+32:])
	return nk
}

// refSealNew is refSeal for the first frame of an epoch: the header has
// the top bit set, and the tag covers the header as sent.
func refSealNew(k *DirKeys, s suite.Suite, seq uint64, pt []byte) []byte {
	f := refSeal(k, s, seq, pt)
	f[0] |= 0x80
	n := len(f) - 4 - 16
	m := hmac.New(sha256.New, k.MAC)
	binary.Write(m, binary.BigEndian, seq)
	m.Write(f[:4+n])
	copy(f[4+n:], m.Sum(nil)[:16])
	return f
}

// TestRekeyStreamsSurvive: with a key-use limit of a few frames, data
// crosses the link both ways, SHA-equal, over hundreds of epochs, with
// several workers and frames in flight. Before rekeying, the link closed
// at the limit (ErrKeyExhausted).
func TestRekeyStreamsSurvive(t *testing.T) {
	for _, tr := range transports {
		for _, s := range []suite.Suite{ctr256, cbc128, {Cipher: ctr128.Cipher, MAC: suite.GMAC}, {Cipher: cbc256.Cipher, MAC: suite.Poly1305}, {Cipher: ctr256.Cipher, MAC: suite.NHPoly1305}} {
			t.Run(tr.name+"/"+s.String(), func(t *testing.T) {
				c1, c2 := tr.pair(t)
				o := Options{MaxFrame: 1024, Workers: 4, maxFrames: 4}
				a, b := newPair(t, c1, c2, s, o, o)
				roundTrip(t, a, b, 512<<10, 3000)
				for _, p := range [][2]*Conn{{a, b}, {b, a}} {
					tx, rx := p[0].Stats().Rekeys[engine.Encrypt].Load(), p[1].Stats().Rekeys[engine.Decrypt].Load()
					if tx < 100 || tx != rx {
						t.Errorf("rekeys sent %d, received %d; want the same, at least 100", tx, rx)
					}
				}
				if a.Err() != nil || b.Err() != nil {
					t.Fatalf("link failed: %v, %v", a.Err(), b.Err())
				}
			})
		}
	}
}

// Every trigger moves the keys: RekeyFrames (here every frame its own
// epoch), RekeyBytes, RekeyInterval.
func TestRekeyTriggers(t *testing.T) {
	cases := map[string]Options{
		"every frame": {RekeyFrames: 1, Workers: 3, MaxFrame: MinMaxFrame},
		"bytes":       {RekeyBytes: 5000, Workers: 2, MaxFrame: 1024},
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, cbc128, o, o)
			roundTrip(t, a, b, 256<<10, 2000)
			frames := a.Stats().Frames[engine.Encrypt][0].Load()
			rekeys := a.Stats().Rekeys[engine.Encrypt].Load()
			if name == "every frame" && rekeys != frames-1 {
				t.Errorf("%d rekeys for %d frames", rekeys, frames)
			}
			// An epoch ends with the first frame that reaches 5000 bytes:
			// 5000 to 5000+MaxFrame-1 bytes per epoch.
			if name == "bytes" && (rekeys < (256<<10)/6024-1 || rekeys > (256<<10)/5000+1) {
				t.Errorf("%d rekeys for 256 KiB at 5000 bytes per epoch", rekeys)
			}
		})
	}
	t.Run("interval", func(t *testing.T) {
		c1, c2 := tcpPair(t)
		a, b := newPair(t, c1, c2, ctr256, Options{RekeyInterval: time.Millisecond}, Options{})
		buf := make([]byte, 1)
		deadline := time.Now().Add(10 * time.Second)
		for a.Stats().Rekeys[engine.Encrypt].Load() < 3 {
			if time.Now().After(deadline) {
				t.Fatal("no rekeys on a 1 ms interval")
			}
			time.Sleep(5 * time.Millisecond)
			if _, err := a.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(b, buf); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// A wire stream built from the reference: the receiver follows the
// sender's flag into the next epoch and refuses, once it moved, any frame
// sealed under keys it left behind (or a flag an attacker set or cleared).
func TestRekeyOldKeysRefused(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		k0 := fuzzKeys(s)
		k1 := refNextKeys(&k0, s, 1)
		k2 := refNextKeys(&k1, s, 2)
		m := [][]byte{[]byte("epoch zero"), []byte("epoch one, first"), []byte("epoch one, second"), []byte("epoch two")}
		cat := func(fs ...[]byte) []byte { return bytes.Join(fs, nil) }
		good := cat(refSeal(&k0, s, 0, m[0]), refSealNew(&k1, s, 0, m[1]), refSeal(&k1, s, 1, m[2]), refSealNew(&k2, s, 0, m[3]))
		cases := []struct {
			name string
			wire []byte
			good int // messages delivered before the failure
			want error
		}{
			{"three epochs", good, 4, nil},
			{"old keys after the switch", cat(refSeal(&k0, s, 0, m[0]), refSealNew(&k1, s, 0, m[1]), refSeal(&k0, s, 1, m[2])), 2, ErrAuth},
			{"old frame replayed", cat(refSeal(&k0, s, 0, m[0]), refSealNew(&k1, s, 0, m[1]), refSeal(&k0, s, 0, m[0])), 2, ErrAuth},
			{"old seq continued", cat(refSeal(&k0, s, 0, m[0]), refSealNew(&k1, s, 1, m[1])), 1, ErrAuth},
			{"flag under old keys", cat(refSeal(&k0, s, 0, m[0]), refSealNew(&k0, s, 1, m[1])), 1, ErrAuth},
			{"flag cleared", cat(refSeal(&k0, s, 0, m[0]), refSeal(&k1, s, 0, m[1])), 1, ErrAuth},
			{"flag set by an attacker", cat(refSeal(&k0, s, 0, m[0]), func() []byte { f := refSeal(&k0, s, 1, m[1]); f[0] |= 0x80; return f }()), 1, ErrAuth},
			{"epoch skipped", cat(refSeal(&k0, s, 0, m[0]), refSealNew(&k2, s, 0, m[1])), 1, ErrAuth},
			{"flag over max length", cat(refSeal(&k0, s, 0, m[0]), header(epochFlag|(DefaultMaxFrame+16))), 1, ErrFrameTooLarge},
		}
		for _, c := range cases {
			t.Run(s.Cipher.String()+"/"+c.name, func(t *testing.T) {
				b, got, err := receive(t, s, Keys{Send: fuzzKeys(s), Recv: fuzzKeys(s)}, c.wire, true)
				if want := bytes.Join(m[:c.good], nil); !bytes.Equal(got, want) {
					t.Fatalf("delivered %q, want %q", got, want)
				}
				if c.want == nil {
					if err != io.EOF {
						t.Fatalf("got %v, want io.EOF", err)
					}
					return
				}
				if !errors.Is(err, c.want) || !errors.Is(b.Err(), c.want) {
					t.Fatalf("read %v, link %v; want %v", err, b.Err(), c.want)
				}
			})
		}
	}
}

// A peer that never moves its keys hits the per-epoch limit: the link
// closes with ErrKeyExhausted. One that rekeys in time does not.
func TestRekeyPeerNeverRekeys(t *testing.T) {
	for _, rekeyAt := range []uint64{100, 3} {
		t.Run(fmt.Sprintf("sender rekeys at %d", rekeyAt), func(t *testing.T) {
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, ctr256, Options{RekeyFrames: rekeyAt}, Options{maxFrames: 3})
			buf := make([]byte, 5)
			for i := range 7 {
				if _, err := a.Write([]byte("hello")); err != nil {
					t.Fatal(err)
				}
				_, err := io.ReadFull(b, buf)
				switch {
				case rekeyAt == 3 && err != nil:
					t.Fatalf("read %d: %v", i, err)
				case rekeyAt == 100 && i < 3 && err != nil:
					t.Fatalf("read %d: %v", i, err)
				case rekeyAt == 100 && i == 3:
					if !errors.Is(err, ErrKeyExhausted) {
						t.Fatalf("read past the limit: got %v, want ErrKeyExhausted", err)
					}
					return
				}
			}
		})
	}
}

// The chain and the workers let go of an epoch's keys, which are then
// wiped, as soon as no frame and no worker needs them, while the link goes
// on; nothing keeps the handshake's keys.
func TestRekeyWipesOldKeys(t *testing.T) {
	s := ctr256
	c := &Conn{suite: s, stats: new(Stats), limit: MaxFrames, opt: Options{
		Engines: []engine.Engine{engine.Software{}}, Policy: SoftwareOnly{},
		RekeyFrames: 2, RekeyBytes: DefaultRekeyBytes, RekeyInterval: time.Hour,
	}}
	k := randDirKeys(t, s)
	var ch chain
	ch.init(c, engine.Encrypt, k.clone())
	zero := func(e *epoch) bool {
		var or byte
		for _, b := range append(append(bytes.Clone(e.keys.Enc), e.keys.MAC...), e.keys.IV[:]...) {
			or |= b
		}
		return or == 0
	}
	cut := func() *frame {
		f := getFrame(wireSize(100 + 16))
		f.n = 100
		if err := ch.assign(f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f0, f1, f2 := cut(), cut(), cut()
	e0, e1 := f0.ep, f2.ep
	if f1.ep != e0 || e1 == e0 || f0.flag != 0 || f1.flag != 0 || f2.flag != epochFlag || f2.seq != 0 {
		t.Fatalf("epochs %d %d %d, seqs %d %d %d, flags %x %x %x", f0.ep.n, f1.ep.n, f2.ep.n, f0.seq, f1.seq, f2.seq, f0.flag, f1.flag, f2.flag)
	}
	if !e0.keys.Equal(&k) || !e1.keys.Equal(func() *DirKeys { x := refNextKeys(&k, s, 1); return &x }()) {
		t.Fatal("epoch keys differ from the reference")
	}

	w := newWorker(c, engine.Encrypt, nil)
	work := make(chan *frame, 3)
	work <- f0
	g, _ := w.next(work)
	w.enter(g)
	if err := w.seal(g); err != nil {
		t.Fatal(err)
	}
	w.leave(g)
	putFrame(g)
	if zero(e0) {
		t.Fatal("epoch 0 wiped while frame 1 still needs it")
	}
	putFrame(f1) // dropped on the way (a failed link)
	if zero(e0) {
		t.Fatal("epoch 0 wiped while a worker holds its engine state")
	}
	// The worker waits for work and sees that the chain moved on.
	work <- f2
	g, _ = w.next(work)
	w.enter(g)
	if !zero(e0) {
		t.Fatal("epoch 0 not wiped once no frame and no worker needs it")
	}
	if err := w.seal(g); err != nil {
		t.Fatal(err)
	}
	w.leave(g)
	putFrame(g)
	ch.close()
	if zero(e1) {
		t.Fatal("epoch 1 wiped while the worker holds it")
	}
	close(work)
	if _, ok := w.next(work); ok {
		t.Fatal("frame from a closed queue")
	}
	w.close()
	if !zero(e1) {
		t.Fatal("epoch 1 not wiped after the chain and the worker let go")
	}
	if !k.Equal(&k) || zero(&epoch{keys: k}) {
		t.Fatal("the caller's keys were wiped")
	}
}

// Options the rekey settings refuse.
func TestRekeyOptions(t *testing.T) {
	ka, _ := keyPair(t, ctr256)
	for _, o := range []Options{{RekeyFrames: MaxFrames + 1}, {RekeyInterval: -time.Second}} {
		c1, c2 := net.Pipe()
		if c, err := New(c1, ka, ctr256, o); err == nil {
			c.Close()
			t.Errorf("%+v accepted", o)
		}
		c1.Close()
		c2.Close()
	}
}

// A whole-frame engine (authenc) authenticates the header as sent, epoch
// flag included, so its frames and the software path's agree across
// rekeys, both ways.
func TestRekeyFrameEngine(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		t.Run(s.String(), func(t *testing.T) {
			fe := frameEngine()
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s,
				Options{Engines: []engine.Engine{engine.Software{}, fe}, Policy: pickFunc(always1), RekeyFrames: 2, Workers: 3, MaxFrame: 2048},
				Options{RekeyFrames: 3, MaxFrame: 2048})
			roundTrip(t, a, b, 128<<10, 3000)
			if fe.Seals() == 0 || fe.Opens() == 0 {
				t.Fatalf("frame engine sealed %d, opened %d", fe.Seals(), fe.Opens())
			}
			if a.Stats().Rekeys[engine.Encrypt].Load() < 10 || a.Stats().Rekeys[engine.Decrypt].Load() < 10 {
				t.Fatalf("rekeys: %d sent, %d received", a.Stats().Rekeys[engine.Encrypt].Load(), a.Stats().Rekeys[engine.Decrypt].Load())
			}
			if n := a.Stats().Fallbacks[1].Load(); n != 0 {
				t.Fatalf("%d fallbacks", n)
			}
		})
	}
}
