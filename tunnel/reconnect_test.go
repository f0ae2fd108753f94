package tunnel

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/redial"
)

// switchedDial dials addr while on, and fails as a dead server's port
// does (connection refused) while off: a server that goes away and
// comes back at the same address, without racing for a port. It counts
// its dials and can cut the connections it made (a path that went).
type switchedDial struct {
	addr  string
	on    atomic.Bool
	dials atomic.Int64
	mu    sync.Mutex
	conns []net.Conn
}

func (s *switchedDial) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	s.dials.Add(1)
	if !s.on.Load() {
		return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, s.addr)
	if err == nil {
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
	}
	return c, err
}

// cut resets every connection s made.
func (s *switchedDial) cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	resetAll(s.conns)
	s.conns = nil
}

// switchedEcho starts a server with o that offers "echo", and a
// switchedDial to it, on.
func switchedEcho(t *testing.T, o Options) (*Server, *switchedDial) {
	t.Helper()
	tg := startTarget(t, testutil.Echo)
	saddr, srv, _ := startServer(t, ServerConfig{Options: o, Services: map[string]string{"echo": tg.addr()}})
	sw := &switchedDial{addr: saddr}
	sw.on.Store(true)
	return srv, sw
}

// redialDelays are the delays of the client's log lines msg ("in").
func redialDelays(logs *observer.ObservedLogs, msg string) []time.Duration {
	var out []time.Duration
	for _, e := range logs.FilterMessage(msg).All() {
		if d, ok := e.ContextMap()["in"].(time.Duration); ok {
			out = append(out, d)
		}
	}
	return out
}

// After a link, however briefly up, the first redial waits RedialMin and
// no later one more than redial.UpMax, with RedialMax an hour: a server killed
// and restarted is dialled again within redial.UpMax of its return, whatever the
// outage's length (issue 26). The test counts the delays the client
// scheduled, not the time it took. With resume_window 0: a session kept
// for resumption redials at once instead (TestRedialKeptSessionAtOnce).
func TestRedialAfterLinkIsCapped(t *testing.T) {
	testutil.LeakCheck(t)
	slog, _ := testutil.ObservedLogger(t)
	srv, sw := switchedEcho(t, plainOptions(slog))
	clog, clogs := testutil.ObservedLogger(t)
	const redialMin = 20 * time.Millisecond
	addrs, cli, _ := startClient(t, ClientConfig{Options: plainOptions(clog), Server: sw.addr, Dial: sw.dial,
		RedialMin: redialMin, RedialMax: time.Hour}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 1<<10, 1); err != nil {
		t.Fatal(err)
	}
	// The server "dies": its links close, and dials are refused.
	sw.on.Store(false)
	srv.closeLinks()
	// 12 failures: uncapped, the delay would reach 20ms·2^11 = 41 s.
	eventually(t, 2*time.Minute, "12 failed redials", func() bool { return len(redialDelays(clogs, "link failed; redialling")) >= 12 })
	if d := redialDelays(clogs, "redialling"); len(d) != 1 || d[0] != redialMin {
		t.Errorf("first redial after the link went down in %v; want %v", d, redialMin)
	}
	for i, d := range redialDelays(clogs, "link failed; redialling") {
		if d > redial.UpMax {
			t.Errorf("redial %d after the link: in %v, more than %v", i, d, redial.UpMax)
		}
	}
	sw.on.Store(true)
	eventually(t, 2*time.Minute, "the link back", func() bool { return cli.ctr.links.Load() == 1 })
	if err := testutil.EchoRoundTrip(addrs["echo"], 1<<10, 2); err != nil {
		t.Fatal(err)
	}
}

// A client whose next dial is an hour away (never linked, RedialMin =
// RedialMax = 1 h) serves a connection that arrives after the server
// came up: the waiting connection brings the dial forward.
func TestWaitingConnectionBringsDialForward(t *testing.T) {
	testutil.LeakCheck(t)
	slog, _ := testutil.ObservedLogger(t)
	tg := startTarget(t, testutil.Echo)
	saddr, _, _ := startServer(t, ServerConfig{Options: testOptions(slog), Services: map[string]string{"echo": tg.addr()}})
	sw := &switchedDial{addr: saddr}
	clog, clogs := testutil.ObservedLogger(t)
	o := testOptions(clog)
	o.LinkWait = time.Minute
	addrs, _, _ := startClient(t, ClientConfig{Options: o, Server: saddr, Dial: sw.dial, RedialMin: time.Hour, RedialMax: time.Hour}, "echo")
	waitLog(t, clogs, "link failed; redialling")
	if d := redialDelays(clogs, "link failed; redialling"); len(d) != 1 || d[0] != time.Hour {
		t.Fatalf("next dial in %v, want 1h", d)
	}
	sw.on.Store(true)
	c, err := net.Dial("tcp", addrs["echo"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through a dial brought forward: %q, %v", buf, err)
	}
}

// closeLinks closes every link of s, as a server killed would drop them.
func (s *Server) closeLinks() {
	s.mu.Lock()
	var ls []*link
	for l := range s.links {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		_ = l.sess.Close()
	}
}

// TestRedialKeptSessionAtOnce is TestRedialAfterLinkIsCapped's twin with
// sessions that outlive links (resume_window 1m, the default): with the
// backoff at an hour (RedialMin = RedialMax = 1 h), a client whose link
// died while its session waits redials at once and again while the dials
// fail, not after the backoff; once the path is back the session resumes
// and a stream opened before the outage carries on.
func TestRedialKeptSessionAtOnce(t *testing.T) {
	testutil.LeakCheck(t)
	slog, _ := testutil.ObservedLogger(t)
	srv, sw := switchedEcho(t, resumeOptions(slog))
	clog, clogs := testutil.ObservedLogger(t)
	addrs, cli, _ := startClient(t, ClientConfig{Options: resumeOptions(clog), Server: sw.addr, Dial: sw.dial,
		RedialMin: time.Hour, RedialMax: time.Hour}, "echo")
	c := streamAcross(t, addrs["echo"])
	// The path goes: the link is cut, dials are refused.
	sw.on.Store(false)
	dials := sw.dials.Load()
	sw.cut()
	eventually(t, time.Minute, "3 failed dials after the link went", func() bool { return sw.dials.Load() >= dials+3 })
	if d := redialDelays(clogs, "redialling"); len(d) != 0 {
		t.Errorf("the client scheduled redials after the backoff (%v): its session waits, it redials at once", d)
	}
	sw.on.Store(true)
	eventually(t, time.Minute, "the session resumed", func() bool { return resumed(cli.ctr) == 1 && resumed(srv.ctr) == 1 })
	if err := echoOnce(c, []byte("after the outage")); err != nil {
		t.Fatalf("the stream opened before the outage: %v", err)
	}
}
