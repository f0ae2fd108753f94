package speed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
)

func TestRunSoftware(t *testing.T) {
	c := engine.Cipher{Mode: engine.CBC, KeyBits: 256}
	var started, done []int
	var ready []engine.Driver
	res, drv, err := Run(context.Background(), engine.Software{}, Config{
		Cipher: c, Sizes: []int{16, 1024}, Duration: 30 * time.Millisecond, Multi: 2,
		Ready: func(d engine.Driver) { ready = append(ready, d) },
		Start: func(s int) {
			if len(ready) != 1 {
				t.Errorf("size %d started with %d Ready calls before it, want 1", s, len(ready))
			}
			started = append(started, s)
		},
		Done: func(r Result) { done = append(done, r.Size) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Size != 16 || res[1].Size != 1024 {
		t.Fatalf("results %+v", res)
	}
	for _, r := range res {
		if r.Ops <= 0 || r.Elapsed < 30*time.Millisecond || r.BytesPerSecond() <= 0 {
			t.Errorf("implausible result %+v", r)
		}
	}
	if len(started) != 2 || len(done) != 2 {
		t.Errorf("callbacks: start %v done %v", started, done)
	}
	if drv.Name == "" || drv.Hardware {
		t.Errorf("driver %+v", drv)
	}
	if len(ready) != 1 || ready[0] != drv {
		t.Errorf("Ready got %+v, want the run's driver %+v once", ready, drv)
	}
}

// ECB (measuring only) takes whole blocks like CBC.
func TestRunRejectsPartialECBBlocks(t *testing.T) {
	_, _, err := Run(context.Background(), engine.Software{}, Config{
		Cipher: engine.Cipher{Mode: engine.ECB, KeyBits: 256}, Sizes: []int{1472, 100}, Duration: time.Millisecond,
	})
	if !errors.Is(err, engine.ErrBlockSize) {
		t.Fatalf("err = %v, want ErrBlockSize", err)
	}
}

func TestRunRejectsPartialCBCBlocks(t *testing.T) {
	_, _, err := Run(context.Background(), engine.Software{}, Config{
		Cipher: engine.Cipher{Mode: engine.CBC, KeyBits: 128}, Sizes: []int{100}, Duration: time.Millisecond,
	})
	if !errors.Is(err, engine.ErrBlockSize) {
		t.Fatalf("err = %v, want ErrBlockSize", err)
	}
}

// failing is an engine whose Crypters fail after a few calls.
type failing struct{ engine.Software }

func (failing) Name() string { return "failing" }
func (f failing) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := f.Software.NewCrypter(c, key)
	return &failCrypter{Crypter: cr}, err
}

type failCrypter struct {
	engine.Crypter
	n int
}

var errBroken = errors.New("device fell over")

func (f *failCrypter) Encrypt(dst, src, iv []byte) error {
	if f.n++; f.n > 100 {
		return errBroken
	}
	return f.Crypter.Encrypt(dst, src, iv)
}

func TestRunReportsEngineError(t *testing.T) {
	res, _, err := Run(context.Background(), failing{}, Config{
		Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 128}, Sizes: []int{64}, Duration: time.Second,
	})
	if !errors.Is(err, errBroken) || len(res) != 0 {
		t.Fatalf("res %v err %v, want errBroken and no result", res, err)
	}
}

func TestRunCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, _, err := Run(ctx, engine.Software{}, Config{Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 128}})
	if !errors.Is(err, context.Canceled) || len(res) != 0 {
		t.Fatalf("res %v err %v", res, err)
	}
}

func curve(name string, bps ...float64) Curve {
	c := Curve{Engine: name}
	for i, b := range bps {
		size := 16 << (2 * i)
		c.Results = append(c.Results, Result{Size: size, Ops: int64(b), Elapsed: time.Duration(size) * time.Second})
	}
	return c
}

func TestWinners(t *testing.T) {
	for _, tc := range []struct {
		name   string
		curves []Curve
		want   []Band
	}{
		{"none", nil, nil},
		{"single", []Curve{curve("sw", 1, 2, 3)}, []Band{{16, 256, "sw"}}},
		{"no crossing", []Curve{curve("sw", 5, 6, 7), curve("hw", 1, 2, 3)}, []Band{{16, 256, "sw"}}},
		{"one crossing", []Curve{curve("sw", 5, 6, 7), curve("hw", 1, 7, 30)}, []Band{{16, 16, "sw"}, {64, 256, "hw"}}},
		{"two crossings", []Curve{curve("sw", 5, 6, 7), curve("hw", 1, 7, 3)}, []Band{{16, 16, "sw"}, {64, 64, "hw"}, {256, 256, "sw"}}},
		{"failed engine ignored", []Curve{curve("sw", 5, 6), {Engine: "dead"}}, []Band{{16, 64, "sw"}}},
	} {
		got := Winners(tc.curves)
		if len(got) != len(tc.want) {
			t.Errorf("%s: got %+v want %+v", tc.name, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: band %d = %+v want %+v", tc.name, i, got[i], tc.want[i])
			}
		}
	}
}
