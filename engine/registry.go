package engine

import (
	"fmt"
	"strings"
)

// Specs are the engine names Open accepts, for help texts.
const Specs = "software, afalg, afalg:DRIVER, afalg-aead, afalg-aead:DRIVER, cryptodev, cryptodev:hw"

// Open returns the engine that spec names: "software", "afalg" (the
// kernel's highest-priority driver), "afalg:DRIVER" (a driver name or
// prefix, e.g. afalg:virtio_crypto), "afalg-aead[:DRIVER]" (whole frames,
// cipher and HMAC-SHA256 in one kernel request), "cryptodev" or
// "cryptodev:hw" (cryptodev only where the driver it binds is a device). It does
// not check availability: ask the engine's Driver for the cipher you need.
func Open(spec string, o Options) (Engine, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(spec), ":")
	switch {
	case name == SoftwareName && !hasArg:
		return Software{}, nil
	case name == AFALGName && (!hasArg || arg != ""):
		return NewAFALG(arg, o), nil
	case name == AFALGAEADName && (!hasArg || arg != ""):
		return NewAFALGAEAD(arg, o), nil
	case name == CryptodevName && !hasArg:
		return NewCryptodev(o), nil
	case name == CryptodevName && arg == "hw":
		return NewCryptodevHardware(o), nil
	}
	return nil, fmt.Errorf("%w %q (one of %s)", ErrUnknownEngine, spec, Specs)
}

// Discover lists the engines worth measuring for c: software, AF_ALG bound
// by algorithm name (what the kernel picks), AF_ALG bound to each other
// driver the kernel registers for c (a device often has a lower priority
// than the CPU's driver), and cryptodev. Engines that are unavailable are
// listed too, so callers can say why.
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
