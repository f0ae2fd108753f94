// Package engine is the only door through which offload touches AES.
//
// An Engine makes Crypters for a (Cipher, key) pair. A Crypter encrypts or
// decrypts one whole buffer with an IV given per call, so every frame of the
// tunnel is self-contained and may be served by any engine: the software
// engine (Go's crypto/aes), the kernel's AF_ALG sockets, or /dev/crypto
// (cryptodev-linux).
//
// Every engine reports the kernel driver that really serves each cipher
// (Driver) and whether that driver is a hardware device, so nobody routes
// frames to a "kernel engine" that is really aes-generic. An engine that
// cannot be used says why with an error wrapping ErrUnavailable; it never
// silently becomes another engine.
package engine

import (
	"fmt"
	"strings"

	"go.uber.org/zap"
)

// BlockSize is the AES block size and the IV length every Crypter expects.
const BlockSize = 16

// Mode is a block cipher mode of operation.
type Mode uint8

// The modes offload supports. ECB exists only to measure engines the way
// `openssl speed -evp aes-256-ecb` and tcrypt do: it leaks equal blocks, so
// the tunnel never uses it (Cipher.Valid is false for it).
const (
	CBC Mode = iota + 1
	CTR
	ECB
)

func (m Mode) String() string {
	switch m {
	case CBC:
		return "cbc"
	case CTR:
		return "ctr"
	case ECB:
		return "ecb"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Cipher names an AES key size and mode, e.g. aes-256-cbc.
type Cipher struct {
	Mode    Mode
	KeyBits int // 128, 192 or 256
}

// Ciphers lists every cipher the tunnel supports, in the order tables show
// them.
var Ciphers = []Cipher{
	{CBC, 128}, {CBC, 192}, {CBC, 256},
	{CTR, 128}, {CTR, 192}, {CTR, 256},
}

// MeasureCiphers is Ciphers plus the ECB ciphers, which engines serve for
// measuring only (offload speed); nothing else may use them.
var MeasureCiphers = append(append([]Cipher(nil), Ciphers...),
	Cipher{ECB, 128}, Cipher{ECB, 192}, Cipher{ECB, 256})

// ParseCipher parses an openssl-style name of one of Ciphers such as
// "aes-256-cbc" (case-insensitive; "aes256" alone means aes-256-cbc, as
// openssl reads it). It refuses ECB: see ParseMeasureCipher.
func ParseCipher(s string) (Cipher, error) {
	c, err := ParseMeasureCipher(s)
	if err != nil {
		return Cipher{}, err
	}
	if !c.Valid() {
		return Cipher{}, fmt.Errorf("%w: %q is for measuring only (offload speed), never for the tunnel", ErrUnknownCipher, s)
	}
	return c, nil
}

// ParseMeasureCipher parses a name of one of MeasureCiphers, ECB included.
func ParseMeasureCipher(s string) (Cipher, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	switch name {
	case "aes128", "aes192", "aes256":
		name = "aes-" + name[3:] + "-cbc"
	}
	for _, c := range MeasureCiphers {
		if c.String() == name {
			return c, nil
		}
	}
	return Cipher{}, fmt.Errorf("%w: %q (want aes-128|192|256-cbc|ctr|ecb)", ErrUnknownCipher, s)
}

// String returns the openssl name, e.g. "aes-256-cbc".
func (c Cipher) String() string { return fmt.Sprintf("aes-%d-%s", c.KeyBits, c.Mode) }

// KeySize is the key length in bytes.
func (c Cipher) KeySize() int { return c.KeyBits / 8 }

// KernelName is the crypto API algorithm name, e.g. "cbc(aes)".
func (c Cipher) KernelName() string { return c.Mode.String() + "(aes)" }

// Valid reports whether c is one of Ciphers, the tunnel's ciphers.
func (c Cipher) Valid() bool {
	return (c.Mode == CBC || c.Mode == CTR) && c.validKey()
}

// Measurable reports whether c is one of MeasureCiphers: what engines serve.
func (c Cipher) Measurable() bool {
	return (c.Mode == CBC || c.Mode == CTR || c.Mode == ECB) && c.validKey()
}

func (c Cipher) validKey() bool { return c.KeyBits == 128 || c.KeyBits == 192 || c.KeyBits == 256 }

// Blocks reports whether c takes only whole 16-byte blocks (CBC and ECB;
// CTR takes any length).
func (c Cipher) Blocks() bool { return c.Mode == CBC || c.Mode == ECB }

// Direction is encrypt or decrypt.
type Direction uint8

// The two directions.
const (
	Encrypt Direction = iota
	Decrypt
)

func (d Direction) String() string {
	if d == Decrypt {
		return "decrypt"
	}
	return "encrypt"
}

// Driver describes the implementation that serves a cipher.
type Driver struct {
	// Name is the implementation's own name: the kernel's cra_driver_name
	// (e.g. "cbc-aes-aesni", "virtio_crypto_aes_cbc") or, for the software
	// engine, the Go implementation (e.g. "go/aes-ni").
	Name string `json:"name"`
	// Algorithm is the generic name, e.g. "cbc(aes)".
	Algorithm string `json:"algorithm"`
	// Module is the kernel module that registered the driver ("kernel" when
	// built in), empty for the software engine.
	Module string `json:"module,omitempty"`
	// Priority is the kernel's cra_priority; the highest wins a plain
	// algorithm name.
	Priority int `json:"priority,omitempty"`
	// Async reports an asynchronous kernel driver (a device queue).
	Async bool `json:"async"`
	// Hardware reports a driver backed by a crypto device rather than CPU
	// instructions; HardwareWhy says how that was decided.
	Hardware    bool   `json:"hardware"`
	HardwareWhy string `json:"hardware_why,omitempty"`
}

func (d Driver) String() string {
	kind := "cpu"
	if d.Hardware {
		kind = "hardware"
	}
	s := d.Name
	if d.Module != "" {
		s += " (" + d.Module + ")"
	}
	return s + ", " + kind
}

// Engine makes Crypters. Implementations are safe for concurrent use.
type Engine interface {
	// Name is the engine spec that Open accepts, e.g. "software", "afalg",
	// "afalg:virtio_crypto_aes_cbc", "cryptodev".
	Name() string
	// Driver reports the implementation that would serve c, or an error
	// wrapping ErrUnavailable that says why c cannot be served.
	Driver(c Cipher) (Driver, error)
	// NewCrypter returns a Crypter for c keyed with key. The caller owns it
	// and must Close it.
	NewCrypter(c Cipher, key []byte) (Crypter, error)
}

// Crypter encrypts or decrypts whole buffers with one key. It is not safe
// for concurrent use: make one per worker.
//
// Encrypt and Decrypt process all of src into dst[:len(src)] with the given
// 16-byte IV, which they do not modify. dst must be at least as long as src;
// dst and src may be the same buffer (in place) but must not overlap
// otherwise. CBC and ECB need len(src) to be a multiple of 16; CTR takes any
// length and increments the whole 128-bit counter block (so counters carry
// across the 64-bit boundary). ECB takes the same 16-byte IV as the other
// modes, so every call has one shape, and ignores it. A Crypter returns an error rather than a wrong result;
// after an error dst is unspecified.
type Crypter interface {
	Encrypt(dst, src, iv []byte) error
	Decrypt(dst, src, iv []byte) error
	// Cipher is the cipher this Crypter was made for.
	Cipher() Cipher
	// Driver is the implementation that really serves this Crypter, as the
	// kernel reports it for this very key/session where it can.
	Driver() Driver
	Close() error
}

// Crypt calls c.Encrypt or c.Decrypt by direction.
func Crypt(c Crypter, d Direction, dst, src, iv []byte) error {
	if d == Decrypt {
		return c.Decrypt(dst, src, iv)
	}
	return c.Encrypt(dst, src, iv)
}

// Options configure the kernel engines.
type Options struct {
	// Logger receives engine events (driver bound, retries); nil means none.
	Logger *zap.Logger
}

func (o Options) logger(name string) *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger.Named(name)
}
