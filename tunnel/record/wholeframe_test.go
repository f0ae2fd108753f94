package record

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
	"github.com/offload-dev/offload/tunnel/suite"
)

// frameEngine is a right frame engine (a FaultyFrames that never lies):
// the software cipher and HMAC-SHA256 over aad | ciphertext, what authenc
// computes, so the record's use of frame engines can be tested anywhere
// (the kernel's own is proved identical in engine's TestKernelAEAD*).
func frameEngine() *enginetest.FaultyFrames {
	return &enginetest.FaultyFrames{Label: "fake-aead", Bad: func(uint64) bool { return false }}
}

type pickEngine int

func (p pickEngine) Pick(int, engine.Direction) int { return int(p) }

func frameEnginePair(t *testing.T, s suite.Suite, fe *enginetest.FaultyFrames) (*Conn, *Conn) {
	c1, c2 := tcpPair(t)
	return newPair(t, c1, c2, s, Options{Engines: []engine.Engine{engine.Software{}, fe}, Policy: pickEngine(1)}, Options{})
}

// TestFrameEngineRoundTrip: with a frame engine picked, hmac-sha256 frames
// are sealed and opened whole on it and interoperate with a software-only
// peer; other MACs use its Crypter and the record's own MAC.
func TestFrameEngineRoundTrip(t *testing.T) {
	for _, s := range macSuites() {
		t.Run(s.String(), func(t *testing.T) {
			fe := frameEngine()
			a, b := frameEnginePair(t, s, fe)
			roundTrip(t, a, b, 256<<10, 40<<10)
			st := a.Stats()
			if st.Frames[engine.Encrypt][1].Load() == 0 || st.Frames[engine.Decrypt][1].Load() == 0 || st.Fallbacks[1].Load() != 0 {
				t.Errorf("frames on engine 1: %d sealed, %d opened, %d fallbacks",
					st.Frames[engine.Encrypt][1].Load(), st.Frames[engine.Decrypt][1].Load(), st.Fallbacks[1].Load())
			}
			whole := s.MAC == suite.HMACSHA256
			if got := fe.Seals() > 0 && fe.Opens() > 0; got != whole {
				t.Errorf("%v: sealer used %d/%d times, want whole frames: %v", s.MAC, fe.Seals(), fe.Opens(), whole)
			}
		})
	}
}

// TestFrameEngineFallback: a frame engine that fails has every frame redone
// in software; the data is intact and the fallbacks are counted.
func TestFrameEngineFallback(t *testing.T) {
	fe := frameEngine()
	fe.Fail = func(uint64) bool { return true }
	a, b := frameEnginePair(t, cbc128, fe)
	roundTrip(t, a, b, 64<<10, 8<<10)
	st := a.Stats()
	if st.Fallbacks[1].Load() == 0 || fe.Seals() == 0 || fe.Opens() == 0 {
		t.Errorf("fallbacks %d, seals %d, opens %d", st.Fallbacks[1].Load(), fe.Seals(), fe.Opens())
	}
	if st.Frames[engine.Encrypt][0].Load() == 0 || st.Frames[engine.Decrypt][0].Load() == 0 {
		t.Error("no frames counted for software")
	}
}

// TestFrameEngineRejectsTampered: the frame engine's ErrAuth is the
// record's ErrAuth, counted as an auth failure, not an engine fallback.
func TestFrameEngineRejectsTampered(t *testing.T) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		t.Run(s.String(), func(t *testing.T) {
			fe := frameEngine()
			a, err := readForged(t, s, Options{Engines: []engine.Engine{engine.Software{}, fe}, Policy: pickEngine(1)})
			if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "fake-aead") {
				t.Fatalf("read: %v, want ErrAuth checked by fake-aead", err)
			}
			if a.Stats().AuthFailures.Load() != 1 || a.Stats().Fallbacks[1].Load() != 0 || fe.Opens() != 1 {
				t.Errorf("auth failures %d, fallbacks %d, opens %d", a.Stats().AuthFailures.Load(), a.Stats().Fallbacks[1].Load(), fe.Opens())
			}
		})
	}
}

// readForged makes a Conn with opt that reads one frame of suite s whose
// ciphertext was altered after sealing, and returns it with the read's
// error.
func readForged(t *testing.T, s suite.Suite, opt Options) (*Conn, error) {
	t.Helper()
	ka, kb := keyPair(t, s)
	c1, c2 := net.Pipe()
	t.Cleanup(func() { c2.Close() })
	a, err := New(c1, ka, s, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	wire := refSeal(&kb.Send, s, 0, []byte("forged"))
	wire[HeaderSize+2] ^= 1
	go c2.Write(wire)
	_, err = a.Read(make([]byte, 64))
	return a, err
}
