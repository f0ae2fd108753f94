//go:build linux

package engine

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestPickSHA256(t *testing.T) {
	algs, err := ParseProcCrypto(strings.NewReader(`name         : sha256
driver       : sha256-generic
module       : kernel
priority     : 100
selftest     : passed
type         : shash

name         : sha256
driver       : sha256-avx2
module       : sha256_ssse3
priority     : 170
selftest     : passed
type         : shash

name         : sha256
driver       : sha256-broken
module       : x
priority     : 900
selftest     : unknown
type         : shash

name         : hmac(sha256)
driver       : hmac(sha256-generic)
module       : kernel
priority     : 100
selftest     : passed
type         : shash
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := pickSHA256(algs); got != "sha256-avx2" {
		t.Errorf("pickSHA256 = %q, want sha256-avx2", got)
	}
	if got := pickSHA256(nil); got != "sha256-generic" {
		t.Errorf("pickSHA256(nil) = %q", got)
	}
}

// TestAuthencKey checks the key blob against include/crypto/authenc.h:
// rtattr {len 8, type 1} in host order, be32 enckeylen, authkey, enckey.
func TestAuthencKey(t *testing.T) {
	enc := []byte("0123456789abcdef")
	mac := []byte("MMMMMMMMMMMMMMMMMMMMMMMMMMMMMMMM")
	k := authencKey(enc, mac)
	if len(k) != 8+32+16 {
		t.Fatalf("%d bytes", len(k))
	}
	if binary.NativeEndian.Uint16(k[0:]) != 8 || binary.NativeEndian.Uint16(k[2:]) != 1 || binary.BigEndian.Uint32(k[4:]) != 16 {
		t.Errorf("header % x", k[:8])
	}
	if string(k[8:40]) != string(mac) || string(k[40:]) != string(enc) {
		t.Error("keys not in authkey, enckey order")
	}
}

func TestAEADControlFits(t *testing.T) {
	if aeadCtrlSize > aeadCtrlWords*8 {
		t.Fatalf("control messages need %d bytes, buffer has %d", aeadCtrlSize, aeadCtrlWords*8)
	}
}
