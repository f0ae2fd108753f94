package selector

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
)

func openFake(spec string) (engine.Engine, error) {
	if spec == hwEngine.name {
		return hwEngine, nil
	}
	return engine.Open(spec, engine.Options{})
}

func TestPolicyAuto(t *testing.T) {
	pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake})
	if err != nil {
		t.Fatal(err)
	}
	if n := pol.Names(); len(n) != 2 || n[0] != "software" || n[1] != "afalg:dev" {
		t.Fatalf("engines %v", n)
	}
	if _, ok := pol.Engines()[0].(engine.Software); !ok {
		t.Fatalf("Engines()[0] = %T, want software", pol.Engines()[0])
	}
	for _, tc := range []struct {
		size int
		dir  engine.Direction
		want int
	}{
		{0, engine.Encrypt, 0}, {16, engine.Encrypt, 0}, {6128, engine.Encrypt, 0},
		{6129, engine.Encrypt, 1}, // rounded up to the block: 6144
		{6144, engine.Encrypt, 1}, {16384, engine.Encrypt, 1},
		{1 << 20, engine.Encrypt, 1}, // above max frame: the last band
		{-5, engine.Encrypt, 0},
		{8192, engine.Decrypt, 0}, {8192, engine.Direction(7), 0},
	} {
		if got := pol.Pick(tc.size, tc.dir); got != tc.want {
			t.Errorf("Pick(%d, %v) = %d, want %d", tc.size, tc.dir, got, tc.want)
		}
	}
	if a := testing.AllocsPerRun(1000, func() { pol.Pick(8192, engine.Encrypt) }); a != 0 {
		t.Errorf("Pick allocates %v times", a)
	}
}

func TestPolicyMissingTable(t *testing.T) {
	p := testProfile()
	p.Tables = p.Tables[:1]
	if _, err := NewPolicy(p, cbc256, PolicyOptions{Open: openFake}); err == nil {
		t.Fatal("policy without a decrypt table")
	}
}

// At 8192 B the device does 60 MB/s, software 20: the device gets 3/4 of
// the frames (48 of 64), exactly, however many workers ask at once.
func TestPolicyHybridSplit(t *testing.T) {
	pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := pol.Share(8192, engine.Encrypt); s != 0.75 {
		t.Fatalf("share at 8192 = %v, want 0.75", s)
	}
	// 12288 lies between points 8192 (60) and 16384 (80): log-linear 70 MB/s,
	// 70/90 of 64 = 49.8 -> 50.
	if s := pol.Share(12288, engine.Encrypt); s != 50.0/64 {
		t.Errorf("share at 12288 = %v, want 50/64", s)
	}
	if s := pol.Share(1024, engine.Encrypt); s != 1 {
		t.Errorf("share at 1024 (software band) = %v, want 1", s)
	}
	const workers, each = 8, 800 // 6400 frames: 100 rounds of 64
	var mu sync.Mutex
	counts := [2]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c [2]int
			for range each {
				c[pol.Pick(8192, engine.Encrypt)]++
			}
			mu.Lock()
			counts[0] += c[0]
			counts[1] += c[1]
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[1] != 4800 || counts[0] != 1600 {
		t.Errorf("device %d, software %d of 6400 frames; want 4800 and 1600", counts[1], counts[0])
	}
	// Below the crossover every frame is software's, hybrid or not.
	for range 100 {
		if pol.Pick(1024, engine.Encrypt) != 0 {
			t.Fatal("hybrid sent a small frame to the device")
		}
	}
	if a := testing.AllocsPerRun(1000, func() { pol.Pick(8192, engine.Encrypt) }); a != 0 {
		t.Errorf("hybrid Pick allocates %v times", a)
	}
}

func TestPolicyTakesOutFailingEngine(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	stats := new(record.Stats)
	stats.Fallbacks[1].Store(5) // earlier links: not this policy's business
	pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{
		Open: openFake, Stats: stats, FailThreshold: 3, Logger: zap.New(core),
	})
	if err != nil {
		t.Fatal(err)
	}
	stats.Fallbacks[1].Add(2)
	if got := pol.Pick(8192, engine.Encrypt); got != 1 || pol.Out(1) {
		t.Fatalf("after 2 of 3 failures Pick = %d (out %v), want 1", got, pol.Out(1))
	}
	stats.Fallbacks[1].Add(1)
	for range 1000 {
		if got := pol.Pick(8192, engine.Encrypt); got != 0 {
			t.Fatalf("after 3 failures Pick = %d, want software", got)
		}
	}
	if !pol.Out(1) {
		t.Error("Out(1) = false")
	}
	if n := logs.FilterMessageSnippet("keeps failing").Len(); n != 1 {
		t.Errorf("%d warnings, want one", n)
	}
	e := logs.All()[0].ContextMap()
	if e["engine"] != "afalg:dev" || e["fallbacks"] != uint64(3) {
		t.Errorf("warning fields %v", e)
	}
}

func BenchmarkPick(b *testing.B) {
	for _, hybrid := range []bool{false, true} {
		pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake, Hybrid: hybrid, Stats: new(record.Stats)})
		if err != nil {
			b.Fatal(err)
		}
		name := "auto"
		if hybrid {
			name = "hybrid"
		}
		for _, size := range []int{16, 1400, 8192, 16384} {
			b.Run(fmt.Sprintf("%s/%d", name, size), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					pol.Pick(size, engine.Encrypt)
				}
			})
		}
	}
}
