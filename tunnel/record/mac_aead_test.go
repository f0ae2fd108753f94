package record

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// fakeFrameEngine is the software engine with a FrameSealer made of the
// software cipher and HMAC-SHA256 over aad | ciphertext: what authenc
// computes, so the record's use of frame engines can be tested anywhere
// (the kernel's own is proved identical in engine's TestKernelAEAD*).
type fakeFrameEngine struct {
	engine.Software
	seals, opens atomic.Int64
	fail         atomic.Bool // every Seal/Open fails with an engine error
}

var errFakeDevice = errors.New("fake device fault")

func (f *fakeFrameEngine) Name() string { return "fake-aead" }

func (f *fakeFrameEngine) NewFrameSealer(c engine.Cipher, encKey, macKey []byte) (engine.FrameSealer, error) {
	cr, err := f.NewCrypter(c, encKey)
	if err != nil {
		return nil, err
	}
	return &fakeSealer{f: f, cr: cr, key: macKey}, nil
}

type fakeSealer struct {
	f   *fakeFrameEngine
	cr  engine.Crypter
	key []byte
}

func (s *fakeSealer) tag(aad, ct []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(aad)
	m.Write(ct)
	return m.Sum(nil)[:engine.FrameTagSize]
}

func (s *fakeSealer) Seal(dst, aad, pt, iv []byte) error {
	s.f.seals.Add(1)
	if s.f.fail.Load() {
		return errFakeDevice
	}
	if err := s.cr.Encrypt(dst, pt, iv); err != nil {
		return err
	}
	copy(dst[len(pt):], s.tag(aad, dst[:len(pt)]))
	return nil
}

func (s *fakeSealer) Open(dst, aad, sealed, iv []byte) error {
	s.f.opens.Add(1)
	if s.f.fail.Load() {
		return errFakeDevice
	}
	n := len(sealed) - engine.FrameTagSize
	if !hmac.Equal(s.tag(aad, sealed[:n]), sealed[n:]) {
		return fmt.Errorf("fake: %w", engine.ErrAuth)
	}
	return s.cr.Decrypt(dst, sealed[:n], iv)
}

func (s *fakeSealer) Cipher() engine.Cipher { return s.cr.Cipher() }
func (s *fakeSealer) Driver() engine.Driver { return engine.Driver{Name: "fake"} }
func (s *fakeSealer) Close() error          { return s.cr.Close() }

var _ engine.FrameEngine = (*fakeFrameEngine)(nil)

type pickEngine int

func (p pickEngine) Pick(int, engine.Direction) int { return int(p) }

func frameEnginePair(t *testing.T, s suite.Suite) (*Conn, *Conn, *fakeFrameEngine) {
	fe := new(fakeFrameEngine)
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, s, Options{Engines: []engine.Engine{engine.Software{}, fe}, Policy: pickEngine(1)}, Options{})
	return a, b, fe
}

// TestFrameEngineRoundTrip: with a frame engine picked, hmac-sha256 frames
// are sealed and opened whole on it and interoperate with a software-only
// peer; other MACs use its Crypter and the record's own MAC.
func TestFrameEngineRoundTrip(t *testing.T) {
	for _, s := range macSuites() {
		t.Run(s.String(), func(t *testing.T) {
			a, b, fe := frameEnginePair(t, s)
			roundTrip(t, a, b, 256<<10, 40<<10)
			st := a.Stats()
			if st.Frames[engine.Encrypt][1].Load() == 0 || st.Frames[engine.Decrypt][1].Load() == 0 || st.Fallbacks[1].Load() != 0 {
				t.Errorf("frames on engine 1: %d sealed, %d opened, %d fallbacks",
					st.Frames[engine.Encrypt][1].Load(), st.Frames[engine.Decrypt][1].Load(), st.Fallbacks[1].Load())
			}
			whole := s.MAC == suite.HMACSHA256
			if got := fe.seals.Load() > 0 && fe.opens.Load() > 0; got != whole {
				t.Errorf("%v: sealer used %d/%d times, want whole frames: %v", s.MAC, fe.seals.Load(), fe.opens.Load(), whole)
			}
		})
	}
}

// TestFrameEngineFallback: a frame engine that fails has every frame redone
// in software; the data is intact and the fallbacks are counted.
func TestFrameEngineFallback(t *testing.T) {
	a, b, fe := frameEnginePair(t, cbc128)
	fe.fail.Store(true)
	roundTrip(t, a, b, 64<<10, 8<<10)
	st := a.Stats()
	if st.Fallbacks[1].Load() == 0 || fe.seals.Load() == 0 || fe.opens.Load() == 0 {
		t.Errorf("fallbacks %d, seals %d, opens %d", st.Fallbacks[1].Load(), fe.seals.Load(), fe.opens.Load())
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
			fe := new(fakeFrameEngine)
			ka, kb := keyPair(t, s)
			c1, c2 := net.Pipe()
			defer c2.Close()
			a, err := New(c1, ka, s, Options{Engines: []engine.Engine{engine.Software{}, fe}, Policy: pickEngine(1)})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			wire := refSeal(&kb.Send, s, 0, []byte("forged"))
			wire[HeaderSize+2] ^= 1
			go c2.Write(wire)
			_, err = a.Read(make([]byte, 64))
			if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "fake-aead") {
				t.Fatalf("read: %v, want ErrAuth checked by fake-aead", err)
			}
			if a.Stats().AuthFailures.Load() != 1 || a.Stats().Fallbacks[1].Load() != 0 || fe.opens.Load() != 1 {
				t.Errorf("auth failures %d, fallbacks %d, opens %d", a.Stats().AuthFailures.Load(), a.Stats().Fallbacks[1].Load(), fe.opens.Load())
			}
		})
	}
}
