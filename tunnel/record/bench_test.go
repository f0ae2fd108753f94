package record

import (
	"fmt"
	"io"
	"net"
	"runtime/metrics"
	"testing"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

var benchSizes = []int{16, 64, 256, 1000, 1500, 4096, 16384 - 1}

func benchWorker(b *testing.B, s suite.Suite, dir engine.Direction) (*worker, *DirKeys) {
	k := randDirKeys(b, s)
	c := &Conn{suite: s, stats: new(Stats), log: zap.NewNop(), opt: Options{Engines: []engine.Engine{engine.Software{}}, Policy: SoftwareOnly{}}}
	w := testWorker(c, dir, &k)
	b.Cleanup(w.close)
	return w, &k
}

// BenchmarkSeal is one frame's encryption and tag on the software engine.
func BenchmarkSeal(b *testing.B) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", s.Cipher, n), func(b *testing.B) {
				w, _ := benchWorker(b, s, engine.Encrypt)
				f := getFrame(wireSize(n + 16))
				defer putFrame(f)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					f.seq, f.n = uint64(i), n
					if err := w.seal(f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkOpen is one frame's tag check and decryption (plus a copy of
// the frame, since opening is in place).
func BenchmarkOpen(b *testing.B) {
	for _, s := range []suite.Suite{ctr256, cbc128} {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", s.Cipher, n), func(b *testing.B) {
				w, k := benchWorker(b, s, engine.Decrypt)
				wire := refSeal(k, s, 0, make([]byte, n))
				ct := len(wire) - Overhead
				f := getFrame(len(wire))
				defer putFrame(f)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					copy(f.buf, wire)
					f.seq, f.n = 0, ct
					if err := w.open(f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkSealOpen is the crypto of one frame end to end, for every suite
// at the frame sizes that matter (a packet, the old and the new default
// frame): seal on one worker, then verify and decrypt on another, as the two
// ends of a link do. MB/s here is the record layer's crypto floor for that
// suite on this machine (harness/compare subtracts it from the tunnel's
// CPU); it must stay at 0 allocs per frame.
func BenchmarkSealOpen(b *testing.B) {
	for _, s := range suite.All() {
		for _, n := range []int{1500, 16 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%d", s, n), func(b *testing.B) {
				sealer, opener, f := sealOpenPair(b, s, n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if err := sealOpen(sealer, opener, f, uint64(i), n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// sealOpenPair makes a sealing and an opening worker with the same keys
// and a frame buffer for n plaintext bytes.
func sealOpenPair(tb testing.TB, s suite.Suite, n int) (sealer, opener *worker, f *frame) {
	k := randDirKeys(tb, s)
	c := &Conn{suite: s, stats: new(Stats), log: zap.NewNop(), opt: Options{Engines: []engine.Engine{engine.Software{}}, Policy: SoftwareOnly{}}}
	sealer, opener = testWorker(c, engine.Encrypt, &k), testWorker(c, engine.Decrypt, &k)
	f = getFrame(wireSize(n + engine.BlockSize))
	if cl, ok := tb.(interface{ Cleanup(func()) }); ok {
		cl.Cleanup(func() { sealer.close(); opener.close(); putFrame(f) })
	}
	return sealer, opener, f
}

// sealOpen seals n bytes in f as frame seq and opens them again in place.
func sealOpen(sealer, opener *worker, f *frame, seq uint64, n int) error {
	f.seq, f.n = seq, n
	if err := sealer.seal(f); err != nil {
		return err
	}
	if err := opener.open(f); err != nil {
		return err
	}
	if f.end-f.off != n {
		return fmt.Errorf("opened %d bytes, sealed %d", f.end-f.off, n)
	}
	return nil
}

// BenchmarkConn is bulk throughput through a pair of Conns (aes-256-ctr,
// software engine), one direction, 32 KiB writes, on either data path
// (run it with -cpu 1,2: the inline path is for one CPU).
func BenchmarkConn(b *testing.B) {
	for _, tr := range transports {
		for _, bc := range []struct {
			workers int
			dp      DataPath
		}{{1, DataPathPipeline}, {2, DataPathPipeline}, {1, DataPathInline}} {
			b.Run(fmt.Sprintf("%s/%v/workers=%d", tr.name, bc.dp, bc.workers), func(b *testing.B) {
				c1, c2 := tr.pair(b)
				o := Options{Workers: bc.workers, DataPath: bc.dp}
				x, y := newPair(b, c1, c2, ctr256, o, o)
				const chunk = 32 << 10
				buf := make([]byte, chunk)
				done := make(chan error, 1)
				b.SetBytes(chunk)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0, sched0 := cpuTime(), schedRounds()
				go func() {
					_, err := io.CopyN(io.Discard, y, int64(b.N)*chunk)
					done <- err
				}()
				for range b.N {
					if _, err := x.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				// CPU of both ends per byte: what the inline path saves,
				// whatever the neighbours do to wall time.
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(int64(b.N)*chunk), "cpu-ns/B")
				// Goroutines made to run (both ends, the benchmark's own
				// two included) per 64 KiB, a full frame: the hand-offs.
				// The runtime samples one transition in 8 (its
				// gTrackingPeriod), so this is an estimate.
				b.ReportMetric(8*float64(schedRounds()-sched0)/(float64(int64(b.N)*chunk)/(64<<10)), "wakes/64KiB")
				st := x.Stats()
				b.ReportMetric(float64(st.Bytes[engine.Encrypt][0].Load())/float64(st.Frames[engine.Encrypt][0].Load()), "B/frame")
			})
		}
	}
}

// schedRounds is how many times a goroutine went from runnable to running
// so far: the count of the scheduler's latency histogram.
func schedRounds() uint64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return n
}

var _ net.Conn = (*Conn)(nil)
