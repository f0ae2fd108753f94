package record

import (
	"bytes"
	"net"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/offload-dev/offload/engine"
)

// goid is the calling goroutine's id, from its stack header
// ("goroutine 42 [running]:").
func goid() uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	s = s[:bytes.IndexByte(s, ' ')]
	id, _ := strconv.ParseUint(string(s), 10, 64)
	return id
}

// goids is a set of goroutine ids.
type goids struct {
	mu  sync.Mutex
	ids map[uint64]int
}

func (g *goids) add() {
	id := goid()
	g.mu.Lock()
	if g.ids == nil {
		g.ids = map[uint64]int{}
	}
	g.ids[id]++
	g.mu.Unlock()
}

func (g *goids) set() map[uint64]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[uint64]int{}
	for k, v := range g.ids {
		out[k] = v
	}
	return out
}

// whoEngine is the software engine noting which goroutines seal and open.
type whoEngine struct {
	engine.Software
	seal, open goids
}

func (e *whoEngine) Name() string { return "who" }

func (e *whoEngine) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := e.Software.NewCrypter(c, key)
	return whoCrypter{cr, e}, err
}

type whoCrypter struct {
	engine.Crypter
	e *whoEngine
}

func (c whoCrypter) Encrypt(dst, src, iv []byte) error {
	c.e.seal.add()
	return c.Crypter.Encrypt(dst, src, iv)
}

func (c whoCrypter) Decrypt(dst, src, iv []byte) error {
	c.e.open.add()
	return c.Crypter.Decrypt(dst, src, iv)
}

// whoConn notes which goroutines write and read the link.
type whoConn struct {
	net.Conn
	wrote, read goids
}

func (c *whoConn) Write(p []byte) (int, error) { c.wrote.add(); return c.Conn.Write(p) }
func (c *whoConn) Read(p []byte) (int, error)  { c.read.add(); return c.Conn.Read(p) }

// DataPathAuto is the pipeline on one CPU and on more (the inline path
// measured dearer on one, DataPathAuto's comment); an explicit DataPath
// wins either way.
func TestDataPathAuto(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	for _, c := range []struct {
		procs int
		dp    DataPath
		want  DataPath
	}{
		{1, DataPathAuto, DataPathPipeline},
		{2, DataPathAuto, DataPathPipeline},
		{1, DataPathPipeline, DataPathPipeline},
		{2, DataPathInline, DataPathInline},
	} {
		runtime.GOMAXPROCS(c.procs)
		c1, c2 := net.Pipe()
		a, b := newPair(t, c1, c2, ctr128, Options{DataPath: c.dp}, Options{DataPath: c.dp})
		if a.DataPath() != c.want || b.DataPath() != c.want {
			t.Errorf("GOMAXPROCS %d, %v: %v / %v, want %v", c.procs, c.dp, a.DataPath(), b.DataPath(), c.want)
		}
		a.Close()
		b.Close()
	}
	if _, err := New(nil, Keys{}, ctr128, Options{DataPath: DataPathInline + 1}); err == nil {
		t.Error("an unknown DataPath was accepted")
	}
}

// On the inline path one goroutine per direction touches a frame: the one
// that seals a frame writes it to the link, the one that reads a frame off
// the link opens it, and it is not a goroutine of the caller's. In the
// pipeline they are different goroutines (the test can tell the two).
func TestDataPathGoroutines(t *testing.T) {
	for _, dp := range []DataPath{DataPathInline, DataPathPipeline} {
		t.Run(dp.String(), func(t *testing.T) {
			e := &whoEngine{}
			pol := pickFunc(func(int, engine.Direction) int { return 1 })
			raw1, raw2 := tcpPair(t)
			w1, w2 := &whoConn{Conn: raw1}, &whoConn{Conn: raw2}
			o := Options{DataPath: dp, MaxFrame: 16 << 10, Engines: []engine.Engine{engine.Software{}, e}, Policy: pol}
			a, b := newPair(t, w1, w2, ctr128, o, Options{DataPath: dp, MaxFrame: 16 << 10})
			if a.DataPath() != dp {
				t.Fatalf("DataPath %v, want %v", a.DataPath(), dp)
			}
			// a seals with e and b opens in software: a's reads and b's
			// writes are its peer's, and e sees only a's sealing. Swap
			// roles for opening: a opens what b sends.
			var callers goids
			done := make(chan error, 1)
			go func() {
				callers.add()
				_, err := pump(a, 1<<20, 32<<10, 1)
				if err == nil {
					callers.add()
					_, err = drain(a, 1<<20)
				}
				done <- err
			}()
			if _, err := drain(b, 1<<20); err != nil {
				t.Fatal(err)
			}
			if _, err := pump(b, 1<<20, 32<<10, 2); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			seal, open, wrote, read, caller := e.seal.set(), e.open.set(), w1.wrote.set(), w1.read.set(), callers.set()
			if len(seal) == 0 || len(open) == 0 {
				t.Fatalf("the engine sealed in %d goroutines and opened in %d", len(seal), len(open))
			}
			for id := range seal {
				if _, ok := caller[id]; ok {
					t.Errorf("Write's caller sealed")
				}
			}
			for id := range open {
				if _, ok := caller[id]; ok {
					t.Errorf("Read's caller opened")
				}
			}
			same := func(x, y map[uint64]int) bool {
				if len(x) != 1 || len(y) != 1 {
					return false
				}
				for id := range x {
					_, ok := y[id]
					return ok
				}
				return false
			}
			if got := same(seal, wrote); got != (dp == DataPathInline) {
				t.Errorf("%v: sealing goroutines %v, writing %v: one and the same: %v", dp, seal, wrote, got)
			}
			if got := same(open, read); got != (dp == DataPathInline) {
				t.Errorf("%v: opening goroutines %v, reading %v: one and the same: %v", dp, open, read, got)
			}
		})
	}
}
