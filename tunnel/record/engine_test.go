package record

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

var errFlaky = errors.New("flaky engine: device timeout")

// flakyEngine is the software engine behind a Crypter that fails every
// Nth call (scribbling over dst first, as a real device might), or always
// returns failWith when that is set.
type flakyEngine struct {
	every    int64
	failWith error
	newErr   error
	calls    [2]atomic.Int64
	failures [2]atomic.Int64
}

var _ engine.Engine = (*flakyEngine)(nil)

func (e *flakyEngine) Name() string { return "flaky" }
func (e *flakyEngine) Driver(c engine.Cipher) (engine.Driver, error) {
	return engine.Software{}.Driver(c)
}

func (e *flakyEngine) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	if e.newErr != nil {
		return nil, e.newErr
	}
	cr, err := engine.Software{}.NewCrypter(c, key)
	if err != nil {
		return nil, err
	}
	return &flakyCrypter{Crypter: cr, e: e}, nil
}

type flakyCrypter struct {
	engine.Crypter
	e *flakyEngine
}

func (f *flakyCrypter) do(d engine.Direction, dst, src, iv []byte) error {
	n := f.e.calls[d].Add(1)
	if f.e.failWith != nil {
		return f.e.failWith
	}
	if n%f.e.every == 0 {
		f.e.failures[d].Add(1)
		for i := range dst[:len(src)] {
			dst[i] = 0xEE
		}
		return fmt.Errorf("flaky: call %d: %w", n, errFlaky)
	}
	return engine.Crypt(f.Crypter, d, dst, src, iv)
}

func (f *flakyCrypter) Encrypt(dst, src, iv []byte) error { return f.do(engine.Encrypt, dst, src, iv) }
func (f *flakyCrypter) Decrypt(dst, src, iv []byte) error { return f.do(engine.Decrypt, dst, src, iv) }

func always1(int, engine.Direction) int { return 1 }

// only1 picks engine 1 for direction d and software for the other.
func only1(d engine.Direction) pickFunc {
	return func(_ int, dir engine.Direction) int {
		if dir == d {
			return 1
		}
		return 0
	}
}

func TestEngineFallback(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		t.Run(s.Cipher.String(), func(t *testing.T) {
			ea, eb := &flakyEngine{every: 7}, &flakyEngine{every: 5}
			core, logs := observer.New(zapcore.WarnLevel)
			oa := Options{Workers: 3, Engines: []engine.Engine{engine.Software{}, ea}, Policy: only1(engine.Encrypt), Logger: zap.New(core)}
			ob := Options{Workers: 3, Engines: []engine.Engine{engine.Software{}, eb}, Policy: only1(engine.Decrypt)}
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s, oa, ob)
			roundTrip(t, a, b, 1<<20, 64<<10)

			for _, tc := range []struct {
				side string
				c    *Conn
				e    *flakyEngine
				dir  engine.Direction
			}{{"sender", a, ea, engine.Encrypt}, {"receiver", b, eb, engine.Decrypt}} {
				st := tc.c.Stats()
				failures, calls := tc.e.failures[tc.dir].Load(), tc.e.calls[tc.dir].Load()
				if failures == 0 {
					t.Fatalf("%s: the engine never failed", tc.side)
				}
				if got := st.Fallbacks[1].Load(); got != uint64(failures) {
					t.Errorf("%s: %d fallbacks counted, engine failed %d times", tc.side, got, failures)
				}
				if got := st.Frames[tc.dir][0].Load(); got != uint64(failures) {
					t.Errorf("%s: software did %d frames, want the %d the engine failed", tc.side, got, failures)
				}
				if got := st.Frames[tc.dir][1].Load(); got != uint64(calls-failures) {
					t.Errorf("%s: engine credited with %d frames, want %d", tc.side, got, calls-failures)
				}
			}
			if a.Err() != nil || b.Err() != nil {
				t.Fatalf("link went down: %v / %v", a.Err(), b.Err())
			}
			// Rate limited: far fewer warnings than fallbacks.
			if n := logs.FilterMessage("engine failed, frame redone in software").Len(); n != 1 {
				t.Errorf("%d fallback warnings for %d fallbacks, want 1 (rate limited)", n, ea.failures[engine.Encrypt].Load())
			}
		})
	}
}

// An engine that can't make a Crypter costs a fallback per frame, no more.
func TestEngineUnavailableFallsBack(t *testing.T) {
	e := &flakyEngine{newErr: fmt.Errorf("no device: %w", engine.ErrUnavailable)}
	o := Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: only1(engine.Encrypt)}
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, ctr128, o, Options{})
	roundTrip(t, a, b, 256<<10, 8<<10)
	st := a.Stats()
	if st.Fallbacks[1].Load() == 0 || st.Fallbacks[1].Load() != st.Frames[engine.Encrypt][0].Load() {
		t.Fatalf("fallbacks %d, software frames %d", st.Fallbacks[1].Load(), st.Frames[engine.Encrypt][0].Load())
	}
}

// Argument errors are bugs: they fail the link instead of being masked by
// a software retry.
func TestEngineArgErrorFailsLink(t *testing.T) {
	e := &flakyEngine{failWith: fmt.Errorf("flaky: %w", engine.ErrBlockSize)}
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, ctr256,
		Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: pickFunc(always1)}, Options{})
	a.Write([]byte("hello"))
	if _, err := io.ReadFull(b, make([]byte, 5)); err == nil {
		t.Fatal("peer received a frame the engine could not seal")
	}
	var err error
	for err == nil {
		_, err = a.Write([]byte("x"))
	}
	if !errors.Is(err, engine.ErrBlockSize) {
		t.Fatalf("got %v, want the engine's ErrBlockSize", err)
	}
	if a.Stats().Fallbacks[1].Load() != 0 {
		t.Fatal("argument error counted as a fallback")
	}
}

// Output through a flaky engine is byte-identical to software's.
func TestEngineFallbackIdenticalWire(t *testing.T) {
	s := cbc256
	ka, kb := keyPair(t, s)
	msgs := testMessages(t, 20)
	frames := captured(t, s, ka, kb, msgs)
	for i, f := range frames {
		if !bytes.Equal(f, refSeal(&ka.Send, s, uint64(i), msgs[i])) {
			t.Fatalf("software frame %d differs from the reference", i)
		}
	}
	// Same keys, sealed through an engine failing every other call.
	e := &flakyEngine{every: 2}
	c := &Conn{suite: s, stats: new(Stats), log: zap.NewNop(), opt: Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: pickFunc(always1)}}
	w := testWorker(c, engine.Encrypt, &ka.Send)
	defer w.close()
	for i, m := range msgs {
		f := getFrame(wireSize(len(m) + 16))
		copy(f.buf[HeaderSize:], m)
		f.seq, f.n = uint64(i), len(m)
		if err := w.seal(f); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.buf[:wireSize(f.n)], frames[i]) {
			t.Fatalf("frame %d through the flaky engine differs", i)
		}
		putFrame(f)
	}
	if e.failures[engine.Encrypt].Load() != 10 || c.stats.Fallbacks[1].Load() != 10 {
		t.Fatalf("failures %d, fallbacks %d", e.failures[engine.Encrypt].Load(), c.stats.Fallbacks[1].Load())
	}
}

// trackingPolicy picks engine 1 for every frame and counts Begin/End; the
// engine (flakyEngine's calls) must run only between them.
type trackingPolicy struct {
	e                 *flakyEngine
	begins, ends      atomic.Int64
	inside, maxInside atomic.Int64
	wrongIdx          atomic.Int64
}

func (p *trackingPolicy) Pick(int, engine.Direction) int { return 1 }
func (p *trackingPolicy) Begin(idx, size int, _ engine.Direction) {
	if idx != 1 || size <= 0 {
		p.wrongIdx.Add(1)
	}
	p.begins.Add(1)
	n := p.inside.Add(1)
	for m := p.maxInside.Load(); n > m && !p.maxInside.CompareAndSwap(m, n); m = p.maxInside.Load() {
	}
}
func (p *trackingPolicy) End(idx, size int, _ engine.Direction) {
	if idx != 1 || size <= 0 {
		p.wrongIdx.Add(1)
	}
	p.ends.Add(1)
	p.inside.Add(-1)
}

// A Tracker policy sees every engine call bracketed by Begin and End, on
// both ends, failures included, and never more at once than the workers.
func TestTrackerBracketsEngineCalls(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc256} {
		t.Run(s.String(), func(t *testing.T) {
			ea, eb := &flakyEngine{every: 7}, &flakyEngine{every: 5}
			pa, pb := &trackingPolicy{e: ea}, &trackingPolicy{e: eb}
			const workers = 3
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s,
				Options{Workers: workers, Engines: []engine.Engine{engine.Software{}, ea}, Policy: pa},
				Options{Workers: workers, Engines: []engine.Engine{engine.Software{}, eb}, Policy: pb})
			roundTrip(t, a, b, 1<<20, 4<<10)
			for name, p := range map[string]*trackingPolicy{"sender": pa, "receiver": pb} {
				calls := p.e.calls[engine.Encrypt].Load() + p.e.calls[engine.Decrypt].Load()
				if calls == 0 {
					t.Fatalf("%s: the engine was never called", name)
				}
				if b, e := p.begins.Load(), p.ends.Load(); b != calls || e != calls {
					t.Errorf("%s: %d engine calls, %d Begin, %d End: want all equal", name, calls, b, e)
				}
				if p.inside.Load() != 0 {
					t.Errorf("%s: %d frames still inside after the round trip", name, p.inside.Load())
				}
				// Each end seals and opens with its own workers.
				if m := p.maxInside.Load(); m < 1 || m > 2*workers {
					t.Errorf("%s: %d frames at the engine at once, want 1..%d", name, m, 2*workers)
				}
				if p.wrongIdx.Load() != 0 {
					t.Errorf("%s: Begin/End for an engine other than 1 or without a size", name)
				}
			}
		})
	}
}
