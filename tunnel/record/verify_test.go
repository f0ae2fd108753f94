package record

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
	"github.com/offload-dev/offload/tunnel/suite"
)

// mismatches collects what a Verifier reports.
type mismatches struct {
	mu   sync.Mutex
	idx  []int
	errs []error
}

func (m *mismatches) add(idx int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.idx = append(m.idx, idx)
	m.errs = append(m.errs, err)
}

func (m *mismatches) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.idx)
}

// An engine that silently miscomputes every third operation, sealing on
// one end and opening on the other: with every frame verified, the data
// arrives intact, each wrong result is caught, redone in software and
// reported, and the link stays up. Without the check the corrupt
// ciphertext would carry a valid tag (and corrupt plaintext would be
// delivered).
func TestVerifyCatchesMiscomputingEngine(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		t.Run(s.Cipher.String(), func(t *testing.T) {
			// Different frames on each end, so that errors can't cancel.
			ea := &enginetest.Faulty{Bad: func(n uint64) bool { return n%3 == 0 }}
			eb := &enginetest.Faulty{Bad: func(n uint64) bool { return n%3 == 1 }}
			var ma, mb mismatches
			va, vb := NewVerifier(1, ma.add), NewVerifier(1, mb.add)
			oa := Options{Workers: 2, Engines: []engine.Engine{engine.Software{}, ea}, Policy: only1(engine.Encrypt), Verify: va}
			ob := Options{Workers: 2, Engines: []engine.Engine{engine.Software{}, eb}, Policy: only1(engine.Decrypt), Verify: vb}
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s, oa, ob)
			roundTrip(t, a, b, 512<<10, 32<<10)
			if a.Err() != nil || b.Err() != nil {
				t.Fatalf("link went down: %v / %v", a.Err(), b.Err())
			}
			for _, tc := range []struct {
				side string
				c    *Conn
				e    *enginetest.Faulty
				v    *Verifier
				m    *mismatches
			}{{"sender", a, ea, va, &ma}, {"receiver", b, eb, vb, &mb}} {
				bad := tc.e.Calls() / 3
				if tc.e == eb {
					bad = (tc.e.Calls() + 2) / 3
				}
				if bad == 0 {
					t.Fatalf("%s: the engine was not used", tc.side)
				}
				if got := tc.v.Mismatches[1].Load(); got != bad {
					t.Errorf("%s: %d mismatches, the engine miscomputed %d times", tc.side, got, bad)
				}
				if got := tc.v.Checked[1].Load(); got != tc.e.Calls() {
					t.Errorf("%s: %d frames checked of %d", tc.side, got, tc.e.Calls())
				}
				if got := tc.c.Stats().Fallbacks[1].Load(); got != bad {
					t.Errorf("%s: %d fallbacks, want %d", tc.side, got, bad)
				}
				if tc.m.len() != int(bad) || tc.m.idx[0] != 1 || !errors.Is(tc.m.errs[0], ErrMismatch) {
					t.Errorf("%s: reported %v %v", tc.side, tc.m.idx, tc.m.errs)
				}
			}
		})
	}
}

// Sealed through a miscomputing engine with every frame verified, the
// wire is byte for byte the reference; without verification it is not.
func TestVerifyIdenticalWire(t *testing.T) {
	s := ctr128
	ka, kb := keyPair(t, s)
	msgs := testMessages(t, 12)
	frames := captured(t, s, ka, kb, msgs)
	for _, verify := range []*Verifier{NewVerifier(1, nil), nil} {
		c := &Conn{suite: s, stats: new(Stats), log: zap.NewNop(), opt: Options{
			Engines: []engine.Engine{engine.Software{}, &enginetest.Faulty{}}, Policy: pickFunc(always1), Verify: verify}}
		w := testWorker(c, engine.Encrypt, &ka.Send)
		same := 0
		for i, m := range msgs {
			f := getFrame(wireSize(len(m) + 16))
			copy(f.buf[HeaderSize:], m)
			f.seq, f.n = uint64(i), len(m)
			if err := w.seal(f); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(f.buf[:wireSize(f.n)], frames[i]) {
				same++
			}
			putFrame(f)
		}
		w.close()
		switch {
		case verify != nil && same != len(msgs):
			t.Errorf("verified: %d of %d frames are the reference", same, len(msgs))
		case verify == nil && same != 0:
			t.Errorf("not verified: %d frames of a miscomputing engine are the reference", same)
		}
	}
}

// Verify N checks one in N engine frames; 0 and nil check none.
func TestVerifySampling(t *testing.T) {
	for _, every := range []int{0, 1, 4} {
		e := &enginetest.Faulty{Bad: func(uint64) bool { return false }}
		v := NewVerifier(every, nil)
		o := Options{Engines: []engine.Engine{engine.Software{}, e}, Policy: only1(engine.Encrypt), Verify: v}
		c1, c2 := tcpPair(t)
		a, b := newPair(t, c1, c2, ctr128, o, Options{})
		roundTrip(t, a, b, 256<<10, 4<<10)
		frames := a.Stats().Frames[engine.Encrypt][1].Load()
		want := uint64(0)
		if every > 0 {
			want = frames / uint64(every)
		}
		if got := v.Checked[1].Load(); frames == 0 || got != want || v.Mismatches[1].Load() != 0 {
			t.Errorf("verify %d: %d of %d engine frames checked, want %d; %d mismatches", every, got, frames, want, v.Mismatches[1].Load())
		}
		if v.Every() != every {
			t.Errorf("Every() = %d, want %d", v.Every(), every)
		}
	}
	var nilV *Verifier
	if nilV.Every() != 0 {
		t.Error("nil Verifier has a rate")
	}
}

// Whole-frame engines are verified whole: a wrong ciphertext under its own
// valid tag, or a wrong plaintext, is caught, redone in software and
// reported; the data arrives intact and the counts move to software.
func TestVerifyWholeFrames(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		t.Run(s.Cipher.String(), func(t *testing.T) {
			// Different frames on each end, so that lies can't cancel.
			// a's engine only seals, b's only opens.
			ea := &enginetest.FaultyFrames{Label: "lying-aead", Bad: func(n uint64) bool { return n%3 == 0 }}
			eb := &enginetest.FaultyFrames{Label: "lying-aead", Bad: func(uint64) bool { return false }, BadOpen: func(n uint64) bool { return n%4 == 1 }}
			var ma, mb mismatches
			va, vb := NewVerifier(1, ma.add), NewVerifier(1, mb.add)
			oa := Options{Engines: []engine.Engine{engine.Software{}, ea}, Policy: only1(engine.Encrypt), Verify: va}
			ob := Options{Engines: []engine.Engine{engine.Software{}, eb}, Policy: only1(engine.Decrypt), Verify: vb}
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s, oa, ob)
			roundTrip(t, a, b, 256<<10, 16<<10)
			if a.Err() != nil || b.Err() != nil {
				t.Fatalf("link went down: %v / %v", a.Err(), b.Err())
			}
			for _, tc := range []struct {
				side string
				c    *Conn
				e    *enginetest.FaultyFrames
				v    *Verifier
				m    *mismatches
				dir  engine.Direction
			}{{"sender", a, ea, va, &ma, engine.Encrypt}, {"receiver", b, eb, vb, &mb, engine.Decrypt}} {
				lies := tc.e.Lies()
				if lies == 0 {
					t.Fatalf("%s: the engine never lied", tc.side)
				}
				if got := tc.v.Mismatches[1].Load(); got != lies || uint64(tc.m.len()) != lies {
					t.Errorf("%s: %d mismatches (%d reported), the engine lied %d times", tc.side, got, tc.m.len(), lies)
				}
				st := tc.c.Stats()
				if st.Fallbacks[1].Load() != lies || st.Frames[tc.dir][0].Load() != lies || st.Frames[tc.dir][1].Load() != tc.e.Seals()+tc.e.Opens()-lies {
					t.Errorf("%s: fallbacks %d, software frames %d, engine frames %d; engine ran %d, lied %d", tc.side,
						st.Fallbacks[1].Load(), st.Frames[tc.dir][0].Load(), st.Frames[tc.dir][1].Load(), tc.e.Seals()+tc.e.Opens(), lies)
				}
			}
		})
	}
}

// A whole-frame engine that accepts a forged tag is caught by verify: the
// software check of the tag fails the frame (ErrAuth), and the engine is
// reported.
func TestVerifyWholeFrameForgery(t *testing.T) {
	s := ctr256
	fe := &enginetest.FaultyFrames{Label: "lying-aead", AcceptForged: true}
	var m mismatches
	a, err := readForged(t, s, Options{Engines: []engine.Engine{engine.Software{}, fe}, Policy: pickEngine(1), Verify: NewVerifier(1, m.add)})
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("read of a forged frame the engine accepted: %v, want ErrAuth", err)
	}
	if m.len() != 1 || !strings.Contains(m.errs[0].Error(), "tag does not verify") || a.Stats().AuthFailures.Load() != 1 {
		t.Errorf("reported %v; auth failures %d", m.errs, a.Stats().AuthFailures.Load())
	}
}
