package selector

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// At 8192 B the device does 60 MB/s, software 20: a frame is done sooner
// on the CPU once 3 frames wait at the device (4 turns of 8192/60e6 s
// against one of 8192/20e6). At 16384 B (80 against 20) from 4 on; at
// 12288 B (log-linear: 70 against 20) from 3. Below the crossover, and in
// auto, the device's queue does not matter.
func TestPolicyHybridQueue(t *testing.T) {
	pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size, queue int
	}{{8192, 3}, {12288, 3}, {16384, 4}, {1 << 20, 4}, {1024, 0}} {
		cpu, q := pol.Threshold(tc.size, engine.Encrypt)
		if q != tc.queue || cpu != 0 {
			t.Errorf("Threshold(%d) = engine %d from %d queued, want software from %d", tc.size, cpu, q, tc.queue)
		}
	}
	if _, q := pol.Threshold(8192, engine.Decrypt); q != 0 {
		t.Errorf("decrypt at 8192 is software's band, yet a queue threshold %d", q)
	}
	var now time.Duration
	pol.clock = func() time.Duration { return now }
	const enc = engine.Encrypt
	// feed gives the device n frames of 8192 B, one at a time: at the
	// profile's 60 MB/s each is 136.5 µs of device work.
	feed := func(n int) {
		for range n {
			pol.Begin(1, 8192, enc)
			pol.End(1, 8192, enc)
		}
	}
	hold := func(k int) {
		for range k {
			pol.Begin(1, 8192, enc)
		}
	}
	release := func(k int) {
		for range k {
			pol.End(1, 8192, enc)
		}
	}
	// A loaded device: 350 frames in 50 ms (96% of it). Holding k frames,
	// it gets the next one while k < 3.
	feed(350)
	now += busyWindow
	for k := range 6 {
		want := 1
		if k >= 3 {
			want = 0
		}
		if got := pol.Pick(8192, enc); got != want {
			t.Errorf("loaded device holding %d frames: Pick(8192) = %d, want %d", k, got, want)
		}
		if got := pol.Pick(1024, enc); got != 0 {
			t.Errorf("loaded device holding %d frames: Pick(1024) = %d, want software", k, got)
		}
		hold(1)
	}
	release(6)
	if got := pol.Pick(8192, enc); got != 1 {
		t.Errorf("loaded device holding nothing: Pick(8192) = %d, want 1", got)
	}
	// window gives the device frames, one at a time, over the next
	// window, then queues three and asks for a fourth.
	window := func(frames, want int, what string) {
		t.Helper()
		feed(frames)
		now += busyWindow
		hold(3)
		if got := pol.Pick(8192, enc); got != want {
			t.Errorf("%s, 3 frames queued: Pick(8192) = %d, want %d", what, got, want)
		}
		release(3)
	}
	// 120 frames (33%) in bursts that queue: the device is not what
	// limits the link, it keeps its frames ...
	window(120, 1, "device loaded 33%")
	// ... until a window is loaded again.
	window(340, 0, "device loaded 93%")
	if n := pol.HandedToCPU(); n != 4 { // 3 in the first window, 1 now
		t.Errorf("HandedToCPU = %d, want 4", n)
	}
	window(0, 1, "a window without device work")
	auto, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		auto.Begin(1, 8192, engine.Encrypt)
	}
	if got := auto.Pick(8192, engine.Encrypt); got != 1 {
		t.Errorf("auto with a queued device: Pick(8192) = %d, want the device", got)
	}
	if _, q := auto.Threshold(8192, engine.Encrypt); q != 0 {
		t.Errorf("auto has a queue threshold %d", q)
	}
	if a := testing.AllocsPerRun(1000, func() {
		pol.Begin(1, 8192, engine.Encrypt)
		pol.Pick(8192, engine.Encrypt)
		pol.End(1, 8192, engine.Encrypt)
	}); a != 0 {
		t.Errorf("hybrid Pick allocates %v times", a)
	}
}

// Workers that each hold a frame at the engine they got while they ask
// again: with 8 of them and a threshold of 3 on a busy device, both
// engines get frames and the count ends at zero.
func TestPolicyHybridConcurrent(t *testing.T) {
	pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	// Each frame the device returns moves the clock 100 µs, less than
	// its 136.5 µs of device work: a loaded device.
	var tick atomic.Int64
	pol.clock = func() time.Duration { return time.Duration(tick.Load()) }
	const workers, each = 8, 2000
	var mu sync.Mutex
	counts := [2]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c [2]int
			for range each {
				idx := pol.Pick(8192, engine.Encrypt)
				c[idx]++
				pol.Begin(idx, 8192, engine.Encrypt)
				runtime.Gosched() // the frame takes a while at its engine
				pol.End(idx, 8192, engine.Encrypt)
				if idx == 1 {
					tick.Add(int64(100 * time.Microsecond))
				}
			}
			mu.Lock()
			counts[0] += c[0]
			counts[1] += c[1]
			mu.Unlock()
		}()
	}
	wg.Wait()
	if counts[0] == 0 || counts[1] == 0 {
		t.Errorf("device %d, software %d frames: want both used", counts[1], counts[0])
	}
	if n := pol.queues[1].n.Load(); n != 0 {
		t.Errorf("%d frames left at the device", n)
	}
}

// A profile whose device band has a CPU engine faster than software there
// (the kernel's own AES through AF_ALG) overflows to that engine; a band
// won by a CPU engine never overflows.
func TestPolicyHybridOverflowsToBestCPU(t *testing.T) {
	p := testProfile()
	cpuEng := fake{name: "afalg:cpu", driver: "cbc-aes-generic"}
	for i := range p.Tables {
		tb := &p.Tables[i]
		d, _ := cpuEng.Driver(cbc256)
		tb.Engines = append(tb.Engines, EngineInfo{Name: cpuEng.name, Driver: &d})
		for j := range tb.Points {
			tb.Points[j].BPS[cpuEng.name] = 25e6
		}
	}
	// Decrypt: the CPU engine wins everything above 4 KiB.
	p.Tables[1].Bands = []Band{{1, 4095, "software"}, {4096, 16384, cpuEng.name}}
	open := func(spec string) (engine.Engine, error) {
		if spec == cpuEng.name {
			return cpuEng, nil
		}
		return openFake(spec)
	}
	pol, err := NewPolicy(p, cbc256, PolicyOptions{Open: open, Hybrid: true})
	if err != nil {
		t.Fatal(err)
	}
	cpu, q := pol.Threshold(8192, engine.Encrypt)
	if pol.Names()[cpu] != cpuEng.name || q != 2 { // 60/25 = 2.4
		t.Errorf("Threshold(8192, encrypt) = %s from %d queued, want %s from 2", pol.Names()[cpu], q, cpuEng.name)
	}
	if _, q := pol.Threshold(8192, engine.Decrypt); q != 0 {
		t.Errorf("a CPU engine's band overflows (from %d queued)", q)
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

// An engine found to give wrong answers is out at once, whatever its
// fallback count; in hybrid mode it is not handed frames either.
func TestPolicyExclude(t *testing.T) {
	for _, hybrid := range []bool{false, true} {
		core, logs := observer.New(zap.WarnLevel)
		pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake, Hybrid: hybrid, Stats: new(record.Stats), Logger: zap.New(core)})
		if err != nil {
			t.Fatal(err)
		}
		if got := pol.Pick(8192, engine.Encrypt); got != 1 {
			t.Fatalf("Pick = %d before Exclude, want 1", got)
		}
		why := errors.New("known-answer test failed")
		pol.Exclude(1, why)
		pol.Exclude(1, why)
		pol.Exclude(0, why) // software stays
		pol.Exclude(99, why)
		for _, size := range []int{16, 1400, 8192, 16384} {
			for _, d := range []engine.Direction{engine.Encrypt, engine.Decrypt} {
				if got := pol.Pick(size, d); pol.Names()[got] == "afalg:dev" {
					t.Errorf("hybrid %v: Pick(%d, %v) = the excluded engine", hybrid, size, d)
				}
			}
		}
		if !pol.Out(1) || pol.Out(0) {
			t.Errorf("Out(1) = %v, Out(0) = %v", pol.Out(1), pol.Out(0))
		}
		if n := logs.FilterMessageSnippet("wrong answers").Len(); n != 1 {
			t.Errorf("%d warnings, want one", n)
		}
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

// BenchmarkFrameBookkeeping is what a device frame costs the policy: Pick,
// Begin and End, with the device holding three frames already so that
// hybrid asks for the device's load on every Pick (a clock read and a
// lock). Run it where clock reads are slow (an emulator) to see that part.
func BenchmarkFrameBookkeeping(b *testing.B) {
	for _, hybrid := range []bool{false, true} {
		pol, err := NewPolicy(testProfile(), cbc256, PolicyOptions{Open: openFake, Hybrid: hybrid})
		if err != nil {
			b.Fatal(err)
		}
		name := map[bool]string{false: "auto", true: "hybrid"}[hybrid]
		for range 3 {
			pol.Begin(1, 8192, engine.Encrypt)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				idx := pol.Pick(8192, engine.Encrypt)
				pol.Begin(idx, 8192, engine.Encrypt)
				pol.End(idx, 8192, engine.Encrypt)
			}
		})
	}
	b.Run("time.Now", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
}
