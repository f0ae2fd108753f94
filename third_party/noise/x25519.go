// This file is offload's one change to flynn/noise (third_party/noise/README.md):
// X25519 on filippo.io/edwards25519/field instead of golang.org/x/crypto/curve25519,
// which wraps crypto/ecdh, whose FIPS self-test links the NIST P-256 code into
// every binary. The ladder is crypto/ecdh's x25519ScalarMult (Go 1.26,
// src/crypto/ecdh/x25519.go, BSD-3-Clause, Copyright 2022 The Go Authors), and
// the checks are those of curve25519.X25519: 32-byte inputs, and an error for
// a low-order point (an all-zero shared secret).

package noise

import (
	"crypto/subtle"
	"errors"
	"strconv"

	"filippo.io/edwards25519/field"
)

var basepoint = [32]byte{9}

var errLowOrder = errors.New("bad input point: low order point")

// x25519 returns scalar * point (RFC 7748, section 5).
func x25519(scalar, point []byte) ([]byte, error) {
	if len(scalar) != 32 {
		return nil, errors.New("bad scalar length: " + strconv.Itoa(len(scalar)) + ", expected 32")
	}
	if len(point) != 32 {
		return nil, errors.New("bad point length: " + strconv.Itoa(len(point)) + ", expected 32")
	}
	var e [32]byte
	copy(e[:], scalar)
	e[0] &= 248
	e[31] &= 127
	e[31] |= 64

	var x1, x2, z2, x3, z3, tmp0, tmp1 field.Element
	if _, err := x1.SetBytes(point); err != nil {
		return nil, err
	}
	x2.One()
	x3.Set(&x1)
	z3.One()

	swap := 0
	for pos := 254; pos >= 0; pos-- {
		b := e[pos/8] >> uint(pos&7)
		b &= 1
		swap ^= int(b)
		x2.Swap(&x3, swap)
		z2.Swap(&z3, swap)
		swap = int(b)

		tmp0.Subtract(&x3, &z3)
		tmp1.Subtract(&x2, &z2)
		x2.Add(&x2, &z2)
		z2.Add(&x3, &z3)
		z3.Multiply(&tmp0, &x2)
		z2.Multiply(&z2, &tmp1)
		tmp0.Square(&tmp1)
		tmp1.Square(&x2)
		x3.Add(&z3, &z2)
		z2.Subtract(&z3, &z2)
		x2.Multiply(&tmp1, &tmp0)
		tmp1.Subtract(&tmp1, &tmp0)
		z2.Square(&z2)

		z3.Mult32(&tmp1, 121666)
		x3.Square(&x3)
		tmp0.Add(&tmp0, &z3)
		z3.Multiply(&x1, &z2)
		z2.Multiply(&tmp1, &tmp0)
	}

	x2.Swap(&x3, swap)
	z2.Swap(&z3, swap)

	z2.Invert(&z2)
	x2.Multiply(&x2, &z2)
	out := x2.Bytes()
	var zero [32]byte
	if subtle.ConstantTimeCompare(out, zero[:]) == 1 {
		return nil, errLowOrder
	}
	return out, nil
}
