package tunnel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/internal/testutil"
)

func testPSK(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

func testOptions(log *zap.Logger) Options {
	o := DefaultOptions()
	o.PSK = testPSK(7)
	o.DialTimeout, o.HandshakeTimeout = 2*time.Second, 2*time.Second
	// No keepalives, drain or status lines unless a test asks for them.
	o.Keepalive, o.DrainTimeout, o.StatusInterval = 0, 0, 0
	// Room for the 32 streams of TestEchoManyStreams at the default
	// window; TestAttackLinkBuffer tests the budget itself.
	o.LinkBuffer = 48 << 20
	o.Logger = log
	return o
}

// plainOptions are testOptions with resume_window 0: plain links, whose
// streams end with a reset when the link dies. The tests that pin that
// meaning use them, each with a twin that runs with sessions that outlive
// links (resumeOptions, the default).
func plainOptions(log *zap.Logger) Options {
	o := testOptions(log)
	o.ResumeWindow = 0
	return o
}

// running is a Server or Client running in a goroutine.
type running struct {
	once   sync.Once
	cancel context.CancelFunc
	done   chan error
}

// stop cancels and waits; it fails t if the run returned an error.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("did not stop within 30s")
		}
	})
}

func startServer(t *testing.T, cfg ServerConfig) (string, *Server, *running) {
	t.Helper()
	return startServerOn(t, testutil.Listen(t), cfg)
}

func startServerOn(t *testing.T, ln net.Listener, cfg ServerConfig) (string, *Server, *running) {
	t.Helper()
	return startServerTuned(t, ln, cfg, nil)
}

// startServerTuned is startServerOn with tune, if not nil, run on the
// server before it serves.
func startServerTuned(t *testing.T, ln net.Listener, cfg ServerConfig, tune func(*Server)) (string, *Server, *running) {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { r.stop(t) })
	return ln.Addr().String(), srv, r
}

// startClient starts a client with one forward per service and returns
// their local addresses by service.
func startClient(t *testing.T, cfg ClientConfig, services ...string) (map[string]string, *Client, *running) {
	t.Helper()
	return startClientTuned(t, cfg, nil, services...)
}

// startClientTuned is startClient with tune, if not nil, run on the
// client before it runs (a field set after Run began would race).
func startClientTuned(t *testing.T, cfg ClientConfig, tune func(*Client), services ...string) (map[string]string, *Client, *running) {
	t.Helper()
	addrs := map[string]string{}
	for _, s := range services {
		ln := testutil.Listen(t)
		cfg.Forwards = append(cfg.Forwards, Forward{Listener: ln, Service: s})
		addrs[s] = ln.Addr().String()
	}
	cli, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(cli)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- cli.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return addrs, cli, r
}

// target is a TCP server in the test: handle runs per connection.
type target struct {
	ln     net.Listener
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
	accept int
}

func startTarget(t *testing.T, handle func(net.Conn)) *target {
	t.Helper()
	return startTargetOn(t, testutil.Listen(t), handle)
}

// startTargetOn is startTarget on ln.
func startTargetOn(t *testing.T, ln net.Listener, handle func(net.Conn)) *target {
	t.Helper()
	tg := &target{ln: ln}
	tg.wg.Add(1)
	go func() {
		defer tg.wg.Done()
		for {
			c, err := tg.ln.Accept()
			if err != nil {
				return
			}
			tg.mu.Lock()
			tg.conns = append(tg.conns, c)
			tg.accept++
			tg.mu.Unlock()
			tg.wg.Add(1)
			go func() {
				defer tg.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = tg.ln.Close()
		tg.mu.Lock()
		for _, c := range tg.conns {
			_ = c.Close()
		}
		tg.mu.Unlock()
		tg.wg.Wait()
	})
	return tg
}

func (tg *target) addr() string { return tg.ln.Addr().String() }

func (tg *target) accepted() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.accept
}

// source writes n bytes of the stream testutil.Stream(seed) and closes.
func source(n int64, seed uint64) func(net.Conn) {
	return func(c net.Conn) {
		_, _ = io.Copy(c, io.LimitReader(testutil.Stream(seed), n))
	}
}

// dialT connects to addr over TCP, failing the test if it cannot; the
// connection is closed when the test ends.
func dialT(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eventuallyFloor is the least time eventually waits for an event.
const eventuallyFloor = 30 * time.Second

// isAbortive reports an error that is not a clean end of data.
func isAbortive(err error) bool { return err != nil && !errors.Is(err, io.EOF) }

// eventually polls cond every 10ms up to d, but never less than
// eventuallyFloor: d is what a quiet machine needs, and under -race beside
// a busy core an event came later (TestClientReload's retired link, past
// 5 s once). A longer bound only delays a failure.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	d = max(d, eventuallyFloor)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
