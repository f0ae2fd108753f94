package enginetest

import (
	"errors"
	"sync/atomic"

	"github.com/offload-dev/offload/engine"
)

// ErrFailing is what a Failing engine's operations return when its Err
// is nil.
var ErrFailing = errors.New("enginetest: the failing engine failed")

// Failing is an engine whose Crypters return an error for the operations
// Fail picks, as a device whose driver errors out would; the others are
// Base's. Where Faulty lies, Failing says so: the caller sees every
// failure.
type Failing struct {
	Base engine.Engine // engine.Software{} when nil
	// Label is Name's answer; "failing" when empty.
	Label string
	// Drv, if its Name is set, is Driver's answer (with the cipher's
	// kernel name as Algorithm); otherwise Base's.
	Drv engine.Driver
	// Fail reports whether operation n (counted from 1 over every Crypter
	// of this engine and both directions) fails, given its direction and
	// size in bytes; nil means every one.
	Fail func(n uint64, d engine.Direction, size int) bool
	// Err is the failure; ErrFailing when nil.
	Err   error
	calls atomic.Uint64
}

var _ engine.Engine = (*Failing)(nil)

func (f *Failing) base() engine.Engine {
	if f.Base == nil {
		return engine.Software{}
	}
	return f.Base
}

// Name implements engine.Engine.
func (f *Failing) Name() string {
	if f.Label == "" {
		return "failing"
	}
	return f.Label
}

// Driver implements engine.Engine.
func (f *Failing) Driver(c engine.Cipher) (engine.Driver, error) {
	if f.Drv.Name != "" {
		d := f.Drv
		d.Algorithm = c.KernelName()
		return d, nil
	}
	return f.base().Driver(c)
}

// NewCrypter implements engine.Engine.
func (f *Failing) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := f.base().NewCrypter(c, key)
	if err != nil {
		return nil, err
	}
	return &failingCrypter{Crypter: cr, f: f}, nil
}

// Calls is how many operations the engine's Crypters were asked for.
func (f *Failing) Calls() uint64 { return f.calls.Load() }

type failingCrypter struct {
	engine.Crypter
	f *Failing
}

func (c *failingCrypter) fails(d engine.Direction, size int) error {
	n := c.f.calls.Add(1)
	if c.f.Fail != nil && !c.f.Fail(n, d, size) {
		return nil
	}
	if c.f.Err != nil {
		return c.f.Err
	}
	return ErrFailing
}

func (c *failingCrypter) Encrypt(dst, src, iv []byte) error {
	if err := c.fails(engine.Encrypt, len(src)); err != nil {
		return err
	}
	return c.Crypter.Encrypt(dst, src, iv)
}

func (c *failingCrypter) Decrypt(dst, src, iv []byte) error {
	if err := c.fails(engine.Decrypt, len(src)); err != nil {
		return err
	}
	return c.Crypter.Decrypt(dst, src, iv)
}
