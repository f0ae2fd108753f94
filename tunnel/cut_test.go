package tunnel

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/internal/netguard"

	"github.com/offload-dev/offload/internal/testutil"
)

// targetEnd is how one target connection ended: bytes read, then err
// (io.EOF for a clean end).
type targetEnd struct {
	n   int64
	err error
}

// recordingTarget reads each connection until it ends and reports how.
func recordingTarget(t *testing.T) (*target, chan targetEnd) {
	ends := make(chan targetEnd, 1024)
	tg := startTarget(t, func(c net.Conn) {
		var n int64
		buf := make([]byte, 32<<10)
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if err != nil {
				ends <- targetEnd{n, err}
				return
			}
		}
	})
	return tg, ends
}

// serveWithDialControl starts a server whose target dials run control
// between making the socket and connecting it: a test's hook into the
// moment after the server decided to dial.
func serveWithDialControl(t *testing.T, cfg ServerConfig, control func()) (string, *Server) {
	t.Helper()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.dialer.Control = func(string, string, syscall.RawConn) error {
		control()
		return nil
	}
	ln := testutil.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { r.stop(t) })
	return ln.Addr().String(), srv
}

// cutAtDial starts a server with o and a client with o through a proxy,
// forwarding "rec" to a recordingTarget (whose ends it returns). The
// server's first target dial severs the link and waits (30 s at most)
// until gone(server) says the server saw it go, then connects.
func cutAtDial(t *testing.T, o Options, gone func(*Server) bool) (map[string]string, *Server, *Client, chan targetEnd) {
	t.Helper()
	tg, ends := recordingTarget(t)
	var px *proxy
	var srv *Server
	var once sync.Once
	saddr, srv := serveWithDialControl(t, ServerConfig{Options: o, Services: map[string]string{"rec": tg.addr()}}, func() {
		once.Do(func() {
			px.sever()
			deadline := time.Now().Add(30 * time.Second)
			for !gone(srv) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		})
	})
	px = startProxy(t, saddr, nil)
	addrs, cli, _ := startClient(t, ClientConfig{Options: o, Server: px.addr(), RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "rec")
	return addrs, srv, cli, ends
}

// TestLinkCutAfterDial: the link dies while the server dials a target.
// The dial succeeds but the answer can't be sent; the target's connection
// must end with a reset, not a clean EOF after 0 bytes (issue 9, item 8).
// With resume_window 0; TestLinkCutAfterDialResumes is its twin.
func TestLinkCutAfterDial(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	addrs, _, _, ends := cutAtDial(t, plainOptions(log), func(srv *Server) bool { return srv.ctr.links.Load() == 0 })
	// The application's connection is reset as the link goes, which can
	// be before its write.
	if err := connEnd(t, addrs["rec"], []byte("hello")); !isAbortive(err) {
		t.Errorf("application: %v, want a reset", err)
	}
	select {
	case e := <-ends:
		if !isAbortive(e.err) {
			t.Fatalf("link cut after the dial: the target read %d bytes, then %v; want a reset", e.n, e.err)
		}
		t.Logf("target read %d bytes, then %v", e.n, e.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the target's connection did not end")
	}
}

// TestLinkCutUnderLoad cuts the link at random moments while streams are
// being opened, dialled and carrying data, with dials that take a random
// while. No stream is ever closed cleanly by the application, so every
// target connection, whenever it was dialled, must end with a reset: on
// plain links (resume_window 0), where the cut resets the streams, and on
// resumable sessions (the default), where they carry on until the
// application resets them.
func TestLinkCutUnderLoad(t *testing.T) {
	testutil.LeakCheck(t)
	for _, window := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprintf("resume_window=%v", window), func(t *testing.T) { linkCutUnderLoad(t, window) })
	}
}

func linkCutUnderLoad(t *testing.T, window time.Duration) {
	testutil.LeakCheck(t)
	o := func(log *zap.Logger) Options {
		o := testOptions(log)
		o.ResumeWindow = window
		return o
	}
	const (
		rounds  = 8
		streams = 16
	)
	tg, ends := recordingTarget(t)
	log, _ := testutil.ObservedLogger(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var rmu sync.Mutex
	jitter := func(max time.Duration) time.Duration {
		rmu.Lock()
		defer rmu.Unlock()
		return time.Duration(rng.Int64N(int64(max)))
	}
	saddr, _ := serveWithDialControl(t, ServerConfig{Options: o(log), Services: map[string]string{"rec": tg.addr()}}, func() {
		time.Sleep(jitter(3 * time.Millisecond))
	})
	px := startProxy(t, saddr, nil)
	addrs, cli, _ := startClient(t, ClientConfig{Options: o(log), Server: px.addr(), RedialMin: 5 * time.Millisecond, RedialMax: 20 * time.Millisecond}, "rec")

	seen := 0
	for round := range rounds {
		eventually(t, 10*time.Second, "the link", func() bool { return cli.ctr.links.Load() == 1 })
		var wg sync.WaitGroup
		conns := make([]net.Conn, streams)
		for i := range streams {
			// The client resets a connection it can't carry, which can
			// already fail the dial; such a stream never reaches a target.
			if c, err := net.Dial("tcp", addrs["rec"]); err == nil {
				conns[i] = c
				wg.Add(1)
				go func() {
					defer wg.Done()
					chunk := make([]byte, 1+i*97)
					for {
						if _, err := c.Write(chunk); err != nil {
							return
						}
						time.Sleep(time.Millisecond)
					}
				}()
			}
			if i == streams/2 {
				// Cut while the second half is still arriving.
				go func() {
					time.Sleep(jitter(4 * time.Millisecond))
					px.sever()
				}()
			}
		}
		// The application resets its connections, never ends them cleanly;
		// those the client carried on the next link are aborted that way.
		time.Sleep(20 * time.Millisecond)
		for _, c := range conns {
			if c != nil {
				netguard.Reset(c)
			}
		}
		wg.Wait()
		eventually(t, 10*time.Second, "every target connection to end", func() bool { return len(ends) == tg.accepted()-seen })
		for range tg.accepted() - seen {
			if e := <-ends; !isAbortive(e.err) {
				t.Errorf("round %d: a target connection read %d bytes, then %v; want a reset", round, e.n, e.err)
			}
		}
		seen = tg.accepted()
	}
	t.Logf("%d rounds, %d target connections, each ended with a reset", rounds, seen)
	if seen == 0 {
		t.Fatal("no stream reached the target: the test proved nothing")
	}
}

// TestLinkCutAfterDialResumes is TestLinkCutAfterDial's twin with sessions
// that outlive links (resume_window 1m, the default): the link dies while
// the server dials a target, and the server holds the session before the
// dial completes. The answer and the application's bytes go across the
// client's next link: the target reads them all and then a clean end, so
// does the application; nothing is reset.
func TestLinkCutAfterDialResumes(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	addrs, srv, cli, ends := cutAtDial(t, resumeOptions(log), func(srv *Server) bool {
		// Waiting, or already resumed (a resumption can be quicker than this poll).
		return len(srv.Status().Waiting) == 1 || resumed(srv.ctr) == 1
	})
	c, err := net.Dial("tcp", addrs["rec"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := []byte("hello across the cut")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case e := <-ends:
		if e.err != io.EOF || e.n != int64(len(msg)) {
			t.Fatalf("link cut after the dial: the target read %d bytes, then %v; want %d, then a clean end", e.n, e.err, len(msg))
		}
	case <-time.After(time.Minute):
		t.Fatal("the target's connection did not end")
	}
	if err := readErr(c); err != io.EOF {
		t.Errorf("application: %v, want a clean end", err)
	}
	eventually(t, 10*time.Second, "one resumption at each end", func() bool { return resumed(cli.ctr) == 1 && resumed(srv.ctr) == 1 })
}
