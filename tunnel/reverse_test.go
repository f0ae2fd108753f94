package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/mux"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/stream"
)

// freePort is a TCP port free on host right now, drawn from below the
// ephemeral range (testutil.FreeAddr): one from listen(:0) was taken by
// another test's connection before the server bound it.
func freePort(t *testing.T, host string) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(testutil.FreePortOn(t, host))
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// dialEcho dials addr, sends a line and wants it back.
func dialEcho(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping\n" {
		return errors.New("echo mismatch: " + string(buf))
	}
	return nil
}

// TestReverse: a service on the client's side is reached through a
// listener on the server, over IPv4 and IPv6; the listener closes when the
// link goes and opens again when the client's next link comes up (with
// resume_window 0; TestReverseOutlivesLink is its twin).
func TestReverse(t *testing.T) {
	testutil.LeakCheck(t)
	for _, host := range []string{"127.0.0.1", "::1"} {
		t.Run(host, func(t *testing.T) {
			svc := echoOn(t, net.JoinHostPort(host, "0"))
			listen := net.JoinHostPort(host, strconv.Itoa(freePort(t, host)))
			slog, slogs := testutil.ObservedLogger(t)
			addr, _, _ := startServer(t, ServerConfig{Options: plainOptions(slog), Rules: mustRules(t, nil, nil, []string{listen})})
			prox := startProxy(t, addr, nil)
			clog, _ := testutil.ObservedLogger(t)
			startClient(t, ClientConfig{Options: plainOptions(clog), Server: prox.addr(), RedialMin: 50 * time.Millisecond, RedialMax: 200 * time.Millisecond,
				Reverse: []Reverse{{Listen: listen, Target: svc.addr()}}})
			eventually(t, 10*time.Second, "the reverse listener", func() bool { return dialEcho(listen) == nil })

			prox.sever()
			eventually(t, 10*time.Second, "the listener to close with the link and open on the next", func() bool {
				return slogs.FilterMessage("reverse forward closed").Len() >= 1 && slogs.FilterMessage("reverse forward listening").Len() >= 2
			})
			eventually(t, 10*time.Second, "the reverse listener again", func() bool { return dialEcho(listen) == nil })
			if n := svc.accepted(); n < 2 {
				t.Errorf("the service saw %d connections", n)
			}
		})
	}
}

// TestReverseOutlivesLink is TestReverse's twin with sessions that
// outlive links (resume_window 1m, the default): the reverse listener,
// like the session it belongs to, outlives the link; it is never closed
// nor registered again, and serves once the session resumed.
func TestReverseOutlivesLink(t *testing.T) {
	testutil.LeakCheck(t)
	svc := echoOn(t, "127.0.0.1:0")
	listen := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
	slog, slogs := testutil.ObservedLogger(t)
	addr, srv, _ := startServer(t, ServerConfig{Options: resumeOptions(slog), Rules: mustRules(t, nil, nil, []string{listen})})
	prox := startProxy(t, addr, nil)
	clog, _ := testutil.ObservedLogger(t)
	_, cli, _ := startClient(t, ClientConfig{Options: resumeOptions(clog), Server: prox.addr(), RedialMin: 50 * time.Millisecond, RedialMax: 200 * time.Millisecond,
		Reverse: []Reverse{{Listen: listen, Target: svc.addr()}}})
	eventually(t, 10*time.Second, "the reverse listener", func() bool { return dialEcho(listen) == nil })

	prox.sever()
	eventually(t, 10*time.Second, "the session resumed", func() bool { return resumed(cli.ctr) == 1 && resumed(srv.ctr) == 1 })
	if err := dialEcho(listen); err != nil {
		t.Fatalf("the reverse listener after the session resumed: %v", err)
	}
	if n := slogs.FilterMessage("reverse forward closed").Len(); n != 0 {
		t.Errorf("the listener closed %d times; the session, and its listener, outlive the link", n)
	}
	if n := slogs.FilterMessage("reverse forward listening").Len(); n != 1 {
		t.Errorf("the listener was opened %d times, want once", n)
	}
}

// TestReverseDenied: a listen address outside reverse_allow (another
// port, another loopback address) is refused, logged once on the server,
// never listened on; the client logs why.
func TestReverseDenied(t *testing.T) {
	testutil.LeakCheck(t)
	allowed := freePort(t, "127.0.0.1")
	slog, slogs := testutil.ObservedLogger(t)
	addr, srv, _ := startServer(t, ServerConfig{Options: testOptions(slog), Rules: mustRules(t, nil, nil, []string{"127.0.0.2/32:" + strconv.Itoa(allowed)})})
	srv.refuseLog.Every = 0
	clog, clogs := testutil.ObservedLogger(t)
	denied := []string{"127.0.0.3:" + strconv.Itoa(allowed), "127.0.0.2:" + strconv.Itoa(allowed+1), "[::1]:" + strconv.Itoa(allowed)}
	var rs []Reverse
	for _, d := range denied {
		rs = append(rs, Reverse{Listen: d, Target: "127.0.0.1:1"})
	}
	startClient(t, ClientConfig{Options: testOptions(clog), Server: addr, Reverse: rs})
	eventually(t, 10*time.Second, "three refusals", func() bool {
		return clogs.FilterMessage("reverse forward refused by the server").Len() == 3
	})
	for _, e := range clogs.FilterMessage("reverse forward refused by the server").All() {
		if !strings.Contains(e.ContextMap()["error"].(string), "not in the server's reverse_allow") {
			t.Errorf("client logged %v", e.ContextMap())
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := slogs.FilterMessage("stream refused").Len(); n != 3 {
		t.Errorf("server logged %d refusals, want 3", n)
	}
	for _, d := range denied {
		if c, err := net.DialTimeout("tcp", d, time.Second); err == nil {
			c.Close()
			t.Errorf("something listens on %s", d)
		}
	}
}

// TestReverseUnasked: a reverse-connect for an address the client did not
// ask for is refused by the client and dials nothing.
func TestReverseUnasked(t *testing.T) {
	testutil.LeakCheck(t)
	svc := canary(t, "127.0.0.1:0")
	listen := "127.0.0.1:" + strconv.Itoa(freePort(t, "127.0.0.1"))
	addr := "127.0.0.1:1" // never dialled: the client is not run
	clog, clogs := testutil.ObservedLogger(t)
	cli, err := NewClient(ClientConfig{Options: testOptions(clog), Server: addr, Reverse: []Reverse{{Listen: listen, Target: svc.addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	// Play the server: a yamux session whose other end the client serves.
	cp, sp := net.Pipe()
	csess, err := mux.Client(cp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer csess.Close()
	ssess, err := mux.Server(sp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ssess.Close()
	cl, err := ssess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	go func() {
		if st, err := csess.AcceptStream(); err == nil {
			cli.serveReverseConn(context.Background(), st)
		}
	}()
	req, _ := stream.AppendRequest(nil, stream.KindReverseConnect, "127.0.0.1:1")
	_, _ = cl.Write(req)
	err = stream.ReadResponse(cl)
	if !errors.Is(err, stream.ErrDenied) {
		t.Errorf("unasked reverse-connect: %v", err)
	}
	eventually(t, 5*time.Second, "the client's log", func() bool { return clogs.FilterMessage("connection refused").Len() == 1 })
	if svc.accepted() != 0 {
		t.Error("the client dialled")
	}
}
