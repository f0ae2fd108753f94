package tunnel

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
)

// pair starts a server with services and a client forwarding to them.
func pair(t *testing.T, services map[string]string, forwards ...string) (map[string]string, *Server, *Client, *running, *running) {
	t.Helper()
	log, _ := testutil.ObservedLogger(t)
	saddr, srv, srun := startServer(t, ServerConfig{Options: testOptions(log), Services: services})
	addrs, cli, crun := startClient(t, ClientConfig{Options: testOptions(log), Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond}, forwards...)
	return addrs, srv, cli, srun, crun
}

func TestEchoManyStreams(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	addrs, srv, cli, _, _ := pair(t, map[string]string{"echo": echoT.addr()}, "echo")

	const streams = 32
	maxSize := int64(512 << 10)
	if testing.Short() {
		maxSize = 64 << 10
	}
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	var total int64
	for i := range streams {
		n := rand.Int64N(maxSize) + 1
		if i == 0 {
			n = 0 // an empty transfer is a transfer too
		}
		total += n
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := testutil.EchoRoundTrip(addrs["echo"], n, uint64(i)); err != nil {
				errs <- fmt.Errorf("stream %d (%d bytes): %w", i, n, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	eventually(t, 5*time.Second, "both ends to count the clean streams", func() bool {
		return srv.ctr.streams[streamOK].Load() == streams && cli.ctr.streams[streamOK].Load() == streams
	})
	enc := cli.Stats().Bytes[0][0].Load()
	if enc < uint64(total) {
		t.Errorf("client encrypted %d bytes, sent %d", enc, total)
	}
	t.Logf("%d streams, %d bytes each way", streams, total)
}

// TestHalfClose: the target answers only after the client's EOF, and the
// client can still read after its CloseWrite.
func TestHalfClose(t *testing.T) {
	testutil.LeakCheck(t)
	tg := startTarget(t, func(c net.Conn) {
		b, err := io.ReadAll(c)
		if err != nil {
			return
		}
		_, _ = fmt.Fprintf(c, "got %d bytes", len(b))
	})
	addrs, _, _, _, _ := pair(t, map[string]string{"count": tg.addr()}, "count")
	c, err := net.Dial("tcp", addrs["count"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "got 100000 bytes" {
		t.Fatalf("got %q, %v", b, err)
	}
}

// readErr reads c to its end and returns how it ended.
func readErr(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	if err == nil {
		return io.EOF
	}
	return err
}

// writeReadErr writes b to c, then reads c to its end, and returns how the
// connection ended. A reset that arrives before the write is reported to
// the write (Linux hands a socket's error to the first call that asks),
// and the read after it sees a plain EOF; so the write's error comes first.
func writeReadErr(c net.Conn, b []byte) error {
	if _, err := c.Write(b); err != nil {
		return err
	}
	return readErr(c)
}

// connEnd dials addr, writes b and reads to the end, and returns how the
// connection ended. A reset that answers the connection at once can come
// before the dial has seen its own connection complete, before the write
// or after it: each is the end. Any other dial error fails t.
func connEnd(t *testing.T, addr string, b []byte) error {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return err
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return writeReadErr(c, b)
}

func TestUnknownServiceRefused(t *testing.T) {
	testutil.LeakCheck(t)
	tg := startTarget(t, testutil.Echo)
	addrs, srv, cli, _, _ := pair(t, map[string]string{"echo": tg.addr()}, "nope")
	if err := dialAndRead(addrs["nope"]); !isAbortive(err) {
		t.Fatalf("local connection to an unknown service ended with %v, want a reset", err)
	}
	if n := srv.ctr.streams[streamRefused].Load(); n != 1 {
		t.Errorf("server refused %d streams, want 1", n)
	}
	eventually(t, 5*time.Second, "client to count the refusal", func() bool { return cli.ctr.streams[streamRefused].Load() == 1 })
	if tg.accepted() != 0 {
		t.Errorf("target was dialled")
	}
}

// TestNoOpenProxy: a client asking for addresses as service names reaches
// nothing; only the named service is dialled.
func TestNoOpenProxy(t *testing.T) {
	testutil.LeakCheck(t)
	canary := startTarget(t, testutil.Echo) // a live target the server must never dial
	tg := startTarget(t, testutil.Echo)
	_, port, _ := net.SplitHostPort(canary.addr())
	names := []string{canary.addr(), "localhost:" + port, "[::1]:" + port, "tcp://" + canary.addr(), ":" + port, port, "echo\x00" + canary.addr(), "ECHO", "echo "}
	addrs, srv, _, _, _ := pair(t, map[string]string{"echo": tg.addr()}, append(names, "echo")...)
	for _, name := range names {
		if err := dialAndRead(addrs[name]); !isAbortive(err) {
			t.Errorf("service %q: ended with %v, want a reset", name, err)
		}
	}
	if err := testutil.EchoRoundTrip(addrs["echo"], 1000, 1); err != nil {
		t.Fatalf("the real service: %v", err)
	}
	if n := canary.accepted(); n != 0 {
		t.Fatalf("the server dialled a target not in its services %d times", n)
	}
	if n := srv.ctr.streams[streamRefused].Load(); n != uint64(len(names)) {
		t.Errorf("server refused %d streams, want %d", n, len(names))
	}
}

func TestDialFailedRefused(t *testing.T) {
	testutil.LeakCheck(t)
	ln := testutil.Listen(t)
	dead := ln.Addr().String()
	ln.Close()
	addrs, srv, _, _, _ := pair(t, map[string]string{"dead": dead}, "dead")
	if err := dialAndRead(addrs["dead"]); !isAbortive(err) {
		t.Fatalf("ended with %v, want a reset", err)
	}
	if n := srv.ctr.streams[streamRefused].Load(); n != 1 {
		t.Errorf("server refused %d streams, want 1", n)
	}
}

// TestTargetResetPropagates: a target that resets mid-transfer makes the
// client's application see an error, not a short clean transfer; an
// application that resets makes the target see one.
func TestTargetResetPropagates(t *testing.T) {
	testutil.LeakCheck(t)
	tg := startTarget(t, func(c net.Conn) {
		_, _ = c.Write(make([]byte, 50000))
		netguard.Reset(c)
	})
	gotErr := make(chan error, 1)
	sink := startTarget(t, func(c net.Conn) { gotErr <- readErr(c) })
	addrs, _, _, _, _ := pair(t, map[string]string{"reset": tg.addr(), "sink": sink.addr()}, "reset", "sink")

	if err := dialAndRead(addrs["reset"]); !isAbortive(err) {
		t.Fatalf("target reset, application saw %v", err)
	}

	c2, err := net.Dial("tcp", addrs["sink"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Write(make([]byte, 50000)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	netguard.Reset(c2)
	select {
	case err := <-gotErr:
		if !isAbortive(err) {
			t.Fatalf("application reset, target saw %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("target saw nothing")
	}
}

// TestLinkDeathAbortsStreams: with resume_window 0, when the link dies,
// the open streams end with an error at both ends (the application and
// the target), never a clean EOF; the client redials and new streams
// work. TestLinkDeathPausesStreams is its twin with resumption.
func TestLinkDeathAbortsStreams(t *testing.T) {
	testutil.LeakCheck(t)
	targetErr := make(chan error, 8)
	tg := startTarget(t, func(c net.Conn) {
		// Send something, then keep the stream open: read until it ends.
		_, _ = c.Write([]byte("hello"))
		targetErr <- readErr(c)
	})
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	saddr, _, _ := startServer(t, ServerConfig{Options: plainOptions(log), Services: map[string]string{"hold": tg.addr(), "echo": echoT.addr()}})
	px := startProxy(t, saddr, nil)
	addrs, cli, _ := startClient(t, ClientConfig{Options: plainOptions(log), Server: px.addr(), RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "hold", "echo")

	const n = 4
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", addrs["hold"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		b := make([]byte, 5)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	px.sever()
	for i, c := range conns {
		if err := readErr(c); !isAbortive(err) {
			t.Errorf("application conn %d: link died, read ended with %v, want an error", i, err)
		}
	}
	for i := range n {
		select {
		case err := <-targetErr:
			if !isAbortive(err) {
				t.Errorf("target conn %d: link died, read ended with %v, want an error", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("target conns did not end")
		}
	}
	eventually(t, 10*time.Second, "the client to redial", func() bool { return px.count() >= 2 && cli.ctr.links.Load() == 1 })
	if err := testutil.EchoRoundTrip(addrs["echo"], 100000, 2); err != nil {
		t.Fatalf("after redial: %v", err)
	}
	if logs.FilterMessage("link up").Len() < 2 {
		t.Errorf("expected two 'link up' logs")
	}
	eventually(t, 5*time.Second, "the client to count the aborted streams", func() bool { return cli.ctr.streams[streamAborted].Load() == n })
}

// TestLinkDownRefuses: with no server, and redials due within the link
// wait, a local connection waits out the link wait and is then reset
// (linkwait_test.go has the cases that reset at once).
func TestLinkDownRefuses(t *testing.T) {
	testutil.LeakCheck(t)
	ln := testutil.Listen(t)
	dead := ln.Addr().String()
	ln.Close()
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.LinkWait = 300 * time.Millisecond
	addrs, cli, _ := startClient(t, ClientConfig{Options: opt, Server: dead, RedialMin: 50 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "x")
	c, err := net.Dial("tcp", addrs["x"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if err := readErr(c); !isAbortive(err) {
		t.Fatalf("ended with %v, want a reset", err)
	}
	// It gives up once a retry would come after the wait: not before
	// link wait - redial max (200ms).
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Errorf("refused after %v, want about the link wait (300ms)", d)
	}
	if cli.ctr.redials.Load() == 0 {
		t.Errorf("no redials counted")
	}
}

// TestLocalConnWaitsForLink: a connection that arrives while the link is
// down, with redials due, is carried once it comes up (within the link
// wait).
func TestLocalConnWaitsForLink(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	ln := testutil.Listen(t)
	saddr := ln.Addr().String()
	ln.Close()
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.LinkWait = 5 * time.Second
	addrs, _, _ := startClient(t, ClientConfig{Options: opt, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 50 * time.Millisecond}, "echo")
	errc := make(chan error, 1)
	go func() { errc <- testutil.EchoRoundTrip(addrs["echo"], 10000, 3) }()
	time.Sleep(200 * time.Millisecond)
	ln2, err := net.Listen("tcp", saddr)
	if err != nil {
		t.Skipf("could not listen on %s again: %v", saddr, err)
	}
	startServerOn(t, ln2, ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echoT.addr()}})
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestDrain: on shutdown, open streams may finish within the drain
// timeout; what is still open after it is reset.
func TestDrain(t *testing.T) {
	testutil.LeakCheck(t)
	release := make(chan struct{})
	tg := startTarget(t, func(c net.Conn) {
		_, _ = c.Write([]byte("x"))
		<-release
		_, _ = c.Write([]byte("done"))
	})
	stuck := startTarget(t, func(c net.Conn) {
		_, _ = c.Write([]byte("x"))
		_ = readErr(c)
	})
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.DrainTimeout = 2 * time.Second
	saddr, _, srun := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"slow": tg.addr(), "stuck": stuck.addr()}})
	addrs, _, _ := startClient(t, ClientConfig{Options: testOptions(log), Server: saddr}, "slow", "stuck")

	open := func(name string) net.Conn {
		c, err := net.Dial("tcp", addrs[name])
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatal(err)
		}
		return c
	}
	slow, st := open("slow"), open("stuck")
	defer slow.Close()
	defer st.Close()
	stopped := make(chan struct{})
	go func() { srun.stop(t); close(stopped) }()
	time.Sleep(300 * time.Millisecond)
	close(release)
	b, err := io.ReadAll(slow)
	if err != nil || string(b) != "done" {
		t.Fatalf("draining stream: got %q, %v; want a clean \"done\"", b, err)
	}
	if err := readErr(st); !isAbortive(err) {
		t.Fatalf("stream open past the drain timeout ended with %v, want a reset", err)
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop")
	}
}

func TestNewServerRejects(t *testing.T) {
	testutil.LeakCheck(t)
	log := zap.NewNop()
	good := testOptions(log)
	for name, cfg := range map[string]ServerConfig{
		"no services": {Options: good},
		"short psk":   {Options: func() Options { o := good; o.PSK = []byte("short"); return o }(), Services: map[string]string{"a": "127.0.0.1:1"}},
		"bad frame":   {Options: func() Options { o := good; o.MaxFrame = 1000; return o }(), Services: map[string]string{"a": "127.0.0.1:1"}},
		"bad target":  {Options: good, Services: map[string]string{"a": "nohost"}},
		// The peer's ping limit (tunnel/mux) would cut a link that pings this often.
		"keepalive 50ms": {Options: func() Options { o := good; o.Keepalive = 50 * time.Millisecond; return o }(), Services: map[string]string{"a": "127.0.0.1:1"}},
		// ECB is for measuring engines only: it must never carry a link.
		"ecb suite": {Options: func() Options {
			o := good
			o.Suite.Cipher = engine.Cipher{Mode: engine.ECB, KeyBits: 256}
			return o
		}(), Services: map[string]string{"a": "127.0.0.1:1"}},
	} {
		if _, err := NewServer(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
}

// TestLinkDeathPausesStreams is TestLinkDeathAbortsStreams' twin with
// sessions that outlive links (resume_window 1m, the default): the link
// dies while open streams carry data both ways; each carries on on the
// client's next link with no byte lost or repeated (each echoes its own
// 4 MiB back whole), no application or target sees an end, and no stream
// is counted aborted.
func TestLinkDeathPausesStreams(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, _ := testutil.ObservedLogger(t)
	saddr, srv, _ := startServer(t, ServerConfig{Options: resumeOptions(log), Services: map[string]string{"echo": echoT.addr()}})
	px := startProxy(t, saddr, nil)
	addrs, cli, _ := startClient(t, ClientConfig{Options: resumeOptions(log), Server: px.addr(), RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo")

	const n, size = 4, 4 << 20
	var first, wg sync.WaitGroup // first: each stream read its first quarter back
	cut := make(chan struct{})
	errs := make(chan error, 2*n)
	first.Add(n)
	for i := range n {
		c, err := net.Dial("tcp", addrs["echo"])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := io.Copy(c, io.LimitReader(testutil.Stream(uint64(i)), size)); err != nil {
				errs <- fmt.Errorf("stream %d: write: %w", i, err)
			}
		}()
		go func() {
			defer wg.Done()
			want := make([]byte, size)
			_, _ = io.ReadFull(testutil.Stream(uint64(i)), want)
			got := make([]byte, size)
			_, err := io.ReadFull(c, got[:size/4])
			first.Done()
			if err == nil {
				<-cut // the rest comes across the cut
				_, err = io.ReadFull(c, got[size/4:])
			}
			switch {
			case err != nil:
				errs <- fmt.Errorf("stream %d: read: %w", i, err)
			case !bytes.Equal(got, want):
				errs <- fmt.Errorf("stream %d: %s", i, mismatch(got, want))
			}
		}()
	}
	first.Wait()
	px.sever()
	close(cut)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	eventually(t, 10*time.Second, "the session resumed at both ends, on a new link", func() bool {
		return resumed(cli.ctr) >= 1 && resumed(srv.ctr) >= 1 && px.count() >= 2
	})
	if n := cli.ctr.streams[streamAborted].Load(); n != 0 {
		t.Errorf("%d streams aborted", n)
	}
}
