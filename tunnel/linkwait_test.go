package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/tunnel/internal/socks5"

	"github.com/offload-dev/offload/internal/testutil"
)

// failFastOptions has a DialTimeout far longer than any wait the test
// allows, so a connection held for it (as before fail fast) fails the
// test: it must be refused well within DialTimeout/2.
func failFastOptions(log *zap.Logger) Options {
	o := testOptions(log)
	o.DialTimeout = time.Minute
	o.HandshakeTimeout = time.Minute
	return o
}

// refusedSoon connects to addr and reports how long the connection lived
// until it was reset or closed with no data.
func refusedSoon(t *testing.T, addr string) time.Duration {
	t.Helper()
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return time.Since(start) // reset before connect returned
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read %d bytes, %v; want the connection refused", n, err)
	}
	return time.Since(start)
}

// waitLog waits until logs has a message msg, the event the test
// synchronises on.
func waitLog(t *testing.T, logs *observer.ObservedLogs, msg string) {
	t.Helper()
	eventually(t, time.Minute, msg, func() bool { return logs.FilterMessage(msg).Len() > 0 })
}

// With the server down, a wrong key or another suite, the client's dial
// fails; a connection to a forward is refused at once (within the link
// wait, far within DialTimeout) and the log says why.
func TestFailFastNoLink(t *testing.T) {
	testutil.LeakCheck(t)
	down := testutil.Listen(t)
	downAddr := down.Addr().String()
	_ = down.Close() // nothing listens: connection refused

	slog, _ := testutil.ObservedLogger(t)
	wrongKey, _, _ := startServer(t, ServerConfig{Options: func() Options {
		o := failFastOptions(slog)
		o.PSK = testPSK(9)
		return o
	}(), Services: map[string]string{"web": "127.0.0.1:1"}})

	for _, tc := range []struct {
		name, server, why string
	}{
		{"server down", downAddr, "connection refused"},
		{"wrong key", wrongKey, "handshake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clog, clogs := testutil.ObservedLogger(t)
			o := failFastOptions(clog)
			addrs, cli, _ := startClient(t, ClientConfig{Options: o, Server: tc.server, RedialMin: time.Minute, RedialMax: time.Minute}, "web")
			cli.refuseLog.Every = 0
			waitLog(t, clogs, "link failed; redialling")
			if d := refusedSoon(t, addrs["web"]); d >= o.DialTimeout/2 {
				t.Errorf("refused after %v, want well within DialTimeout %v", d, o.DialTimeout)
			}
			waitLog(t, clogs, "connection refused")
			e := clogs.FilterMessage("connection refused").All()[0]
			why := e.ContextMap()["error"].(string)
			if !strings.Contains(why, ErrLinkDown.Error()) || !strings.Contains(strings.ToLower(why), tc.why) {
				t.Errorf("logged %q; want the link down and %q", why, tc.why)
			}
		})
	}
}

// SOCKS answers "general failure" (REP 0x01) at once while there is no
// link.
func TestFailFastSocks(t *testing.T) {
	testutil.LeakCheck(t)
	down := testutil.Listen(t)
	downAddr := down.Addr().String()
	_ = down.Close()
	clog, clogs := testutil.ObservedLogger(t)
	o := failFastOptions(clog)
	ln := testutil.Listen(t)
	startClient(t, ClientConfig{Options: o, Server: downAddr, RedialMin: time.Minute, RedialMax: time.Minute, Socks: &Socks{Listener: ln}})
	waitLog(t, clogs, "link failed; redialling")
	start := time.Now()
	_, rep := socksDial(t, ln.Addr().String(), "", "", socksRequest("127.0.0.1", 80))
	if rep != socks5.ReplyFailure {
		t.Fatalf("reply %d, want general failure (%d)", rep, socks5.ReplyFailure)
	}
	if d := time.Since(start); d >= o.DialTimeout/2 {
		t.Errorf("answered after %v", d)
	}
}

// A connection that arrives while a dial is under way waits for it (up to
// LinkWait) and is carried once the link is up; with LinkWait 0 it is
// refused at once instead.
func TestFailFastWaitsForADialUnderWay(t *testing.T) {
	testutil.LeakCheck(t)
	slog, _ := testutil.ObservedLogger(t)
	tg := startTarget(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
	srvAddr, _, _ := startServer(t, ServerConfig{Options: testOptions(slog), Services: map[string]string{"echo": tg.addr()}})

	for _, tc := range []struct {
		name     string
		linkWait time.Duration
	}{{"waits", time.Minute}, {"at once", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			clog, _ := testutil.ObservedLogger(t)
			o := failFastOptions(clog)
			o.LinkWait = tc.linkWait
			dialing, release := make(chan struct{}), make(chan struct{})
			dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
				close(dialing)
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
			addrs, cli, _ := startClient(t, ClientConfig{Options: o, Server: srvAddr, Dial: dial}, "echo")
			<-dialing // the first dial is under way, and held
			if tc.linkWait == 0 {
				// The reset may come before connect returns.
				if d := refusedSoon(t, addrs["echo"]); d >= o.DialTimeout/2 {
					t.Errorf("refused after %v", d)
				}
				close(release)
				return
			}
			c, err := net.Dial("tcp", addrs["echo"])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			// The connection is accepted and waiting (or about to):
			// release the dial, and it goes through.
			eventually(t, time.Minute, "connection accepted", func() bool { return cli.ctr.active.Load() == 1 })
			close(release)
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo: %q, %v", buf, err)
			}
		})
	}
}
