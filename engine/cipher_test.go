package engine_test

import (
	"errors"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// ECB parses only where measuring asks for it: ParseCipher (the tunnel's
// door, used by config, profiles and calibration) refuses it.
func TestParseCipherECB(t *testing.T) {
	ecb := engine.Cipher{Mode: engine.ECB, KeyBits: 256}
	if c, err := engine.ParseMeasureCipher(" AES-256-ECB "); err != nil || c != ecb {
		t.Errorf("ParseMeasureCipher(aes-256-ecb) = %v, %v", c, err)
	}
	if c, err := engine.ParseCipher("aes-256-ecb"); !errors.Is(err, engine.ErrUnknownCipher) || c != (engine.Cipher{}) {
		t.Errorf("ParseCipher(aes-256-ecb) = %v, %v; want ErrUnknownCipher", c, err)
	}
	for _, c := range engine.MeasureCiphers {
		got, err := engine.ParseMeasureCipher(c.String())
		if err != nil || got != c || !c.Measurable() {
			t.Errorf("%v: ParseMeasureCipher = %v, %v; Measurable %v", c, got, err, c.Measurable())
		}
		if c.Valid() != (c.Mode != engine.ECB) {
			t.Errorf("%v: Valid() = %v", c, c.Valid())
		}
		if c.Blocks() != (c.Mode != engine.CTR) {
			t.Errorf("%v: Blocks() = %v", c, c.Blocks())
		}
	}
	if c, err := engine.ParseCipher("aes256"); err != nil || c != (engine.Cipher{Mode: engine.CBC, KeyBits: 256}) {
		t.Errorf("ParseCipher(aes256) = %v, %v", c, err)
	}
	if (engine.Cipher{Mode: engine.ECB, KeyBits: 64}).Measurable() {
		t.Error("aes-64-ecb Measurable")
	}
}
