package engine_test

import (
	"bytes"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

// FuzzEngines checks every engine available here against the independent
// reference on arbitrary keys, IVs and data, in both directions. Outside a
// kernel with AF_ALG only the software engine takes part; inside the VM the
// seed corpus runs against the kernel's drivers too.
func FuzzEngines(f *testing.F) {
	for _, v := range enginetest.NISTVectors() {
		f.Add(uint8(v.Cipher.Mode), uint16(v.Cipher.KeyBits), v.Key, v.IV, v.Plain)
	}
	for _, iv := range enginetest.CarryIVs {
		f.Add(uint8(engine.CTR), uint16(256), make([]byte, 32), iv, make([]byte, 100))
	}
	f.Add(uint8(engine.CTR), uint16(128), make([]byte, 16), make([]byte, 16), []byte{1})
	f.Add(uint8(engine.CBC), uint16(192), make([]byte, 24), make([]byte, 16), []byte{})

	engines := []engine.Engine{engine.Software{}, engine.NewAFALG("", engine.Options{})}
	f.Fuzz(func(t *testing.T, mode uint8, bits uint16, key, iv, data []byte) {
		c := engine.Cipher{Mode: engine.Mode(mode%2 + 1), KeyBits: []int{128, 192, 256}[int(bits)%3]}
		if len(key) < c.KeySize() || len(iv) < engine.BlockSize {
			return
		}
		key, iv = key[:c.KeySize()], iv[:engine.BlockSize]
		if c.Mode == engine.CBC {
			data = data[:len(data)&^(engine.BlockSize-1)]
		}
		for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
			want := enginetest.Reference(c, d, key, iv, data)
			for _, e := range engines {
				if _, err := e.Driver(c); err != nil {
					continue
				}
				cr, err := e.NewCrypter(c, key)
				if err != nil {
					t.Fatalf("%s: %v", e.Name(), err)
				}
				got := make([]byte, len(data))
				err = engine.Crypt(cr, d, got, data, iv)
				cr.Close()
				if err != nil {
					t.Fatalf("%s %v %v %d bytes: %v", e.Name(), c, d, len(data), err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s %v %v %d bytes: differs from reference", e.Name(), c, d, len(data))
				}
			}
		}
	})
}
