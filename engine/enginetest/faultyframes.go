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
// checks are for. With AcceptForged, Open also accepts any tag; with
// BadOpen, it opens to a wrong plaintext; with Fail, the sealer says it
// failed. With Bad never true and the rest unset it is a right frame
// engine: the software cipher and HMAC-SHA256 over aad | ciphertext, what
// authenc computes, for tests of the frame engine's users anywhere.
type FaultyFrames struct {
	engine.Software
	// Label is Name's answer; "faulty-frames" when empty.
	Label string
	// Bad reports whether Seal n (counted from 1 over every sealer of
	// this engine) is wrong; nil means every one.
	Bad func(n uint64) bool
	// BadOpen reports whether Open n (counted from 1 over every sealer of
	// this engine) opens a frame whose tag is valid to a wrong plaintext;
	// nil means none.
	BadOpen func(n uint64) bool
	// AcceptForged makes Open skip the tag check.
	AcceptForged bool
	// Fail reports whether Seal or Open n (counted together from 1)
	// returns ErrFailing instead, as a device whose driver errors out;
	// nil means none.
	Fail func(n uint64) bool
	// Hang, if not nil, makes every Seal and Open after the first
	// HangAfter (counted together) wait until it is closed, after writing
	// its output, as Faulty's Hang does.
	Hang      <-chan struct{}
	HangAfter uint64
	seals     atomic.Uint64
	opens     atomic.Uint64
	calls     atomic.Uint64 // Seals and Opens, for Fail
	lies      atomic.Uint64
	ops       atomic.Uint64 // Seals and Opens past their checks, for Hang
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

// Seals is how many frames the engine's sealers were asked to seal.
func (f *FaultyFrames) Seals() uint64 { return f.seals.Load() }

// Opens is how many frames the engine's sealers were asked to open.
func (f *FaultyFrames) Opens() uint64 { return f.opens.Load() }

// Lies is how many Seals and Opens gave a wrong answer (Bad, BadOpen).
func (f *FaultyFrames) Lies() uint64 { return f.lies.Load() }

// fails reports whether this Seal or Open fails (Fail).
func (f *FaultyFrames) fails() error {
	if n := f.calls.Add(1); f.Fail != nil && f.Fail(n) {
		return ErrFailing
	}
	return nil
}

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
	k := s.f.seals.Add(1)
	if err := s.f.fails(); err != nil {
		return err
	}
	n := len(pt)
	if err := s.cr.Encrypt(dst[:n], pt, iv); err != nil {
		return err
	}
	if n > 0 && (s.f.Bad == nil || s.f.Bad(k)) {
		dst[n/2] ^= 0x10
		s.f.lies.Add(1)
	}
	copy(dst[n:n+engine.FrameTagSize], s.tag(aad, dst[:n]))
	s.f.hang()
	return nil
}

func (s *faultySealer) Open(dst, aad, sealed, iv []byte) error {
	k := s.f.opens.Add(1)
	if err := s.f.fails(); err != nil {
		return err
	}
	n := len(sealed) - engine.FrameTagSize
	if n < 0 {
		return engine.ErrFrameSize
	}
	if !s.f.AcceptForged && !hmac.Equal(s.tag(aad, sealed[:n]), sealed[n:]) {
		return fmt.Errorf("faulty-frames: %w", engine.ErrAuth)
	}
	err := s.cr.Decrypt(dst[:n], sealed[:n], iv)
	if err == nil && n > 0 && s.f.BadOpen != nil && s.f.BadOpen(k) {
		dst[n/2] ^= 0x10
		s.f.lies.Add(1)
	}
	s.f.hang()
	return err
}

func (s *faultySealer) Cipher() engine.Cipher { return s.cr.Cipher() }
func (s *faultySealer) Driver() engine.Driver { return engine.Driver{Name: "faulty-frames"} }
func (s *faultySealer) Close() error          { return s.cr.Close() }
