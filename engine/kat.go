package engine

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Known-answer tests: the NIST SP 800-38A examples (appendix F.1 for ECB,
// F.2 for CBC, F.5 for CTR), one per cipher. SelfTest runs the one for a cipher on an
// engine; the tunnel runs it at start and periodically, so a device that
// computes wrong answers is found and taken out rather than trusted
// (docs/defences.md, "Engine checks"). engine/enginetest tests every engine
// against the same vectors.

// ErrSelfTest means an engine gave a wrong answer to a known-answer test:
// it must not be used for the cipher. It is not an ErrUnavailable: the
// engine works, but not correctly.
var ErrSelfTest = errors.New("engine failed its known-answer test")

// KnownAnswer is one SP 800-38A example: the encrypt and decrypt examples
// of a mode and key size share key, IV and texts.
type KnownAnswer struct {
	Name              string // e.g. "F.2.5/6 CBC-AES256"
	Cipher            Cipher
	Key, IV           []byte
	Plain, Ciphertext []byte
}

// NIST SP 800-38A, appendix F.
const (
	katPlain = `6bc1bee22e409f96e93d7e117393172a ae2d8a571e03ac9c9eb76fac45af8e51
		30c81c46a35ce411e5fbc1191a0a52ef f69f2445df4f9b17ad2b417be66c3710`
	katCBCIV = "000102030405060708090a0b0c0d0e0f"
	katCTRIV = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff"
	katECBIV = "00000000000000000000000000000000"
)

var katKeys = map[int]string{
	128: "2b7e151628aed2a6abf7158809cf4f3c",
	192: "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
	256: "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
}

var katCiphertexts = map[Cipher]string{
	{Mode: CBC, KeyBits: 128}: `7649abac8119b246cee98e9b12e9197d 5086cb9b507219ee95db113a917678b2
		73bed6b8e3c1743b7116e69e22229516 3ff1caa1681fac09120eca307586e1a7`,
	{Mode: CBC, KeyBits: 192}: `4f021db243bc633d7178183a9fa071e8 b4d9ada9ad7dedf4e5e738763f69145a
		571b242012fb7ae07fa9baac3df102e0 08b0e27988598881d920a9e64f5615cd`,
	{Mode: CBC, KeyBits: 256}: `f58c4c04d6e5f1ba779eabfb5f7bfbd6 9cfc4e967edb808d679f777bc6702c7d
		39f23369a9d9bacfa530e26304231461 b2eb05e2c39be9fcda6c19078c6a9d1b`,
	{Mode: CTR, KeyBits: 128}: `874d6191b620e3261bef6864990db6ce 9806f66b7970fdff8617187bb9fffdff
		5ae4df3edbd5d35e5b4f09020db03eab 1e031dda2fbe03d1792170a0f3009cee`,
	{Mode: CTR, KeyBits: 192}: `1abc932417521ca24f2b0459fe7e6e0b 090339ec0aa6faefd5ccc2c6f4ce8e94
		1e36b26bd1ebc670d1bd1d665620abf7 4f78a7f6d29809585a97daec58c6b050`,
	{Mode: CTR, KeyBits: 256}: `601ec313775789a5b7a7f504bbf3d228 f443e3ca4d62b59aca84e990cacaf5c5
		2b0930daa23de94ce87017ba2d84988d dfc9c58db67aada613c2dd08457941a6`,
	{Mode: ECB, KeyBits: 128}: `3ad77bb40d7a3660a89ecaf32466ef97 f5d3d58503b9699de785895a96fdbaaf
		43b1cd7f598ece23881b00e3ed030688 7b0c785e27e8ad3f8223207104725dd4`,
	{Mode: ECB, KeyBits: 192}: `bd334f1d6e45f25ff712a214571fa5cc 974104846d0ad3ad7734ecb3ecee4eef
		ef7afd2270e2e60adce0ba2face6444e 9a4b41ba738d6c72fb16691603c18e0e`,
	{Mode: ECB, KeyBits: 256}: `f3eed1bdb5d2a03c064b5a7e3db181f8 591ccb10d410ed26dc5ba74a31362870
		b6ed21b99ca6f4f9f153e7b1beafed1d 23304b7a39f9f3ff067d8d8f9e24ecc7`,
}

// KnownAnswers returns the SP 800-38A examples F.2.1–F.2.6, F.5.1–F.5.6
// and F.1.1–F.1.6, one per cipher of MeasureCiphers, in that order. The
// slices are new on every call.
func KnownAnswers() []KnownAnswer {
	out := make([]KnownAnswer, 0, len(MeasureCiphers))
	for _, c := range MeasureCiphers {
		out = append(out, knownAnswer(c))
	}
	return out
}

func knownAnswer(c Cipher) KnownAnswer {
	sec, iv := "F.2", katCBCIV
	switch c.Mode {
	case CTR:
		sec, iv = "F.5", katCTRIV
	case ECB:
		// ECB has no IV; Crypters take 16 bytes in every mode and ECB
		// ignores them.
		sec, iv = "F.1", katECBIV
	}
	idx := map[int]int{128: 1, 192: 3, 256: 5}[c.KeyBits]
	return KnownAnswer{
		Name:   fmt.Sprintf("%s.%d/%d %s-AES%d", sec, idx, idx+1, strings.ToUpper(c.Mode.String()), c.KeyBits),
		Cipher: c, Key: unhex(katKeys[c.KeyBits]), IV: unhex(iv),
		Plain: unhex(katPlain), Ciphertext: unhex(katCiphertexts[c]),
	}
}

func unhex(s string) []byte {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		panic(err) // the constants above are valid hex
	}
	return b
}

// SelfTest runs c's known answer on e: encrypt and decrypt, out of place
// and in place. A wrong answer wraps ErrSelfTest; an engine that can't run
// it returns the engine's error.
func SelfTest(e Engine, c Cipher) error {
	if !c.Measurable() {
		return fmt.Errorf("%w: %v", ErrUnknownCipher, c)
	}
	v := knownAnswer(c)
	cr, err := e.NewCrypter(c, v.Key)
	if err != nil {
		return fmt.Errorf("%s %v self-test: %w", e.Name(), c, err)
	}
	defer cr.Close()
	buf := make([]byte, len(v.Plain))
	for _, step := range []struct {
		dir      Direction
		in, want []byte
		inPlace  bool
	}{
		{Encrypt, v.Plain, v.Ciphertext, false},
		{Decrypt, v.Ciphertext, v.Plain, false},
		{Encrypt, v.Plain, v.Ciphertext, true},
		{Decrypt, v.Ciphertext, v.Plain, true},
	} {
		src := step.in
		if step.inPlace {
			copy(buf, step.in)
			src = buf
		}
		if err := Crypt(cr, step.dir, buf, src, v.IV); err != nil {
			return fmt.Errorf("%s %v self-test (%s %v): %w", e.Name(), c, v.Name, step.dir, err)
		}
		if !bytes.Equal(buf, step.want) {
			return fmt.Errorf("%w: %s %v, %s %v: got %x, want %x", ErrSelfTest, e.Name(), c, v.Name, step.dir, buf, step.want)
		}
	}
	return nil
}

// Whole-frame known answers (SelfTestFrame): the SP 800-38A example of the
// cipher sealed as one frame with the HMAC-SHA256 key 00 01 .. 1f and the
// associated data of the record layer's frame 1 of 64 bytes (seq 1, len
// 64). The ciphertext is the example's; the tags are HMAC-SHA256 over aad
// | ciphertext truncated to FrameTagSize, computed with Python's hmac.
var (
	katFrameMACKey = unhex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	katFrameAAD    = unhex("0000000000000001 00000040")
	katFrameTags   = map[Cipher]string{
		{Mode: CBC, KeyBits: 128}: "2b27c8f1afbb3ba72602ba6f401cf8cd",
		{Mode: CBC, KeyBits: 192}: "f380967cc1476e71ac0472f7602e9ee1",
		{Mode: CBC, KeyBits: 256}: "57dcea48ed1771fc2064ab2e4183084a",
		{Mode: CTR, KeyBits: 128}: "8b5de189fe8c81795b4bed339821cec7",
		{Mode: CTR, KeyBits: 192}: "fbc74845426750ff375c1d456db32375",
		{Mode: CTR, KeyBits: 256}: "0290ceb4c2648590d3d3157922cf832a",
	}
)

// SelfTestFrame runs c's whole-frame known answer on a FrameEngine's
// sealer, which SelfTest (the engine's Crypters) does not reach; the
// kernel's authenc may use another cipher driver than its skcipher. It
// seals (out of place and in place) and checks ciphertext and tag, opens
// the sealed frame, and checks that a frame with a flipped tag bit or
// ciphertext bit is refused with ErrAuth: an engine that accepts forged
// frames is as wrong as one that computes wrong ones. A wrong answer wraps
// ErrSelfTest; an engine that can't run it returns the engine's error.
func SelfTestFrame(fe FrameEngine, c Cipher) error {
	tagHex, ok := katFrameTags[c]
	if !ok {
		return fmt.Errorf("%w: %v has no whole-frame known answer", ErrUnknownCipher, c)
	}
	v := knownAnswer(c)
	s, err := fe.NewFrameSealer(c, v.Key, katFrameMACKey)
	if err != nil {
		return fmt.Errorf("%s %v frame self-test: %w", fe.Name(), c, err)
	}
	defer s.Close()
	n := len(v.Plain)
	want := append(append([]byte(nil), v.Ciphertext...), unhex(tagHex)...)
	fail := func(step string, got, want []byte) error {
		return fmt.Errorf("%w: %s %v, whole frame %s %s: got %x, want %x", ErrSelfTest, fe.Name(), c, v.Name, step, got, want)
	}
	buf := make([]byte, n+FrameTagSize)
	// Seal, out of place and in place.
	if err := s.Seal(buf, katFrameAAD, v.Plain, v.IV); err != nil {
		return fmt.Errorf("%s %v frame self-test (seal): %w", fe.Name(), c, err)
	}
	if !bytes.Equal(buf, want) {
		return fail("seal", buf, want)
	}
	copy(buf, v.Plain)
	if err := s.Seal(buf, katFrameAAD, buf[:n], v.IV); err != nil {
		return fmt.Errorf("%s %v frame self-test (seal in place): %w", fe.Name(), c, err)
	}
	if !bytes.Equal(buf, want) {
		return fail("seal in place", buf, want)
	}
	// Open, out of place and in place.
	out := make([]byte, n+FrameTagSize)
	if err := s.Open(out, katFrameAAD, want, v.IV); err != nil {
		return fmt.Errorf("%w: %s %v, whole frame %s open: %w", ErrSelfTest, fe.Name(), c, v.Name, err)
	}
	if !bytes.Equal(out[:n], v.Plain) {
		return fail("open", out[:n], v.Plain)
	}
	copy(buf, want)
	if err := s.Open(buf, katFrameAAD, buf, v.IV); err != nil {
		return fmt.Errorf("%w: %s %v, whole frame %s open in place: %w", ErrSelfTest, fe.Name(), c, v.Name, err)
	}
	if !bytes.Equal(buf[:n], v.Plain) {
		return fail("open in place", buf[:n], v.Plain)
	}
	// Forgeries: a flipped bit of the tag, of the ciphertext, of the
	// associated data.
	for _, forge := range []struct {
		what string
		at   int // in aad | sealed
	}{{"tag", len(katFrameAAD) + n + FrameTagSize - 1}, {"ciphertext", len(katFrameAAD) + n/2}, {"associated data", len(katFrameAAD) - 1}} {
		frame := append(append([]byte(nil), katFrameAAD...), want...)
		frame[forge.at] ^= 0x01
		aad, sealed := frame[:len(katFrameAAD)], frame[len(katFrameAAD):]
		err := s.Open(out, aad, sealed, v.IV)
		if !errors.Is(err, ErrAuth) {
			return fmt.Errorf("%w: %s %v, whole frame %s: a frame with a flipped %s bit was not refused as forged (%v)", ErrSelfTest, fe.Name(), c, v.Name, forge.what, err)
		}
	}
	return nil
}
