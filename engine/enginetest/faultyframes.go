package enginetest

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"sync/atomic"

	"github.com/offload-dev/offload/engine"
)

// FaultyFrames is a FrameEngine, as afalg-aead is, whose Crypters are
// right (so engine.SelfTest passes) but whose FrameSealer miscomputes:
// Seal corrupts a byte of the ciphertext before tagging it, so the frame
// carries a valid tag over the wrong ciphertext, the threat the engine
// checks are for. With AcceptForged, Open also accepts any tag.
type FaultyFrames struct {
	engine.Software
	// Label is Name's answer; "faulty-frames" when empty.
	Label string
	// Bad reports whether Seal n (counted from 1 over every sealer of
	// this engine) is wrong; nil means every one.
	Bad func(n uint64) bool
	// AcceptForged makes Open skip the tag check.
	AcceptForged bool
	// Hang, if not nil, makes every Seal and Open after the first
	// HangAfter (counted together) wait until it is closed, after writing
	// its output, as Faulty's Hang does.
	Hang      <-chan struct{}
	HangAfter uint64
	seals     atomic.Uint64
	ops       atomic.Uint64
}

// hang waits on Hang when this operation is past HangAfter.
func (f *FaultyFrames) hang() {
	if k := f.ops.Add(1); f.Hang != nil && k > f.HangAfter {
		<-f.Hang
	}
}

var _ engine.FrameEngine = (*FaultyFrames)(nil)

// Name implements engine.Engine.
func (f *FaultyFrames) Name() string {
	if f.Label == "" {
		return "faulty-frames"
	}
	return f.Label
}

// Ops is how many frames the engine's sealers sealed or opened.
func (f *FaultyFrames) Ops() uint64 { return f.ops.Load() }

// Seals is how many frames the engine's sealers sealed.
func (f *FaultyFrames) Seals() uint64 { return f.seals.Load() }

// NewFrameSealer implements engine.FrameEngine.
func (f *FaultyFrames) NewFrameSealer(c engine.Cipher, encKey, macKey []byte) (engine.FrameSealer, error) {
	cr, err := f.Software.NewCrypter(c, encKey)
	if err != nil {
		return nil, err
	}
	return &faultySealer{f: f, cr: cr, key: append([]byte(nil), macKey...)}, nil
}

type faultySealer struct {
	f   *FaultyFrames
	cr  engine.Crypter
	key []byte
}

func (s *faultySealer) tag(aad, ct []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(aad)
	m.Write(ct)
	return m.Sum(nil)[:engine.FrameTagSize]
}

func (s *faultySealer) Seal(dst, aad, pt, iv []byte) error {
	n := len(pt)
	if err := s.cr.Encrypt(dst[:n], pt, iv); err != nil {
		return err
	}
	if k := s.f.seals.Add(1); n > 0 && (s.f.Bad == nil || s.f.Bad(k)) {
		dst[n/2] ^= 0x10
	}
	copy(dst[n:n+engine.FrameTagSize], s.tag(aad, dst[:n]))
	s.f.hang()
	return nil
}

func (s *faultySealer) Open(dst, aad, sealed, iv []byte) error {
	n := len(sealed) - engine.FrameTagSize
	if n < 0 {
		return engine.ErrFrameSize
	}
	if !s.f.AcceptForged && !hmac.Equal(s.tag(aad, sealed[:n]), sealed[n:]) {
		return fmt.Errorf("faulty-frames: %w", engine.ErrAuth)
	}
	err := s.cr.Decrypt(dst[:n], sealed[:n], iv)
	s.f.hang()
	return err
}

func (s *faultySealer) Cipher() engine.Cipher { return s.cr.Cipher() }
func (s *faultySealer) Driver() engine.Driver { return engine.Driver{Name: "faulty-frames"} }
func (s *faultySealer) Close() error          { return s.cr.Close() }
