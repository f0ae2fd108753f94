package speed

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

// missingEngine can serve nothing.
type missingEngine struct{}

var errMissing = errors.New("not here")

func (missingEngine) Name() string { return "missing" }
func (missingEngine) Driver(engine.Cipher) (engine.Driver, error) {
	return engine.Driver{}, errMissing
}
func (missingEngine) NewCrypter(engine.Cipher, []byte) (engine.Crypter, error) {
	return nil, errMissing
}

func TestFrameCost(t *testing.T) {
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	var started int
	parts, err := FrameCost(context.Background(), FrameConfig{
		Cipher: c, Sizes: []int{64, 1024}, Duration: 20 * time.Millisecond,
		Engines: []engine.Engine{engine.Software{}, missingEngine{}},
		Start:   func(string, string, int) { started++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	// Per size: copy, two engines, three MACs.
	if want := 2 * (1 + 2 + len(suite.MACs)); len(parts) != want {
		t.Fatalf("%d parts, want %d: %+v", len(parts), want, parts)
	}
	if started != 2*(1+1+len(suite.MACs)) {
		t.Errorf("Start called %d times", started)
	}
	kinds := map[string]int{}
	for _, p := range parts {
		kinds[p.Kind]++
		if p.Name == "missing" {
			if p.Error == "" || p.Ops != 0 {
				t.Errorf("unavailable engine measured: %+v", p)
			}
			continue
		}
		if p.Error != "" || p.Ops == 0 || p.Elapsed <= 0 || p.NsPerFrame() <= 0 || p.BytesPerSecond() <= 0 {
			t.Errorf("part not measured: %+v", p)
		}
		if p.Syscalls != -1 || p.SyscallsPerFrame() != -1 {
			t.Errorf("%s %s: syscalls %d, want -1 (software does not count)", p.Kind, p.Name, p.Syscalls)
		}
		if p.Kind == PartCipher && p.Driver == "" {
			t.Errorf("cipher part without driver: %+v", p)
		}
	}
	if kinds[PartCopy] != 2 || kinds[PartCipher] != 4 || kinds[PartMAC] != 2*len(suite.MACs) {
		t.Errorf("kinds %v", kinds)
	}
	est, err := Estimates(parts, engine.Encrypt)
	if err != nil {
		t.Fatal(err)
	}
	if len(est) != 2*len(suite.MACs) {
		t.Fatalf("%d estimates, want %d (the missing engine has none)", len(est), 2*len(suite.MACs))
	}
	for _, e := range est {
		if e.Engine != engine.SoftwareName || e.Total() <= 0 || e.BytesPerSecond() <= 0 {
			t.Errorf("estimate %+v", e)
		}
		sum := e.Share(PartCipher) + e.Share(PartMAC) + e.Share(PartCopy)
		if math.Abs(sum-1) > 1e-9 {
			t.Errorf("shares add up to %v", sum)
		}
	}
}

func TestFrameCostRejects(t *testing.T) {
	ctx := context.Background()
	cbc := engine.Cipher{Mode: engine.CBC, KeyBits: 128}
	for _, sizes := range [][]int{{17}, {0}, {-16}, {2 << 20}} {
		if _, err := FrameCost(ctx, FrameConfig{Cipher: cbc, Sizes: sizes}); !errors.Is(err, engine.ErrBlockSize) {
			t.Errorf("sizes %v: %v, want ErrBlockSize", sizes, err)
		}
	}
	if _, err := FrameCost(ctx, FrameConfig{Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 100}}); !errors.Is(err, engine.ErrUnknownCipher) {
		t.Errorf("bad cipher: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := FrameCost(cancelled, FrameConfig{Cipher: cbc, Sizes: []int{64}, Duration: time.Second}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

func TestEstimates(t *testing.T) {
	ms := time.Millisecond
	parts := []Part{
		{Kind: PartCopy, Name: "memmove", Size: 100, Ops: 1000, Elapsed: 1 * ms},     // 1000 ns
		{Kind: PartCipher, Name: "dev", Size: 100, Ops: 1000, Elapsed: 2 * ms},       // 2000 ns
		{Kind: PartCipher, Name: "slow", Size: 100, Ops: 1000, Elapsed: 20 * ms},     // 20000 ns
		{Kind: PartMAC, Name: "hmac-sha256", Size: 100, Ops: 1000, Elapsed: 5 * ms},  // 5000 ns
		{Kind: PartMAC, Name: "poly1305", Size: 100, Ops: 1000, Elapsed: 500 * 1000}, // 500 ns
		{Kind: PartCipher, Name: "broken", Size: 100, Error: "boom"},
	}
	est, err := Estimates(parts, engine.Decrypt) // two copies: 2000 ns
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]struct {
		total float64
		neck  string
	}{
		{"dev", "hmac-sha256"}:  {9000, PartMAC},
		{"dev", "poly1305"}:     {4500, PartCipher}, // tie of cipher and copy: cipher
		{"slow", "hmac-sha256"}: {27000, PartCipher},
		{"slow", "poly1305"}:    {22500, PartCipher},
	}
	if len(est) != len(want) {
		t.Fatalf("%d estimates: %+v", len(est), est)
	}
	for _, e := range est {
		w, ok := want[[2]string{e.Engine, e.MAC}]
		if !ok || e.Total() != w.total || e.Bottleneck != w.neck {
			t.Errorf("%s+%s: total %v bottleneck %s, want %+v", e.Engine, e.MAC, e.Total(), e.Bottleneck, w)
		}
	}
	parts[0].Kind = "other"
	if _, err := Estimates(parts, engine.Encrypt); !errors.Is(err, ErrNoParts) {
		t.Errorf("no copy part: %v", err)
	}
	if _, err := Estimates(nil, engine.Encrypt); !errors.Is(err, ErrNoParts) {
		t.Errorf("nothing: %v", err)
	}
}

// fakeFrameEngine is a frame engine under afalg-aead's name whose sealer
// copies and appends a zero tag: enough to see FrameCost measure whole
// frames for a frame engine and no cipher part under its name.
type fakeFrameEngine struct{ engine.Software }

func (fakeFrameEngine) Name() string { return engine.AFALGAEADName }
func (fakeFrameEngine) NewFrameSealer(c engine.Cipher, _, _ []byte) (engine.FrameSealer, error) {
	return fakeSealer{c}, nil
}

type fakeSealer struct{ c engine.Cipher }

func (s fakeSealer) Seal(dst, _, pt, _ []byte) error {
	copy(dst, pt)
	clear(dst[len(pt) : len(pt)+engine.FrameTagSize])
	return nil
}
func (s fakeSealer) Open(dst, _, sealed, _ []byte) error {
	copy(dst, sealed[:len(sealed)-engine.FrameTagSize])
	return nil
}
func (s fakeSealer) Cipher() engine.Cipher { return s.c }
func (s fakeSealer) Driver() engine.Driver { return engine.Driver{Name: "fake-authenc"} }
func (s fakeSealer) Close() error          { return nil }

func TestFrameCostFrameEngine(t *testing.T) {
	c := engine.Cipher{Mode: engine.CTR, KeyBits: 128}
	for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
		parts, err := FrameCost(context.Background(), FrameConfig{
			Cipher: c, Direction: d, Sizes: []int{100, 1 << 17}, Duration: 5 * time.Millisecond,
			Engines: []engine.Engine{fakeFrameEngine{}}, MACs: []suite.MAC{suite.HMACSHA256},
		})
		if err != nil {
			t.Fatal(err)
		}
		var frames int
		for _, p := range parts {
			switch {
			case p.Kind == PartCipher && p.Name == engine.AFALGAEADName:
				if p.Ops != 0 || !strings.Contains(p.Error, "not measured") {
					t.Errorf("%v: a frame engine's cipher part: %+v", d, p)
				}
			case p.Kind == PartFrame && p.Size == 100:
				frames++
				if p.Error != "" || p.Ops == 0 || p.Driver != "fake-authenc" {
					t.Errorf("%v: frame part not measured: %+v", d, p)
				}
			case p.Kind == PartFrame:
				if p.Ops != 0 || p.Error == "" {
					t.Errorf("%v: a frame over MaxFrameRequest measured: %+v", d, p)
				}
			}
		}
		if frames != 1 {
			t.Fatalf("%v: %d frame parts at 100 bytes: %+v", d, frames, parts)
		}
		est, err := Estimates(parts, d)
		if err != nil || len(est) != 1 || est[0].Engine != engine.AFALGAEADName || est[0].MAC != "hmac-sha256" || est[0].Tag != 0 {
			t.Errorf("%v: estimates %+v, %v", d, est, err)
		}
	}
}
