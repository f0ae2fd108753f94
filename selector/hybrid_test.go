package selector

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// queueDevice is a device with one queue: every call waits its turn and
// then takes lat (time at the device, not the CPU's), then the software
// engine does the actual work so the bytes are right.
type queueDevice struct {
	lat   time.Duration
	mu    sync.Mutex
	calls atomic.Int64
}

func (d *queueDevice) Name() string { return "afalg:queue" }
func (d *queueDevice) Driver(c engine.Cipher) (engine.Driver, error) {
	return engine.Driver{Name: "queue_aes", Algorithm: c.KernelName(), Hardware: true}, nil
}
func (d *queueDevice) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := engine.Software{}.NewCrypter(c, key)
	if err != nil {
		return nil, err
	}
	return &queueCrypter{Crypter: cr, d: d}, nil
}

type queueCrypter struct {
	engine.Crypter
	d *queueDevice
}

func (q *queueCrypter) do(dir engine.Direction, dst, src, iv []byte) error {
	q.d.mu.Lock()
	defer q.d.mu.Unlock()
	q.d.calls.Add(1)
	time.Sleep(q.d.lat)
	return engine.Crypt(q.Crypter, dir, dst, src, iv)
}

func (q *queueCrypter) Encrypt(dst, src, iv []byte) error { return q.do(engine.Encrypt, dst, src, iv) }
func (q *queueCrypter) Decrypt(dst, src, iv []byte) error { return q.do(engine.Decrypt, dst, src, iv) }

// queueProfile: the device wins from 4 KiB on at devBPS, three times
// software's speed, so a frame of its band goes to the CPU once 3 wait at
// a loaded device.
func queueProfile(dev engine.Engine, devBPS float64) *Profile {
	m := fakeMachine("linux 6.1.0-test", false, swEngine, dev)
	p := newProfile(*m, 16384)
	swDrv, _ := swEngine.Driver(cbc256)
	devDrv, _ := dev.Driver(cbc256)
	engines := []EngineInfo{{Name: swEngine.name, Driver: &swDrv}, {Name: dev.Name(), Driver: &devDrv}}
	var points []Point
	for _, s := range []int{16, 4096, 16384} {
		dbps := devBPS
		if s < 4096 {
			dbps = devBPS / 100
		}
		points = append(points, Point{Size: s, BPS: map[string]float64{"software": devBPS / 3, dev.Name(): dbps}, Samples: 1})
	}
	for _, d := range []string{"encrypt", "decrypt"} {
		p.Tables = append(p.Tables, Table{Cipher: "aes-256-cbc", Direction: d, Margin: DefaultMargin, Engines: engines, Points: points,
			Bands: []Band{{1, 4095, "software"}, {4096, 16384, dev.Name()}},
			// As a trial on a one-queue device would find: no faster with
			// several frames in flight, and hybrid kept.
			Hybrid: &HybridTrial{Device: dev.Name(), CPU: "software", Size: 16384, Workers: 4, AutoBPS: devBPS, Keep: true}})
	}
	return p
}

// calibrateQueue measures dev's speed for 16 KiB frames the way
// calibration would: one frame at a time (a sleep of 200 µs takes longer
// than that on a busy machine), and returns a tenth of it: on a machine
// whose load changes (go test runs packages in parallel, -race beside a
// busy core) the device may run several times slower during the test than
// while it was measured, and hybrid would not see it loaded (half of it
// was not enough: TestPushFrames handed nothing in three pushes, 2026-12-02).
// A profile that underrates the device only makes its frames count for
// more work.
func calibrateQueue(t *testing.T, dev *queueDevice) float64 {
	t.Helper()
	cr, err := dev.NewCrypter(cbc256, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	buf, iv := make([]byte, 16384), make([]byte, 16)
	const n = 20
	start := time.Now()
	for range n {
		if err := cr.Encrypt(buf, buf, iv); err != nil {
			t.Fatal(err)
		}
	}
	dev.calls.Store(0)
	return float64(n*len(buf)) / time.Since(start).Seconds() / 10
}

// Through a real record-layer link with a device that can take one frame
// at a time: auto gives the device every bulk frame (the CPU waits), hybrid
// lets software take the frames that would wait behind three others, and
// both deliver the same bytes. Frame counts, not times, are checked; the
// times are logged.
func TestHybridThroughRecordLayer(t *testing.T) {
	s := suite.Suite{Cipher: cbc256, MAC: suite.HMACSHA256}
	data := make([]byte, 2<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	type result struct {
		swBytes, devFrames uint64 // sealed by software; device frames of both ends
		took               time.Duration
	}
	run := func(hybrid bool) result {
		dev := &queueDevice{lat: 200 * time.Microsecond}
		open := func(spec string) (engine.Engine, error) {
			if spec == dev.Name() {
				return dev, nil
			}
			return engine.Open(spec, engine.Options{})
		}
		pol, err := NewPolicy(queueProfile(dev, calibrateQueue(t, dev)), cbc256, PolicyOptions{Open: open, Hybrid: hybrid})
		if err != nil {
			t.Fatal(err)
		}
		ka, kb := randKeys(t, s)
		c1, c2 := net.Pipe()
		opt := func(st *record.Stats) record.Options {
			return record.Options{MaxFrame: 16384, Workers: 4, Engines: pol.Engines(), Policy: pol, Stats: st}
		}
		sa, sb := new(record.Stats), new(record.Stats)
		a, err := record.New(c1, ka, s, opt(sa))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := record.New(c2, kb, s, opt(sb))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		start := time.Now()
		werr := make(chan error, 1)
		go func() {
			for p := data; len(p) > 0; {
				n := min(len(p), 32<<10)
				if _, err := a.Write(p[:n]); err != nil {
					werr <- err
					return
				}
				p = p[n:]
			}
			werr <- nil
		}()
		got := make([]byte, len(data))
		if _, err := io.ReadFull(b, got); err != nil {
			t.Fatal(err)
		}
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if !bytes.Equal(got, data) {
			t.Fatal("the bytes delivered differ from the bytes written")
		}
		// Frames are cut from the writes as the pipeline frees up: bulk
		// 16 KiB frames and a few short ones, software's band in both
		// policies. Bulk bytes sealed by software were handed over from
		// the queued device.
		return result{
			swBytes:   sa.Bytes[engine.Encrypt][0].Load(),
			devFrames: sa.Frames[engine.Encrypt][1].Load() + sb.Frames[engine.Decrypt][1].Load(),
			took:      took,
		}
	}
	auto, hyb := run(false), run(true)
	t.Logf("auto: %d device frames, %d bytes sealed by software, %v; hybrid: %d device frames, %d bytes sealed by software, %v",
		auto.devFrames, auto.swBytes, auto.took, hyb.devFrames, hyb.swBytes, hyb.took)
	total := uint64(len(data))
	if auto.devFrames == 0 || auto.swBytes > total/100 {
		t.Errorf("auto: %d device frames, %d of %d bytes sealed by software: want the bulk on the device", auto.devFrames, auto.swBytes, total)
	}
	if hyb.devFrames == 0 || hyb.swBytes < total/10 {
		t.Errorf("hybrid: %d device frames, %d of %d bytes sealed by software: want both to take a good share", hyb.devFrames, hyb.swBytes, total)
	}
}

func randKeys(t *testing.T, s suite.Suite) (a, b record.Keys) {
	t.Helper()
	dk := func() record.DirKeys {
		k := record.DirKeys{Enc: make([]byte, s.Cipher.KeySize()), MAC: make([]byte, record.MACKeySize)}
		for _, b := range [][]byte{k.Enc, k.MAC, k.IV[:]} {
			if _, err := rand.Read(b); err != nil {
				t.Fatal(err)
			}
		}
		return k
	}
	x, y := dk(), dk()
	return record.Keys{Send: x, Recv: y}, record.Keys{Send: y, Recv: x}
}
