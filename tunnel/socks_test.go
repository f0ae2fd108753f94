package tunnel

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/tunnel/internal/socks5"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/stream"
)

// listenOn listens on addr (a loopback address with port 0), or skips if
// this host has no such address (an IPv6-less container).
func listenOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if strings.Contains(addr, "::1") {
			t.Skipf("no IPv6 loopback here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// echoOn is an echo target on addr.
func echoOn(t *testing.T, addr string) *target {
	t.Helper()
	return startTargetOn(t, listenOn(t, addr), func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// canary is a listener that must never be connected to.
func canary(t *testing.T, addr string) *target {
	t.Helper()
	return echoOn(t, addr)
}

type socksEnv struct {
	socks      string
	cli        *Client
	srv        *Server
	clientLogs *observer.ObservedLogs
	serverLogs *observer.ObservedLogs
}

// startSocks starts a server with rules and a client whose SOCKS listener
// is on listenAddr (port 0).
func startSocks(t *testing.T, listenAddr string, rules *Rules, users map[string]string) socksEnv {
	t.Helper()
	return startSocksDial(t, listenAddr, rules, users, testOptions(nil).DialTimeout)
}

// startSocksDial is startSocks with both ends' DialTimeout, which also
// bounds a SOCKS negotiation and the wait for the server's answer.
func startSocksDial(t *testing.T, listenAddr string, rules *Rules, users map[string]string, dialTimeout time.Duration) socksEnv {
	t.Helper()
	slog, slogs := testutil.ObservedLogger(t)
	sopt := testOptions(slog)
	sopt.DialTimeout = dialTimeout
	// Every refusal logged, so that the test can count them.
	addr, srv, _ := startServerTuned(t, testutil.Listen(t), ServerConfig{Options: sopt, Rules: rules}, func(s *Server) { s.refuseLog.Every = 0 })
	clog, clogs := testutil.ObservedLogger(t)
	copt := testOptions(clog)
	copt.DialTimeout = dialTimeout
	ln := listenOn(t, listenAddr)
	_, cli, _ := startClientTuned(t, ClientConfig{Options: copt, Server: addr, Socks: &Socks{Listener: ln, Users: users}}, func(c *Client) { c.refuseLog.Every = 0 })
	// The link first: a test's connections (200 curls at once) must not
	// starve the first handshake of CPU and find no link (seen under -race
	// beside a busy core: the handshake timed out, 71 curls refused).
	eventually(t, 30*time.Second, "the SOCKS client's link", func() bool { return cli.ctr.links.Load() == 1 })
	return socksEnv{socks: ln.Addr().String(), cli: cli, srv: srv, clientLogs: clogs, serverLogs: slogs}
}

func mustRules(t *testing.T, socks []string, udp map[string]string, reverse []string) *Rules {
	t.Helper()
	r, err := NewRules(socks, udp, reverse)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// socksRequest is a CONNECT request for host (an IP literal or a name).
func socksRequest(host string, port int) []byte {
	b := []byte{5, socks5.CmdConnect, 0}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Is4() {
			b = append(append(b, socks5.AtypIPv4), a.AsSlice()...)
		} else {
			b = append(append(b, socks5.AtypIPv6), a.AsSlice()...)
		}
	} else {
		b = append(append(b, socks5.AtypDomain, byte(len(host))), host...)
	}
	return binary.BigEndian.AppendUint16(b, uint16(port))
}

// socksDial runs a SOCKS5 exchange by hand: greeting (no auth, or user
// and password), then req. It returns the connection and the reply code,
// or -1 if the proxy closed before replying.
func socksDial(t *testing.T, proxy string, user, pass string, req []byte) (net.Conn, int) {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	method := byte(socks5.MethodNoAuth)
	if user != "" {
		method = socks5.MethodUserPass
	}
	if _, err := c.Write([]byte{5, 1, method}); err != nil {
		t.Fatal(err)
	}
	var buf [10]byte
	if _, err := io.ReadFull(c, buf[:2]); err != nil || buf[1] != method {
		return c, -1
	}
	if user != "" {
		a := append([]byte{1, byte(len(user))}, user...)
		a = append(append(a, byte(len(pass))), pass...)
		_, _ = c.Write(a)
		if _, err := io.ReadFull(c, buf[:2]); err != nil || buf[1] != 0 {
			return c, -1
		}
	}
	if _, err := c.Write(req); err != nil {
		return c, -1
	}
	if _, err := io.ReadFull(c, buf[:10]); err != nil {
		return c, -1
	}
	if buf[0] != 5 {
		t.Fatalf("reply version %d", buf[0])
	}
	return c, int(buf[1])
}

func echoThrough(t *testing.T, c net.Conn) {
	t.Helper()
	msg := []byte("hello through socks")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo: %q, %v", got, err)
	}
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, _ := net.SplitHostPort(addr)
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSocksConnect: IPv4, IPv6 and a name resolved on the server reach
// allowed targets, with and without username/password.
func TestSocksConnect(t *testing.T) {
	testutil.LeakCheck(t)
	v4 := echoOn(t, "127.0.0.2:0")
	v6 := echoOn(t, "[::1]:0")
	lo := echoOn(t, "127.0.0.1:0")
	rules := mustRules(t, []string{"127.0.0.2/32", "[::1]:" + strconv.Itoa(port(t, v6.addr())), "127.0.0.0/8:" + strconv.Itoa(port(t, lo.addr()))}, nil, nil)
	for _, users := range []map[string]string{nil, {"alice": "s3cret"}} {
		env := startSocks(t, "127.0.0.1:0", rules, users)
		user, pass := "", ""
		if users != nil {
			user, pass = "alice", "s3cret"
		}
		for _, dest := range []struct {
			host string
			tg   *target
		}{{"127.0.0.2", v4}, {"::1", v6}, {"localhost", lo}} {
			c, rep := socksDial(t, env.socks, user, pass, socksRequest(dest.host, port(t, dest.tg.addr())))
			if rep != socks5.ReplySucceeded {
				t.Fatalf("users %v, %s: reply %d", users, dest.host, rep)
			}
			echoThrough(t, c)
			c.Close()
		}
	}
}

// TestAttackSocksHostile: every request the client may not make is refused with
// the right reply and a logged reason; those that reach the server are
// logged there once; no canary (a denied destination) is ever dialled.
func TestAttackSocksHostile(t *testing.T) {
	testutil.LeakCheck(t)
	denied4 := canary(t, "127.0.0.3:0")
	allowed6 := echoOn(t, "[::1]:0")
	denied6 := canary(t, "[::1]:0")
	rebind := canary(t, "127.0.0.1:0")
	rules := mustRules(t, []string{
		"127.0.0.2/32",
		"[::1]:" + strconv.Itoa(port(t, allowed6.addr())),
		"localhost:*",    // a name rule: its loopback addresses stay denied
		"0.0.0.0/32:*",   // no rule makes the unspecified address dialable
		"127.0.0.1/32:1", // nothing listens: refused
	}, nil, nil)
	env := startSocks(t, "[::1]:0", rules, map[string]string{"alice": "s3cret"})
	raw := func(b ...[]byte) net.Conn {
		c, err := net.Dial("tcp", env.socks)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		for _, p := range b {
			_, _ = c.Write(p)
		}
		_ = c.(*net.TCPConn).CloseWrite()
		return c
	}
	readAll := func(c net.Conn) []byte {
		b, _ := io.ReadAll(c)
		return b
	}
	auth := []byte{5, 1, socks5.MethodUserPass}
	login := append(append([]byte{1, 5}, "alice"...), append([]byte{6}, "s3cret"...)...)
	ok := []byte{5, 2, 1, 0, 1, 0}
	reply := func(code byte) []byte { return []byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0} }
	long := strings.Repeat("a", 255)

	for _, tc := range []struct {
		name   string
		send   [][]byte
		want   []byte // everything the proxy sends back before it closes
		reason string // in the client's log
		server bool   // the request reaches the server (logged there once)
	}{
		{"socks4", [][]byte{{4, 1, 0, 80, 127, 0, 0, 2, 0}}, nil, "version 4 (want 5)", false},
		{"no auth offered", [][]byte{{5, 1, socks5.MethodNoAuth}}, []byte{5, 0xff}, "no acceptable authentication method", false},
		{"wrong password", [][]byte{auth, append(append([]byte{1, 5}, "alice"...), append([]byte{5}, "wrong"...)...)}, []byte{5, 2, 1, 1}, `authentication failed for user "alice"`, false},
		{"unknown user", [][]byte{auth, append(append([]byte{1, 3}, "bob"...), append([]byte{6}, "s3cret"...)...)}, []byte{5, 2, 1, 1}, `authentication failed for user "bob"`, false},
		{"bind", [][]byte{auth, login, {5, socks5.CmdBind, 0, 1, 127, 0, 0, 2, 0, 80}}, append(ok[:4:4], reply(socks5.ReplyCmdNotSupported)...), "BIND is not supported", false},
		{"udp associate", [][]byte{auth, login, {5, socks5.CmdUDPAssociate, 0, 1, 127, 0, 0, 2, 0, 80}}, append(ok[:4:4], reply(socks5.ReplyCmdNotSupported)...), "UDP ASSOCIATE is not supported", false},
		{"truncated", [][]byte{auth, login, {5, 1, 0, 1, 127, 0}}, append(ok[:4:4], reply(socks5.ReplyFailure)...), "truncated address", false},
		{"truncated name", [][]byte{auth, login, {5, 1, 0, 3, 20, 'l', 'o'}}, append(ok[:4:4], reply(socks5.ReplyFailure)...), "truncated name of 20 bytes", false},
		{"oversize name", [][]byte{auth, login, append(append([]byte{5, 1, 0, 3, 255}, long...), 0, 80)}, append(ok[:4:4], reply(socks5.ReplyHostUnreachable)...), "name of 255 characters", false},
		{"bad name", [][]byte{auth, login, socksRequest("a b", 80)}, append(ok[:4:4], reply(socks5.ReplyHostUnreachable)...), "has the character", false},
		{"address type", [][]byte{auth, login, {5, 1, 0, 5, 1, 2, 3, 4, 0, 80}}, append(ok[:4:4], reply(socks5.ReplyAtypNotSupported)...), "address type 5", false},
		{"denied v4", [][]byte{auth, login, socksRequest("127.0.0.3", port(t, denied4.addr()))}, append(ok[:4:4], reply(socks5.ReplyNotAllowed)...), "not in the server's socks_allow", true},
		{"denied v6", [][]byte{auth, login, socksRequest("::1", port(t, denied6.addr()))}, append(ok[:4:4], reply(socks5.ReplyNotAllowed)...), "not in the server's socks_allow", true},
		{"rebinding", [][]byte{auth, login, socksRequest("localhost", port(t, rebind.addr()))}, append(ok[:4:4], reply(socks5.ReplyNotAllowed)...), "not in the server's socks_allow", true},
		{"unspecified", [][]byte{auth, login, socksRequest("0.0.0.0", port(t, rebind.addr()))}, append(ok[:4:4], reply(socks5.ReplyNotAllowed)...), "not in the server's socks_allow", true},
		{"refused", [][]byte{auth, login, socksRequest("127.0.0.1", 1)}, append(ok[:4:4], reply(socks5.ReplyConnRefused)...), "connection refused", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cBefore := env.clientLogs.FilterMessage("connection refused").Len()
			sBefore := env.serverLogs.FilterMessage("stream refused").Len()
			got := readAll(raw(tc.send...))
			if !bytes.Equal(got, tc.want) {
				t.Errorf("proxy answered % x, want % x", got, tc.want)
			}
			var reasons []string
			eventually(t, 5*time.Second, "the client's log line", func() bool {
				return env.clientLogs.FilterMessage("connection refused").Len() > cBefore
			})
			entries := env.clientLogs.FilterMessage("connection refused").All()[cBefore:]
			for _, e := range entries {
				reasons = append(reasons, e.ContextMap()["error"].(string))
			}
			if len(reasons) != 1 || !strings.Contains(reasons[0], tc.reason) {
				t.Errorf("client logged %q, want once %q", reasons, tc.reason)
			}
			wantServer := 0
			if tc.server {
				wantServer = 1
			}
			if n := env.serverLogs.FilterMessage("stream refused").Len() - sBefore; n != wantServer {
				t.Errorf("server logged %d refusals, want %d", n, wantServer)
			}
		})
	}
	for _, c := range []*target{denied4, denied6, rebind} {
		if n := c.accepted(); n != 0 {
			t.Errorf("canary %s was dialled %d times", c.addr(), n)
		}
	}
	// The allowed destination still works after all that.
	c, rep := socksDial(t, env.socks, "alice", "s3cret", socksRequest("::1", port(t, allowed6.addr())))
	if rep != socks5.ReplySucceeded {
		t.Fatalf("allowed: reply %d", rep)
	}
	echoThrough(t, c)
}

// TestSocksCurl: curl --socks5-hostname through the client, by name, IPv4
// and IPv6, with a password, and a denied destination.
func TestSocksCurl(t *testing.T) {
	curl := needTool(t, "curl", "curl")
	testutil.LeakCheck(t)
	httpOn := func(addr string) *target {
		return startTargetOn(t, listenOn(t, addr), func(c net.Conn) {
			buf := make([]byte, 4096)
			n, _ := c.Read(buf)
			host := "?"
			for _, l := range strings.Split(string(buf[:n]), "\r\n") {
				if h, ok := strings.CutPrefix(l, "Host: "); ok {
					host = h
				}
			}
			body := "hello " + host + "\n"
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\nConnection: close\r\n\r\n"+body)
		})
	}
	v4 := httpOn("127.0.0.1:0")
	v6 := httpOn("[::1]:0")
	denied := canary(t, "127.0.0.3:0")
	p4, p6 := strconv.Itoa(port(t, v4.addr())), strconv.Itoa(port(t, v6.addr()))
	rules := mustRules(t, []string{"127.0.0.1/32:" + p4, "[::1/128]:" + p6}, nil, nil)
	for i, users := range []map[string]string{nil, {"alice": "pa:ss"}} {
		// The proxy itself on IPv4, then on IPv6.
		env := startSocks(t, []string{"127.0.0.1:0", "[::1]:0"}[i], rules, users)
		proxy := "socks5h://" + env.socks
		if users != nil {
			proxy = "socks5h://alice:pa%3Ass@" + env.socks
		}
		for _, url := range []string{"http://localhost:" + p4 + "/", "http://127.0.0.1:" + p4 + "/", "http://[::1]:" + p6 + "/"} {
			out, err := exec.Command(curl, "-sS", "--max-time", "10", "--socks5-basic", "--proxy", proxy, url).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "hello ") {
				t.Errorf("curl %s via %s: %v: %s", url, proxy, err, out)
			}
		}
		out, err := exec.Command(curl, "-sS", "--max-time", "10", "--socks5-hostname", env.socks, "http://127.0.0.3:"+strconv.Itoa(port(t, denied.addr()))+"/").CombinedOutput()
		var ee *exec.ExitError
		if users == nil && (!errors.As(err, &ee) || ee.ExitCode() != 97 || !strings.Contains(string(out), "(2)")) {
			t.Errorf("curl to a denied destination: %v: %s", err, out)
		}
	}
	if denied.accepted() != 0 {
		t.Errorf("denied destination dialled")
	}
}

// TestServerRulesDirect: a client that skips its own checks and sends
// requests straight onto the link gets the same refusals from the server,
// which dials nothing it does not allow.
func TestServerRulesDirect(t *testing.T) {
	testutil.LeakCheck(t)
	denied := canary(t, "127.0.0.3:0")
	slog, _ := testutil.ObservedLogger(t)
	addr, _, _ := startServer(t, ServerConfig{Options: testOptions(slog), Rules: mustRules(t, []string{"127.0.0.2/32"}, nil, []string{"127.0.0.2:9"})})
	opt := testOptions(slog)
	_ = opt.setDefaults()
	_, sess := genuineLink(t, addr, opt)
	for _, tc := range []struct {
		name string
		kind byte
		arg  string
		want error
	}{
		{"denied address", stream.KindSocks, stream.SocksArg("127.0.0.3", uint16(port(t, denied.addr()))), stream.ErrDenied},
		{"denied by name", stream.KindSocks, stream.SocksArg("localhost", uint16(port(t, denied.addr()))), stream.ErrDenied},
		{"bad name", stream.KindSocks, stream.SocksArg("a b", 80), stream.ErrBadRequest},
		{"port 0", stream.KindSocks, stream.SocksArg("127.0.0.2", 0), stream.ErrDenied},
		{"unknown udp service", stream.KindUDP, "nope", stream.ErrUnknownService},
		{"reverse outside the allowlist", stream.KindReverseListen, "127.0.0.3:9", stream.ErrDenied},
		{"reverse-connect from a client", stream.KindReverseConnect, "127.0.0.2:9", stream.ErrBadRequest},
	} {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		req, err := stream.AppendRequest(nil, tc.kind, tc.arg)
		if err != nil {
			t.Fatal(err)
		}
		_ = st.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := st.Write(req); err != nil {
			t.Fatal(err)
		}
		if err := stream.ReadResponse(st); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		st.Close()
	}
	if denied.accepted() != 0 {
		t.Error("the server dialled a denied destination")
	}
}

// TestSocksCurlParallel: 200 curl --socks5-hostname at once through one
// link, as a browser or an office behind the router opens them. The target
// answers none until all 200 requests have arrived, so the 200 streams are
// open together; every curl must get its answer.
func TestSocksCurlParallel(t *testing.T) {
	curl := needTool(t, "curl", "curl")
	testutil.LeakCheck(t)
	const n = 200
	var arrived atomic.Int32
	all := make(chan struct{})
	web := startTargetOn(t, listenOn(t, "127.0.0.1:0"), func(c net.Conn) {
		buf := make([]byte, 4096)
		if _, err := c.Read(buf); err != nil {
			return
		}
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(2 * time.Minute): // the test fails on the count
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
	})
	p := strconv.Itoa(port(t, web.addr()))
	// 200 curl processes start at once: on a loaded machine (under -race,
	// beside a busy core) one may wait seconds between its connect and its
	// request, and the server's answers queue. The tests' 2 s DialTimeout,
	// which bounds both, reset one of 200 in a run of -count=5; a minute
	// is generous without hiding a stream that is never answered.
	env := startSocksDial(t, "127.0.0.1:0", mustRules(t, []string{"127.0.0.1/32:" + p}, nil, nil), nil, time.Minute)
	errs := make(chan error, n)
	for range n {
		go func() {
			out, err := exec.Command(curl, "-sS", "--max-time", "180", "--socks5-hostname", env.socks, "http://localhost:"+p+"/").CombinedOutput()
			if err == nil && string(out) != "ok\n" {
				err = fmt.Errorf("answer %q", out)
			} else if err != nil {
				err = fmt.Errorf("%w: %s", err, out)
			}
			errs <- err
		}()
	}
	failed := 0
	for range n {
		if err := <-errs; err != nil {
			if failed++; failed <= 5 {
				t.Errorf("curl: %v", err)
			}
		}
	}
	if got := arrived.Load(); got != n || failed > 0 {
		t.Fatalf("%d of %d requests reached the target together, %d curls failed", got, n, failed)
	}
}
