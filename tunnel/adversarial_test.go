package tunnel

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

// advServer is a server with an echo service and a good client connected
// to it; every adversarial test checks the good client still works.
type advServer struct {
	addr string
	srv  *Server
	good string // the good client's echo forward
	logs *observer.ObservedLogs
}

func startAdvServer(t *testing.T, mod func(*ServerConfig)) *advServer {
	t.Helper()
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	cfg := ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echoT.addr()}}
	if mod != nil {
		mod(&cfg)
	}
	addr, srv, _ := startServer(t, cfg)
	addrs, _, _ := startClient(t, ClientConfig{Options: testOptions(log), Server: addr, RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo")
	a := &advServer{addr: addr, srv: srv, good: addrs["echo"], logs: logs}
	a.check(t)
	return a
}

// check runs a round trip through the good client.
func (a *advServer) check(t *testing.T) {
	t.Helper()
	if err := testutil.EchoRoundTrip(a.good, 64<<10, 9); err != nil {
		t.Fatalf("good client: %v", err)
	}
}

func (a *advServer) failures(result int) uint64 { return a.srv.ctr.handshakes[result].Load() }

func TestAttackGarbageHandshake(t *testing.T) {
	testutil.LeakCheck(t)
	a := startAdvServer(t, nil)
	c, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// readErr ends with EOF or a reset when the server closes; only its
	// own deadline means the connection was kept.
	if err := writeReadErr(c, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); isTimeout(err) {
		t.Fatalf("server kept a garbage connection open: %v", err)
	}
	eventually(t, 5*time.Second, "a protocol failure to be counted", func() bool { return a.failures(hsProtocol) == 1 })
	a.check(t)
}

func TestWrongKey(t *testing.T) {
	testutil.LeakCheck(t)
	a := startAdvServer(t, nil)
	log, logs := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.PSK = testPSK(8)
	startClient(t, ClientConfig{Options: opt, Server: a.addr, RedialMin: time.Second, RedialMax: time.Second}, "echo")
	eventually(t, 5*time.Second, "an auth failure on the server", func() bool { return a.failures(hsAuth) >= 1 })
	eventually(t, 5*time.Second, "the bad client to log it", func() bool {
		return len(loggedErrors(logs, "link failed; redialling", handshake.ErrAuth)) > 0
	})
	a.check(t)
}

// loggedErrors returns the errors of entries with message msg that wrap
// target.
func loggedErrors(logs *observer.ObservedLogs, msg string, target error) []error {
	var out []error
	for _, e := range logs.FilterMessage(msg).All() {
		for _, f := range e.Context {
			if err, ok := f.Interface.(error); ok && errors.Is(err, target) {
				out = append(out, err)
			}
		}
	}
	return out
}

func TestOtherSuite(t *testing.T) {
	testutil.LeakCheck(t)
	a := startAdvServer(t, nil)
	log, logs := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.Suite = suite.Suite{Cipher: engine.Cipher{Mode: engine.CBC, KeyBits: 128}, MAC: suite.HMACSHA256}
	startClient(t, ClientConfig{Options: opt, Server: a.addr, RedialMin: time.Second, RedialMax: time.Second}, "echo")
	var errs []error
	eventually(t, 5*time.Second, "the client to log a suite mismatch", func() bool {
		errs = loggedErrors(logs, "link failed; redialling", handshake.ErrSuiteMismatch)
		return len(errs) > 0
	})
	var sm *handshake.SuiteMismatchError
	if !errors.As(errs[0], &sm) || sm.PeerSuite != suite.Default.String() {
		t.Fatalf("client error %v does not name the server's suite %s", errs[0], suite.Default)
	}
	t.Logf("client says: %v", errs[0])
	eventually(t, 5*time.Second, "a suite failure on the server", func() bool { return a.failures(hsSuite) >= 1 })
	a.check(t)
}

// TestAttackStalledHandshake: a peer that sends a hello and then nothing is
// dropped at the handshake timeout and its slot freed.
func TestAttackStalledHandshake(t *testing.T) {
	testutil.LeakCheck(t)
	a := startAdvServer(t, func(c *ServerConfig) { c.HandshakeTimeout = 300 * time.Millisecond })
	c, err := net.Dial("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("OFLD"))
	eventually(t, 2*time.Second, "the handshake to hold a slot", func() bool { return a.srv.slots.Len() == 1 })
	a.check(t)
	start := time.Now()
	if err := readErr(c); err == nil {
		t.Fatal("stalled connection not closed")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("closed after %v, want about the handshake timeout", d)
	}
	eventually(t, 2*time.Second, "a timeout to be counted and the slot freed", func() bool {
		return a.failures(hsTimeout) == 1 && a.srv.slots.Len() == 0
	})
	a.check(t)
}

// TestAttackHandshakeFlood: 1,000 unauthenticated connections at once cost
// bounded memory, and a new good client still gets in while they are open.
func TestAttackHandshakeFlood(t *testing.T) {
	testutil.LeakCheck(t)
	const flood = 1000
	a := startAdvServer(t, func(c *ServerConfig) { c.HandshakeTimeout = 30 * time.Second })
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range flood {
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		_, _ = c.Write([]byte("OFLD\x01")) // a partial hello, then nothing
		conns = append(conns, c)
	}
	eventually(t, 10*time.Second, "the excess to be dropped", func() bool {
		return a.failures(hsDropped) >= flood-DefaultMaxHandshakes
	})
	if n := a.srv.slots.Len(); n > DefaultMaxHandshakes {
		t.Fatalf("%d handshakes pending, cap %d", n, DefaultMaxHandshakes)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	grew := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("heap in use grew by %d KiB with %d flood connections open (%d pending on the server), %d dropped",
		grew>>10, flood, a.srv.slots.Len(), a.failures(hsDropped))
	// Both ends of 1,000 TCP connections live in this process; the server
	// holds at most MaxHandshakes of them. 16 MiB is a loose bound.
	if grew > 16<<20 {
		t.Errorf("heap grew by %d MiB", grew>>20)
	}
	if a.logs.FilterMessage("handshake slots full: dropped the oldest unauthenticated connections").Len() != 1 {
		t.Errorf("want one rate-limited drop log line")
	}

	// A new client connects while the flood connections are still open.
	log, _ := testutil.ObservedLogger(t)
	addrs, cli, _ := startClient(t, ClientConfig{Options: testOptions(log), Server: a.addr, RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 64<<10, 5); err != nil {
		t.Fatalf("new client during the flood: %v", err)
	}
	t.Logf("new client got in after %d redials", cli.ctr.redials.Load())
	a.check(t)
}

// TestAttackTamperedFrames runs a source transfer through a proxy that
// tampers with the first link's server → client frames, on plain links
// (resume_window 0): the link must close with the record error logged,
// the application must get only a prefix of the true stream and then an
// error, and the client must redial. TestAttackTamperedFramesResumable
// runs the same attacks on a session that outlives links.
func TestAttackTamperedFrames(t *testing.T) {
	testutil.LeakCheck(t)
	for _, mode := range tamperModes {
		t.Run(mode.String(), func(t *testing.T) { tamperedFrames(t, mode, 0) })
	}
}

// TestAttackTamperedFramesResumable: the attacks of TestAttackTamperedFrames
// on a resumable session (resume_window 1m, the default). A frame that
// fails authentication or breaks the record layer's rules ends the session
// as it ends a plain link: the application gets a prefix of the true
// stream, then an error, and the link failure is logged with the record
// error. A truncated frame is a path that went away: the link closes and
// the loss is logged with the truncation, and the session resumes on the
// next link, so the application gets the whole stream, intact.
func TestAttackTamperedFramesResumable(t *testing.T) {
	testutil.LeakCheck(t)
	for _, mode := range tamperModes {
		t.Run(mode.String(), func(t *testing.T) { tamperedFrames(t, mode, time.Minute) })
	}
}

var tamperModes = []tamperMode{tamperFlip, tamperReplay, tamperReorder, tamperTruncate, tamperOversize}

// tamperedFrames is one attack of TestAttackTamperedFrames, with
// resume_window window on both ends.
func tamperedFrames(t *testing.T, mode tamperMode, window time.Duration) {
	const size = 4 << 20
	wantErr := map[tamperMode]error{
		tamperFlip:     record.ErrAuth,
		tamperReplay:   record.ErrAuth,
		tamperReorder:  record.ErrAuth,
		tamperTruncate: io.ErrUnexpectedEOF,
		tamperOversize: record.ErrFrameTooLarge,
	}
	resumes := window > 0 && mode == tamperTruncate // a blip of the path, not an attack on the keys
	testutil.LeakCheck(t)
	src := startTarget(t, source(size, 42))
	log, logs := testutil.ObservedLogger(t)
	// yamux's smallest window: the server's burst often ends in the
	// held frame of the reorder (see the second stream below).
	opt := testOptions(log)
	opt.ResumeWindow = window
	opt.YamuxWindow = MinYamuxWindow
	saddr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"src": src.addr()}})
	tampered := make(chan struct{})
	px := startProxy(t, saddr, func(n int) func(io.Writer, io.Reader) error {
		if n == 0 {
			return frameTamperer(t, mode, 40, tampered)
		}
		return nil
	})
	addrs, cli, _ := startClient(t, ClientConfig{Options: opt, Server: px.addr(), RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "src")

	c, err := net.Dial("tcp", addrs["src"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var got []byte
	var rerr error
	read := make(chan struct{})
	go func() {
		defer close(read)
		got, rerr = io.ReadAll(c)
	}()
	select {
	case <-tampered:
	case <-read:
		t.Fatalf("the application's read ended (%d bytes, %v) before the proxy reached frame 40", len(got), rerr)
	}
	if mode == tamperReorder {
		// The proxy holds the frame until the server sends the next,
		// which it may never do: the held frame can end what the
		// stream's window let the server send, and the client grants
		// more only for data it can read, which the held frame
		// completes. A second stream makes the server send a frame
		// outside the first stream's flow control (its answer to the
		// open); the proxy sends that one before the held frame.
		if poke, err := net.Dial("tcp", addrs["src"]); err == nil {
			defer poke.Close()
		}
	}
	<-read
	want := make([]byte, size)
	_, _ = io.ReadFull(testutil.Stream(42), want)
	if len(got) > size || !bytes.Equal(got, want[:len(got)]) {
		t.Fatalf("the application received %d bytes that are not a prefix of the stream (%s), then %v", len(got), mismatch(got, want), rerr)
	}
	t.Logf("application read %d bytes, then %v", len(got), rerr)
	if resumes {
		if rerr != nil || len(got) != size {
			t.Fatalf("truncated frame on a resumable session: read %d of %d bytes, ended with %v; want all, then EOF", len(got), size, rerr)
		}
		eventually(t, 5*time.Second, "the client to log the lost link, and the session to resume", func() bool {
			return len(loggedErrors(logs, "link lost; resuming the session", wantErr[mode])) > 0 && resumed(cli.ctr) == 1 && resumed(srv.ctr) == 1
		})
	} else {
		if rerr == nil || len(got) == size {
			t.Fatalf("tampered link: read %d of %d bytes, ended with %v; want an error before the end", len(got), size, rerr)
		}
		eventually(t, 5*time.Second, "the client to log the link failure", func() bool {
			return len(loggedErrors(logs, "link failed", wantErr[mode])) > 0
		})
		if n := resumed(cli.ctr) + resumed(srv.ctr); n != 0 {
			t.Errorf("a session resumed after %v (%d resumptions)", wantErr[mode], n)
		}
	}
	if mode != tamperTruncate {
		if cli.Stats().AuthFailures.Load()+srv.Stats().AuthFailures.Load() == 0 && wantErr[mode] == record.ErrAuth {
			t.Errorf("no auth failure counted")
		}
	}
	eventually(t, 10*time.Second, "the client to redial", func() bool { return px.count() >= 2 && cli.ctr.links.Load() == 1 })
	c2, err := net.Dial("tcp", addrs["src"])
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	h := sha256.New()
	if _, err := io.Copy(h, c2); err != nil {
		t.Fatalf("after redial: %v", err)
	}
	if !bytes.Equal(h.Sum(nil), sha256Of(want)) {
		t.Fatal("after redial: SHA-256 differs")
	}
}

func sha256Of(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// mismatch says where got first leaves want and where its bytes from
// there are found in want: at 0 they are a stream's start (another
// stream's bytes, or the stream opened again), elsewhere a duplicate or
// a gap; nowhere, bytes that were never sent (forged or corrupted).
func mismatch(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	probe := got[i:min(len(got), i+32)]
	where := "nowhere in the stream"
	if j := bytes.Index(want, probe); j >= 0 {
		where = fmt.Sprintf("at offset %d of the stream", j)
	}
	return fmt.Sprintf("the first wrong byte at %d; the %d bytes from there are %s", i, len(probe), where)
}

// TestMaxStreams: streams beyond the client's cap are refused at once.
func TestMaxStreams(t *testing.T) {
	testutil.LeakCheck(t)
	release := make(chan struct{})
	var once sync.Once
	tg := startTarget(t, func(c net.Conn) {
		_, _ = c.Write([]byte("x"))
		<-release
	})
	defer once.Do(func() { close(release) })
	log, _ := testutil.ObservedLogger(t)
	saddr, _, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"hold": tg.addr()}})
	opt := testOptions(log)
	opt.MaxStreams = 2
	addrs, _, _ := startClient(t, ClientConfig{Options: opt, Server: saddr}, "hold")
	for i := range 2 {
		c, err := net.Dial("tcp", addrs["hold"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if err := dialAndRead(addrs["hold"]); !isAbortive(err) {
		t.Fatalf("third stream ended with %v, want a reset", err)
	}
	once.Do(func() { close(release) })
}

// TestMismatch: the tamper tests' report tells another stream's bytes, a
// duplicate and forged bytes apart.
func TestMismatch(t *testing.T) {
	want := make([]byte, 1<<16)
	_, _ = io.ReadFull(testutil.Stream(42), want)
	forged := append(append([]byte{}, want[:1000]...), make([]byte, 64)...)
	for _, c := range []struct {
		got  []byte
		says string
	}{
		{append(append([]byte{}, want[:1000]...), want[:100]...), "the first wrong byte at 1000; the 32 bytes from there are at offset 0 of the stream"},
		{append(append([]byte{}, want[:1000]...), want[500:600]...), "the first wrong byte at 1000; the 32 bytes from there are at offset 500 of the stream"},
		{forged, "the first wrong byte at 1000; the 32 bytes from there are nowhere in the stream"},
	} {
		if s := mismatch(c.got, want); s != c.says {
			t.Errorf("mismatch says %q, want %q", s, c.says)
		}
	}
}
