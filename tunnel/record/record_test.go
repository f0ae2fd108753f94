package record

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/nettest"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/suite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mkSuite(mode engine.Mode, bits int) suite.Suite {
	return suite.Suite{Cipher: engine.Cipher{Mode: mode, KeyBits: bits}, MAC: suite.HMACSHA256}
}

var (
	ctr128 = mkSuite(engine.CTR, 128)
	ctr256 = mkSuite(engine.CTR, 256)
	cbc128 = mkSuite(engine.CBC, 128)
	cbc256 = mkSuite(engine.CBC, 256)
	suites = []suite.Suite{ctr128, ctr256, cbc128, cbc256}
)

func randBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func randDirKeys(t testing.TB, s suite.Suite) DirKeys {
	k := DirKeys{Enc: randBytes(t, s.Cipher.KeySize()), MAC: randBytes(t, MACKeySize)}
	copy(k.IV[:], randBytes(t, 16))
	return k
}

// keyPair returns mirrored keys for the two ends of a link.
func keyPair(t testing.TB, s suite.Suite) (a, b Keys) {
	x, y := randDirKeys(t, s), randDirKeys(t, s)
	return Keys{Send: x, Recv: y}, Keys{Send: y, Recv: x}
}

func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c2 := <-ch
	if c2 == nil {
		t.Fatal("accept failed")
	}
	return c1, c2
}

type transport struct {
	name string
	pair func(testing.TB) (net.Conn, net.Conn)
}

var transports = []transport{
	{"pipe", func(testing.TB) (net.Conn, net.Conn) { return net.Pipe() }},
	{"tcp", tcpPair},
}

// newPair makes two Conns over raw conns c1, c2.
func newPair(t testing.TB, c1, c2 net.Conn, s suite.Suite, oa, ob Options) (*Conn, *Conn) {
	t.Helper()
	return newPairPeers(t, c1, c2, s, 0, 0, oa, ob)
}

// newPairPeers is newPair with each end's Keys.PeerMaxFrame: what the
// handshake told a about b's max_frame (peerA), and b about a's (peerB).
func newPairPeers(t testing.TB, c1, c2 net.Conn, s suite.Suite, peerA, peerB int, oa, ob Options) (*Conn, *Conn) {
	t.Helper()
	ka, kb := keyPair(t, s)
	ka.PeerMaxFrame, kb.PeerMaxFrame = peerA, peerB
	a, err := New(c1, ka, s, oa)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(c2, kb, s, ob)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pump writes total random bytes to w in random write sizes (1 B … maxWrite)
// and returns their SHA-256.
func pump(w io.Writer, total, maxWrite int, seed uint64) ([32]byte, error) {
	rng := mrand.New(mrand.NewPCG(seed, 1))
	h := sha256.New()
	buf := make([]byte, maxWrite)
	for total > 0 {
		n := min(total, 1+rng.IntN(maxWrite))
		for i := range buf[:n] {
			buf[i] = byte(rng.Uint32())
		}
		h.Write(buf[:n])
		if _, err := w.Write(buf[:n]); err != nil {
			return [32]byte{}, err
		}
		total -= n
	}
	return [32]byte(h.Sum(nil)), nil
}

// drain reads exactly total bytes from r and returns their SHA-256.
func drain(r io.Reader, total int) ([32]byte, error) {
	h := sha256.New()
	if _, err := io.CopyN(h, r, int64(total)); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

// roundTrip sends total bytes each way at once and checks them.
func roundTrip(t *testing.T, a, b *Conn, total, maxWrite int) {
	t.Helper()
	var wg sync.WaitGroup
	check := func(from, to *Conn, seed uint64) {
		defer wg.Done()
		var sent [32]byte
		var werr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			sent, werr = pump(from, total, maxWrite, seed)
		}()
		got, rerr := drain(to, total)
		<-done
		if werr != nil || rerr != nil {
			t.Errorf("write: %v, read: %v", werr, rerr)
			return
		}
		if got != sent {
			t.Errorf("SHA-256 mismatch: sent %x, got %x", sent, got)
		}
	}
	wg.Add(2)
	go check(a, b, 1)
	go check(b, a, 2)
	wg.Wait()
}

func TestRoundTrip(t *testing.T) {
	for _, tr := range transports {
		for _, s := range suites {
			t.Run(tr.name+"/"+s.Cipher.String(), func(t *testing.T) {
				c1, c2 := tr.pair(t)
				a, b := newPair(t, c1, c2, s, Options{}, Options{})
				roundTrip(t, a, b, 1<<20, 256<<10)
				st := a.Stats()
				if st.Frames[engine.Encrypt][0].Load() == 0 || st.Frames[engine.Decrypt][0].Load() == 0 {
					t.Error("no frames counted")
				}
				if st.AuthFailures.Load() != 0 {
					t.Error("auth failures counted on a clean link")
				}
			})
		}
	}
}

func TestRoundTripOptions(t *testing.T) {
	cases := []Options{
		{MaxFrame: MinMaxFrame, Workers: 1},
		{MaxFrame: 4096, Workers: 4},
		{MaxFrame: HardMaxFrame, Workers: 3},
		{MaxFrame: 64 << 10, WriteBuffer: 64 << 10},
	}
	for _, o := range cases {
		for _, s := range []suite.Suite{ctr256, cbc128} {
			t.Run(fmt.Sprintf("%s/max%d/w%d", s.Cipher, o.MaxFrame, o.Workers), func(t *testing.T) {
				c1, c2 := tcpPair(t)
				a, b := newPair(t, c1, c2, s, o, o)
				roundTrip(t, a, b, 1<<20, 100<<10)
			})
		}
	}
}

func TestNewRejectsOptions(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	ka, _ := keyPair(t, ctr256)
	bad := []Options{
		{MaxFrame: 100},
		{MaxFrame: 32},
		{MaxFrame: HardMaxFrame + 16},
		{Workers: -1},
		{Workers: MaxWorkers + 1},
		{WriteBuffer: 100},
		{Engines: []engine.Engine{}},
		{Engines: make([]engine.Engine, MaxEngines+1)},
	}
	for _, o := range bad {
		if c, err := New(c1, ka, ctr256, o); err == nil {
			c.Close()
			t.Errorf("New accepted %+v", o)
		}
	}
	short := ka
	short.Send.Enc = short.Send.Enc[:16]
	if _, err := New(c1, short, ctr256, Options{}); !errors.Is(err, engine.ErrKeySize) {
		t.Errorf("short key: got %v, want ErrKeySize", err)
	}
	if _, err := New(c1, ka, suite.Suite{Cipher: ctr256.Cipher, MAC: 9}, Options{}); !errors.Is(err, ErrSuite) {
		t.Errorf("unknown MAC: got %v, want ErrSuite", err)
	}
	// ECB takes a 32-byte key like aes-256-ctr, so only the suite check
	// can refuse it.
	ecb := suite.Suite{Cipher: engine.Cipher{Mode: engine.ECB, KeyBits: 256}, MAC: ctr256.MAC}
	if c, err := New(c1, ka, ecb, Options{}); !errors.Is(err, ErrSuite) {
		if err == nil {
			c.Close()
		}
		t.Errorf("ECB suite: got %v, want ErrSuite", err)
	}
}

func TestNetConn(t *testing.T) {
	for _, tr := range transports {
		for _, s := range []suite.Suite{ctr256, cbc128} {
			t.Run(tr.name+"/"+s.Cipher.String(), func(t *testing.T) {
				nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
					c1, c2 := tr.pair(t)
					ka, kb := keyPair(t, s)
					a, err := New(c1, ka, s, Options{})
					if err != nil {
						return nil, nil, nil, err
					}
					b, err := New(c2, kb, s, Options{})
					if err != nil {
						return nil, nil, nil, err
					}
					return a, b, func() { a.Close(); b.Close() }, nil
				})
			})
		}
	}
}

// slowEngine is the software engine with a random delay per call, so
// parallel workers finish frames out of order.
type slowEngine struct{ engine.Software }

func (slowEngine) Name() string { return "slow" }

func (e slowEngine) NewCrypter(c engine.Cipher, key []byte) (engine.Crypter, error) {
	cr, err := e.Software.NewCrypter(c, key)
	return slowCrypter{cr}, err
}

type slowCrypter struct{ engine.Crypter }

func (s slowCrypter) Encrypt(dst, src, iv []byte) error {
	time.Sleep(time.Duration(mrand.IntN(200)) * time.Microsecond)
	return s.Crypter.Encrypt(dst, src, iv)
}

func (s slowCrypter) Decrypt(dst, src, iv []byte) error {
	time.Sleep(time.Duration(mrand.IntN(200)) * time.Microsecond)
	return s.Crypter.Decrypt(dst, src, iv)
}

type pickFunc func(size int, dir engine.Direction) int

func (f pickFunc) Pick(size int, dir engine.Direction) int { return f(size, dir) }

func TestParallelWorkersKeepOrder(t *testing.T) {
	for _, s := range []suite.Suite{ctr128, cbc256} {
		t.Run(s.Cipher.String(), func(t *testing.T) {
			o := Options{
				MaxFrame: MinMaxFrame, Workers: 4,
				Engines: []engine.Engine{engine.Software{}, slowEngine{}},
				Policy:  pickFunc(func(int, engine.Direction) int { return 1 }),
			}
			c1, c2 := tcpPair(t)
			a, b := newPair(t, c1, c2, s, o, o)
			roundTrip(t, a, b, 4<<20, 4096) // over 4000 frames of MinMaxFrame
			sealed := a.Stats().Frames[engine.Encrypt][1].Load()
			opened := b.Stats().Frames[engine.Decrypt][1].Load()
			if sealed < 4000 || sealed != opened {
				t.Fatalf("sealed %d frames, opened %d; want equal and >= 4000", sealed, opened)
			}
			t.Logf("%d frames through 4 workers", sealed)
		})
	}
}

// frameCounter is a raw conn wrapper that parses the frames written to it.
type frameCounter struct {
	net.Conn
	mu     sync.Mutex
	buf    []byte
	sizes  []int
	writes int
}

func (f *frameCounter) Write(p []byte) (int, error) {
	f.mu.Lock()
	f.writes++
	f.buf = append(f.buf, p...)
	for len(f.buf) >= HeaderSize {
		n := int(uint32(f.buf[0])<<24 | uint32(f.buf[1])<<16 | uint32(f.buf[2])<<8 | uint32(f.buf[3]))
		if len(f.buf) < wireSize(n) {
			break
		}
		f.sizes = append(f.sizes, n)
		f.buf = f.buf[wireSize(n):]
	}
	f.mu.Unlock()
	return f.Conn.Write(p)
}

func (f *frameCounter) stats() (frames, bytes, writes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.sizes {
		bytes += n
	}
	return len(f.sizes), bytes, f.writes
}

// yamuxLike writes msgs messages the way yamux's sendLoop does: a 12-byte
// header, then the body, as two Writes.
func yamuxLike(w io.Writer, msgs, body int) error {
	hdr := make([]byte, 12)
	b := make([]byte, body)
	for range msgs {
		if _, err := w.Write(hdr); err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// Bulk yamux traffic must leave as full frames, not 12-byte headers and
// bodies in frames of their own.
func TestCoalesceBulk(t *testing.T) {
	c1, c2 := tcpPair(t)
	fc := &frameCounter{Conn: c1}
	a, b := newPair(t, fc, c2, ctr256, Options{}, Options{})
	const msgs, body = 512, 16 << 10
	total := msgs * (12 + body)
	errc := make(chan error, 1)
	go func() { errc <- yamuxLike(a, msgs, body) }()
	if _, err := io.CopyN(io.Discard, b, int64(total)); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	frames, n, writes := fc.stats()
	avg := n / frames
	t.Logf("bulk: %d messages of 12+%d B → %d frames (avg %d B, max %d), %d conn writes", msgs, body, frames, avg, DefaultMaxFrame, writes)
	if frames > 2*total/DefaultMaxFrame {
		t.Fatalf("%d frames for %d bytes: not coalescing (avg frame %d B)", frames, total, avg)
	}
}

// An idle link sends a small message at once, without waiting for more.
func TestIdleLatency(t *testing.T) {
	c1, c2 := tcpPair(t)
	fc := &frameCounter{Conn: c1}
	a, b := newPair(t, fc, c2, ctr256, Options{}, Options{})
	const msgs = 200
	buf := make([]byte, 12+100)
	var worst time.Duration
	for range msgs {
		start := time.Now()
		if err := yamuxLike(a, 1, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b, buf); err != nil {
			t.Fatal(err)
		}
		worst = max(worst, time.Since(start))
	}
	frames, _, _ := fc.stats()
	t.Logf("idle: %d header+body messages → %d frames (%.2f per message), worst latency %v", msgs, frames, float64(frames)/msgs, worst)
	if frames > 2*msgs {
		t.Fatalf("%d frames for %d messages", frames, msgs)
	}
}

// At the key-use limit the writer moves to the next epoch's keys instead
// of closing the link (it used to fail with ErrKeyExhausted).
func TestKeyUseLimitWriter(t *testing.T) {
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, ctr256, Options{maxFrames: 3}, Options{maxFrames: 3})
	msg := []byte("hello")
	buf := make([]byte, len(msg))
	for i := range 10 {
		if _, err := a.Write(msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if _, err := io.ReadFull(b, buf); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	// One frame per write: frames 3, 6 and 9 began epochs 1, 2 and 3.
	if got := a.Stats().Frames[engine.Encrypt][0].Load(); got != 10 {
		t.Fatalf("sealed %d frames, want 10", got)
	}
	if tx, rx := a.Stats().Rekeys[engine.Encrypt].Load(), b.Stats().Rekeys[engine.Decrypt].Load(); tx != 3 || rx != 3 {
		t.Fatalf("rekeys sent %d, received %d; want 3", tx, rx)
	}
}

func TestKeyUseLimitReader(t *testing.T) {
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, ctr256, Options{}, Options{maxFrames: 2})
	buf := make([]byte, 5)
	for i := range 3 {
		if _, err := a.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		_, err := io.ReadFull(b, buf)
		if i < 2 && err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if i == 2 && !errors.Is(err, ErrKeyExhausted) {
			t.Fatalf("read past the limit: got %v, want ErrKeyExhausted", err)
		}
	}
}

// A Write blocked on a full buffer returns at Close, and a Read blocked
// on an idle link too.
func TestCloseUnblocks(t *testing.T) {
	c1, c2 := net.Pipe()
	a, b := newPair(t, c1, c2, ctr256, Options{}, Options{})
	_ = b // never reads: a's buffer fills
	errs := make(chan error, 2)
	go func() {
		var err error
		for err == nil {
			_, err = a.Write(make([]byte, 4096))
		}
		errs <- err
	}()
	go func() {
		_, err := a.Read(make([]byte, 10))
		errs <- err
	}()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	closed := make(chan struct{})
	go func() { a.Close(); close(closed) }()
	for range 2 {
		if err := <-errs; !errors.Is(err, net.ErrClosed) {
			t.Errorf("got %v, want net.ErrClosed", err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("blocked calls returned %v after Close", d)
	}
	b.Close() // a's flush may be stuck on the unread pipe until now
	<-closed
	if err := a.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// Close sends what was buffered; the peer then sees io.EOF.
func TestCloseFlushes(t *testing.T) {
	c1, c2 := net.Pipe()
	a, b := newPair(t, c1, c2, cbc128, Options{}, Options{})
	data := randBytes(t, 100<<10)
	start := time.Now()
	go func() {
		a.Write(data)
		a.Close()
	}()
	got, err := io.ReadAll(b)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("flush and EOF took %v", d)
	}
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, want %d", len(got), len(data))
	}
}

// TestCloseDuringRead: what Read returned before Close ended it is a
// prefix of what the peer sent. Close drops the frames that come in while
// it flushes; it once took them from the queue while a Read was still
// taking frames from it, and that Read went on past the missing frame
// (a tunnel stream got a hole of one frame as its link failed).
func TestCloseDuringRead(t *testing.T) {
	const total = 4 << 20
	data := randBytes(t, total)
	s := mkSuite(engine.CTR, 128)
	for i := range 200 {
		c1, c2 := tcpPair(t)
		a, b := newPair(t, c1, c2, s, Options{MaxFrame: 16 << 10}, Options{MaxFrame: 16 << 10})
		go func() { _, _ = b.Write(data) }()
		var got []byte
		started := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64<<10)
			signalled := false
			for {
				n, err := a.Read(buf)
				got = append(got, buf[:n]...)
				if len(got) >= 64<<10 && !signalled {
					close(started)
					signalled = true
				}
				if err != nil {
					return
				}
			}
		}()
		select {
		case <-started:
		case <-done:
			t.Fatalf("run %d: the read ended after %d bytes before Close", i, len(got))
		}
		// The link fails (a frame failed its check), and then the
		// application closes it, as tunnel/mux does when its next write
		// fails, while Read still delivers the frames queued before.
		a.fail(errors.New("test: the link failed"))
		_ = a.Close()
		<-done
		if !bytes.Equal(got, data[:len(got)]) {
			k := 0
			for got[k] == data[k] {
				k++
			}
			t.Fatalf("run %d: read %d bytes that are not a prefix of the stream: the first wrong one at %d", i, len(got), k)
		}
		_ = b.Close()
	}
}

// TestMaxFrameMismatch: a peer whose max_frame is larger than ours fails the
// link at its first longer frame with an error that says what to set, and
// delivers nothing of that frame.
func TestMaxFrameMismatch(t *testing.T) {
	c1, c2 := tcpPair(t)
	a, b := newPair(t, c1, c2, ctr256, Options{MaxFrame: 256 << 10}, Options{MaxFrame: 64 << 10})
	go func() {
		// One write well over 64 KiB: whatever the cutter makes of it, a
		// frame of more than 64 KiB follows (it fails once b closes).
		a.Write(make([]byte, 1<<20))
	}()
	got, err := io.Copy(io.Discard, b)
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("read %d bytes, then %v: want ErrFrameTooLarge", got, err)
	}
	if !strings.Contains(err.Error(), "max_frame here is 65536") || !strings.Contains(err.Error(), "needs the same on both ends") {
		t.Errorf("error %q does not say what to set", err)
	}
	if got >= 1<<20 {
		t.Errorf("read all %d bytes through a reader that refuses their frames", got)
	}
}

// With the peer's max_frame from the handshake (Keys.PeerMaxFrame), each
// end sends frames no longer than the other accepts, whatever each set:
// 1 MiB crosses a 256 KiB end to a 64 KiB one intact, and back, and the
// 64 KiB end still accepts the 256 KiB frames of a peer that sends them
// (a version 2 peer, to which the handshake sends at most 64 KiB).
func TestMaxFrameAgreed(t *testing.T) {
	c1, c2 := tcpPair(t)
	a, b := newPairPeers(t, c1, c2, ctr256, 64<<10, 256<<10, Options{MaxFrame: 256 << 10}, Options{MaxFrame: 64 << 10})
	if a.SendFrame() != 64<<10 || b.SendFrame() != 64<<10 {
		t.Fatalf("SendFrame: %d and %d, want 65536 at both ends", a.SendFrame(), b.SendFrame())
	}
	roundTrip(t, a, b, 1<<20, 300<<10)
	// A 256 KiB end that does not know its peer's max_frame sends 256 KiB
	// frames; a peer that set 256 KiB accepts them whatever it sends.
	c3, c4 := tcpPair(t)
	c, d := newPairPeers(t, c3, c4, ctr256, 0, 64<<10, Options{MaxFrame: 256 << 10}, Options{MaxFrame: 256 << 10})
	if c.SendFrame() != 256<<10 || d.SendFrame() != 64<<10 {
		t.Fatalf("SendFrame: %d and %d, want 262144 and 65536", c.SendFrame(), d.SendFrame())
	}
	roundTrip(t, c, d, 1<<20, 300<<10)
	// A peer's max_frame that no end could set is refused.
	ke, _ := keyPair(t, ctr256)
	ke.PeerMaxFrame = 1000
	if _, err := New(c3, ke, ctr256, Options{}); err == nil {
		t.Fatal("New took a peer's max_frame of 1000 bytes")
	}
}
