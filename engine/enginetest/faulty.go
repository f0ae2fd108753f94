package enginetest

import (
	"sync/atomic"

	"github.com/offload-dev/offload/engine"
)

// Faulty is an engine that silently computes wrong answers, as a broken
// device would: its Crypters run Base's and then flip one bit of the
// output of the operations Bad picks. No error is returned; only a check
// against another engine can tell.
type Faulty struct {
	Base engine.Engine // engine.Software{} when nil
	// Label is Name's answer; "faulty" when empty.
	Label string
	// Bad reports whether operation n (counted from 1 over every Crypter
	// of this engine) is wrong; nil means every one.
	Bad func(n uint64) bool
	// OnlyEncrypt keeps decryptions right (Bad is not asked for them), so
	// that wrong answers on both ends of a test link can't cancel out.
	OnlyEncrypt bool
	// Hang, if not nil, makes every operation after the first HangAfter
	// wait until it is closed, as a device whose driver never answers
	// (or stops answering). The output is written before the wait, as a
	// device that finishes late would.
	Hang      <-chan struct{}
	HangAfter uint64
	calls     atomic.Uint64
}

var _ engine.Engine = (*Faulty)(nil)

func (f *Faulty) base() engine.Engine {
	if f.Base == nil {
		return engine.Software{}
	}
	return f.Base
}

// Name implements engine.Engine.
func (f *Faulty) Name() string {
	if f.Label == "" {
		return "faulty"
	}
	return f.Label
}

// Driver implements engine.Engine: the base engine's.
func (f *Faulty) Driver(c engine.Cipher) (engine.Driver, error) { return f.base().Driver(c) }

// NewCrypter implements engine.Engine.
func (f *Faulty) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := f.base().NewCrypter(c, key)
	if err != nil {
		return nil, err
	}
	return &faultyCrypter{Crypter: cr, f: f}, nil
}

// Calls is how many operations the engine's Crypters ran.
func (f *Faulty) Calls() uint64 { return f.calls.Load() }

type faultyCrypter struct {
	engine.Crypter
	f *Faulty
}

func (c *faultyCrypter) Encrypt(dst, src, iv []byte) error {
	return c.corrupt(dst, len(src), true, c.Crypter.Encrypt(dst, src, iv))
}

func (c *faultyCrypter) Decrypt(dst, src, iv []byte) error {
	return c.corrupt(dst, len(src), !c.f.OnlyEncrypt, c.Crypter.Decrypt(dst, src, iv))
}

func (c *faultyCrypter) corrupt(dst []byte, n int, may bool, err error) error {
	k := c.f.calls.Add(1)
	if c.f.Hang != nil && k > c.f.HangAfter {
		<-c.f.Hang
	}
	if err == nil && n > 0 && may && (c.f.Bad == nil || c.f.Bad(k)) {
		dst[n/2] ^= 0x04
	}
	return err
}
