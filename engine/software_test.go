package engine_test

import (
	"fmt"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/engine/enginetest"
)

func TestSoftwareConformance(t *testing.T) {
	enginetest.Run(t, engine.Software{}, enginetest.Options{})
}

func TestSoftwareNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count is checked in the full run")
	}
	for _, c := range engine.MeasureCiphers {
		cr, err := engine.Software{}.NewCrypter(c, make([]byte, c.KeySize()))
		if err != nil {
			t.Fatal(err)
		}
		buf, iv := make([]byte, 16), make([]byte, 16)
		if n := testing.AllocsPerRun(100, func() { _ = cr.Encrypt(buf, buf, iv) }); n != 0 {
			t.Errorf("%v: %v allocations per 16-byte call", c, n)
		}
	}
}

func BenchmarkSoftware(b *testing.B) {
	for _, c := range []engine.Cipher{{Mode: engine.CBC, KeyBits: 256}, {Mode: engine.CTR, KeyBits: 256}} {
		cr, err := engine.Software{}.NewCrypter(c, make([]byte, 32))
		if err != nil {
			b.Fatal(err)
		}
		for _, size := range []int{16, 64, 256, 1024, 1472, 8192, 16384} {
			buf, iv := make([]byte, size), make([]byte, 16)
			b.Run(fmt.Sprintf("%v/%d", c, size), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					if err := cr.Encrypt(buf, buf, iv); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
