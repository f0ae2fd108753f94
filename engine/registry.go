package engine

import (
	"fmt"
	"strings"
)

// The registry is the one place that knows the engine names and the
// syntax of an engine spec. Everything else (config validation, the
// selector, offload engines, speed, calibrate, bench and their help texts)
// asks it, so that a new engine added here appears everywhere and the
// lists cannot drift apart again. The selector adds its policies (auto,
// hybrid) on top of these specs in selector/spec.go.

// Kind says what an engine does for the record layer.
type Kind int

const (
	// KindCipher: the cipher alone (Crypters); the record layer
	// computes the MAC on the CPU.
	KindCipher Kind = iota
	// KindFrame: whole frames too (a FrameEngine: cipher and
	// HMAC-SHA256 in one request) for *-hmac-sha256 suites; its Crypters
	// serve the other suites.
	KindFrame
)

// Arg is what may follow "NAME:" in a spec.
type Arg int

const (
	// NoArg: the name alone.
	NoArg Arg = iota
	// DriverArg: optionally ":DRIVER", a kernel driver name or a prefix of
	// one (cra_driver_name, e.g. cbc-aes-aesni, virtio_crypto).
	DriverArg
	// HardwareArg: optionally the literal ":hw".
	HardwareArg
)

// Family is one engine name with the specs it takes.
type Family struct {
	Name string
	Arg  Arg
	Kind Kind
	// Description says what the engine is; described(arg) refines it for
	// a spec with an argument.
	Description string
	described   func(arg string) string
	open        func(arg string, o Options) Engine
	// whyNoCipherFigures, for a frame engine, says why a cipher-only
	// measurement (speed, calibrate) does not show what it does.
	whyNoCipherFigures string
}

// families is the registry, in the order listings show them.
var families = []Family{
	{
		Name: SoftwareName, Arg: NoArg, Kind: KindCipher,
		Description: "Go crypto/aes on the CPU",
		open:        func(string, Options) Engine { return Software{} },
	},
	{
		Name: AFALGName, Arg: DriverArg, Kind: KindCipher,
		Description: "Linux AF_ALG skcipher sockets, the kernel's highest-priority driver",
		described: func(d string) string {
			return "Linux AF_ALG skcipher sockets bound to driver " + d
		},
		open: func(d string, o Options) Engine { return NewAFALG(d, o) },
	},
	{
		Name: AFALGAEADName, Arg: DriverArg, Kind: KindFrame,
		Description: "Linux AF_ALG aead sockets: whole frames of *-hmac-sha256 suites, cipher and HMAC-SHA256 in one " +
			"request (authenc), the kernel's highest-priority drivers; skcipher sockets for other suites",
		described: func(d string) string {
			return "Linux AF_ALG aead sockets: whole frames of *-hmac-sha256 suites, cipher and HMAC-SHA256 in one " +
				"request (authenc) with cipher driver " + d + "; skcipher sockets on it for other suites"
		},
		open: func(d string, o Options) Engine { return NewAFALGAEAD(d, o) },
		// Its Crypters are the afalg engine's skcipher sockets, so cipher
		// figures would be afalg's row again; what it adds is the MAC in
		// the same request, which only a whole frame shows.
		whyNoCipherFigures: "a frame engine: its cipher alone is the afalg engine's skcipher sockets (measured as afalg); " +
			"what it adds is HMAC-SHA256 in the same kernel request, which only whole frames show: " +
			"offload frame-cost -engine afalg-aead -mac hmac-sha256 measures them, " +
			"offload bench -suite aes-256-cbc-hmac-sha256 -policy afalg-aead the tunnel with them",
	},
	{
		Name: CryptodevName, Arg: HardwareArg, Kind: KindCipher,
		Description: "/dev/crypto (cryptodev-linux) ioctls",
		described: func(string) string {
			return "/dev/crypto (cryptodev-linux) ioctls, only where the driver it binds is kernel-driver-only (a device)"
		},
		open: func(hw string, o Options) Engine {
			if hw != "" {
				return NewCryptodevHardware(o)
			}
			return NewCryptodev(o)
		},
	},
}

// Families returns every engine the registry knows, in listing order.
func Families() []Family { return append([]Family(nil), families...) }

// Syntax is the family's specs for help texts, e.g. "afalg, afalg:DRIVER".
func (f Family) Syntax() string {
	switch f.Arg {
	case DriverArg:
		return f.Name + ", " + f.Name + ":DRIVER"
	case HardwareArg:
		return f.Name + ", " + f.Name + ":hw"
	}
	return f.Name
}

// Specs is every engine spec Open accepts, for help texts and error
// messages: "software, afalg, afalg:DRIVER, afalg-aead, ...". It is made
// from the registry once; a variable rather than a function so that flag
// definitions can concatenate it.
var Specs = specs()

func specs() string {
	var s []string
	for _, f := range families {
		s = append(s, f.Syntax())
	}
	return strings.Join(s, ", ")
}

// Spec is a parsed engine spec: a registered family and its argument ("" for none).
type Spec struct {
	Family Family
	Arg    string
}

// String is the spec as Open takes it.
func (s Spec) String() string {
	if s.Arg == "" {
		return s.Family.Name
	}
	return s.Family.Name + ":" + s.Arg
}

// Describe says what the engine is, for offload engines.
func (s Spec) Describe() string {
	if s.Arg == "" || s.Family.described == nil {
		return s.Family.Description
	}
	return s.Family.described(s.Arg)
}

// Open returns the engine. It does not check availability: ask the
// engine's Driver for the cipher you need.
func (s Spec) Open(o Options) Engine { return s.Family.open(s.Arg, o) }

// maxDriverName is a kernel driver name's limit (CRYPTO_MAX_ALG_NAME is
// 128 bytes with the NUL).
const maxDriverName = 127

// ParseSpec parses and validates an engine spec: "software", "afalg" (the
// kernel's highest-priority driver), "afalg:DRIVER" (a driver name or
// prefix, e.g. afalg:virtio_crypto), "afalg-aead[:DRIVER]" (whole frames,
// cipher and HMAC-SHA256 in one kernel request), "cryptodev" or
// "cryptodev:hw" (cryptodev only where the driver it binds is a device).
// The spec is taken exactly as given (no trimming). Every error wraps
// ErrUnknownEngine. A DRIVER is 1-127 printable ASCII characters without
// spaces: the kernel's driver names (cra_driver_name) are not otherwise
// restricted, and the selector reopens whatever names the kernel listed.
func ParseSpec(spec string) (Spec, error) {
	name, arg, hasArg := strings.Cut(spec, ":")
	for _, f := range families {
		if f.Name != name {
			continue
		}
		switch {
		case !hasArg:
			return Spec{Family: f}, nil
		case f.Arg == NoArg:
			return Spec{}, fmt.Errorf("%w %q: %s takes no :argument", ErrUnknownEngine, spec, name)
		case f.Arg == HardwareArg && arg != "hw":
			return Spec{}, fmt.Errorf("%w %q: %s takes only :hw (cryptodev-linux cannot bind a driver by name; use afalg:DRIVER)", ErrUnknownEngine, spec, name)
		case f.Arg == DriverArg:
			if err := checkDriverName(arg); err != nil {
				return Spec{}, fmt.Errorf("%w %q: %v", ErrUnknownEngine, spec, err)
			}
		}
		return Spec{Family: f, Arg: arg}, nil
	}
	return Spec{}, fmt.Errorf("%w %q (one of %s)", ErrUnknownEngine, spec, Specs)
}

func checkDriverName(d string) error {
	if d == "" || len(d) > maxDriverName {
		return fmt.Errorf("driver name must be 1-%d characters", maxDriverName)
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("driver name has %q", c)
		}
	}
	return nil
}

// Open returns the engine that spec names (see ParseSpec). It does not
// check availability: ask the engine's Driver for the cipher you need.
func Open(spec string, o Options) (Engine, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	return s.Open(o), nil
}

// Describe says what the engine a spec names is ("" for a spec that
// names none).
func Describe(spec string) string {
	s, err := ParseSpec(spec)
	if err != nil {
		return ""
	}
	return s.Describe()
}

// WhyNoCipherFigures says why a cipher-only measurement (offload speed,
// calibrate, frame-cost's cipher parts) does not apply to the engine a
// spec names, or "" where it does. A frame engine's Crypters are another
// engine's (afalg-aead's are afalg's), so its own figures come only from
// whole frames.
func WhyNoCipherFigures(spec string) string {
	s, err := ParseSpec(spec)
	if err != nil {
		return ""
	}
	return s.Family.whyNoCipherFigures
}

// Discover lists the engines worth measuring for c by cipher alone:
// software, AF_ALG bound by algorithm name (what the kernel picks), AF_ALG
// bound to each other driver the kernel registers for c (a device often
// has a lower priority than the CPU's driver), and cryptodev. Engines that
// are unavailable are listed too, so callers can say why. It is what the
// selector calibrates; All adds the frame engines.
func Discover(c Cipher, o Options) []Engine {
	out := []Engine{Software{}}
	def := NewAFALG("", o)
	out = append(out, def)
	d, err := def.Driver(c)
	if err != nil {
		// Every other binding would fail for the same reason.
		return append(out, NewCryptodev(o))
	}
	bound := d.Name
	if drivers, err := KernelDrivers(c); err == nil {
		for _, d := range drivers {
			if d.Name != bound {
				out = append(out, NewAFALG(d.Name, o))
			}
		}
	}
	return append(out, NewCryptodev(o))
}

// All is what "all" means wherever engines are listed or run (offload
// engines, speed -engine all, bench -policy all): Discover's engines,
// then every frame engine of the registry under its plain name (its
// :DRIVER variants bind the drivers Discover already lists). Callers that
// measure ciphers alone report WhyNoCipherFigures for the frame engines
// instead of a figure.
func All(c Cipher, o Options) []Engine {
	out := Discover(c, o)
	for _, f := range families {
		if f.Kind == KindFrame {
			out = append(out, f.open("", o))
		}
	}
	return out
}
