package engine_test

import (
	"errors"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

func TestSelfTest(t *testing.T) {
	for _, c := range engine.MeasureCiphers {
		if err := engine.SelfTest(engine.Software{}, c); err != nil {
			t.Errorf("software %v: %v", c, err)
		}
		// Wrong on every answer, only on decrypt, only on in-place runs.
		for name, bad := range map[string]func(uint64) bool{
			"always":   nil,
			"decrypt":  func(n uint64) bool { return n == 2 },
			"in place": func(n uint64) bool { return n == 3 },
		} {
			err := engine.SelfTest(&enginetest.Faulty{Bad: bad}, c)
			if !errors.Is(err, engine.ErrSelfTest) {
				t.Errorf("faulty (%s) %v: %v, want ErrSelfTest", name, c, err)
			}
		}
	}
	if err := engine.SelfTest(engine.Software{}, engine.Cipher{Mode: engine.CTR, KeyBits: 100}); !errors.Is(err, engine.ErrUnknownCipher) {
		t.Errorf("invalid cipher: %v", err)
	}
}

// The known answers are the published ones: checked against crypto/aes
// block by block in enginetest (TestReference), and spot-checked here.
func TestKnownAnswers(t *testing.T) {
	v := engine.KnownAnswers()
	if len(v) != len(engine.MeasureCiphers) || v[0].Name != "F.2.1/2 CBC-AES128" || v[5].Name != "F.5.5/6 CTR-AES256" ||
		v[6].Name != "F.1.1/2 ECB-AES128" || v[8].Name != "F.1.5/6 ECB-AES256" {
		t.Fatalf("known answers: %d, first %q, last %q", len(v), v[0].Name, v[len(v)-1].Name)
	}
	if v[0].Ciphertext[0] != 0x76 || v[5].Ciphertext[63] != 0xa6 || v[6].Ciphertext[0] != 0x3a || v[8].Ciphertext[63] != 0xc7 {
		t.Fatal("ciphertexts are not SP 800-38A's")
	}
}

// SelfTestFrame checks what a FrameEngine does with whole frames, which
// SelfTest (its Crypters) does not reach: a sealer that tags the wrong
// ciphertext, or opens a forged frame, fails it.
func TestSelfTestFrame(t *testing.T) {
	for _, c := range engine.MeasureCiphers {
		if c.Mode == engine.ECB {
			continue // no suite seals ECB frames
		}
		good := &enginetest.FaultyFrames{Bad: func(uint64) bool { return false }}
		if err := engine.SelfTestFrame(good, c); err != nil {
			t.Errorf("right frames %v: %v", c, err)
		}
		for name, fe := range map[string]*enginetest.FaultyFrames{
			"wrong ciphertext, valid tag": {},
			"wrong in place only":         {Bad: func(n uint64) bool { return n == 2 }},
			"accepts forged tags":         {Bad: func(uint64) bool { return false }, AcceptForged: true},
		} {
			if err := engine.SelfTest(fe, c); err != nil {
				t.Fatalf("%s %v: its Crypters are right, SelfTest says %v", name, c, err)
			}
			if err := engine.SelfTestFrame(fe, c); !errors.Is(err, engine.ErrSelfTest) {
				t.Errorf("%s %v: SelfTestFrame = %v, want ErrSelfTest", name, c, err)
			}
		}
	}
}
