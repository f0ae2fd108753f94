package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// TestE2EClientsReload runs the built server and client with a clients:
// config and changes both with SIGHUP: a long stream survives reloads
// that keep its service and a key rotation; a stream of a service taken
// from the client is reset, with a log line; a bad config is refused with
// file:line and the old one keeps serving; a setting that can't change is
// reported as needing a restart; forwards come and go.
func TestE2EClientsReload(t *testing.T) {
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	for _, k := range []string{"alice.key", "alice2.key", "bob.key"} {
		keygen(t, bin, filepath.Join(dir, k))
	}
	var dialledA atomic.Int64 // connections a's target accepted
	tgA := startE2ETarget(t, func(c net.Conn) { dialledA.Add(1); testutil.Echo(c) })
	tgB := startE2ETarget(t, testutil.Echo)
	srvAddr, srvMetrics, fA, fB, fC := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	serverCfg, clientCfg := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	server := func(alice, extra string) {
		t.Helper()
		body := fmt.Sprintf(`listen: %s
metrics: %s
drain_timeout: 1s
services:
  a: %s
  b: %s
clients:
  alice:
%s
  bob:
    key_file: bob.key
    services: [b]
%s`, srvAddr, srvMetrics, tgA.ln.Addr(), tgB.ln.Addr(), alice, extra)
		if err := os.WriteFile(serverCfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	client := func(key string, forwards map[string]string) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "server: %s\nkey_file: %s\ndrain_timeout: 1s\nredial: {min: 100ms, max: 1s}\nforwards:\n", srvAddr, key)
		for listen, svc := range forwards {
			fmt.Fprintf(&b, "  - {listen: '%s', service: %s}\n", listen, svc)
		}
		if err := os.WriteFile(clientCfg, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	server("    key_file: alice.key\n    services: [a, b]", "")
	client("alice.key", map[string]string{fA: "a", fB: "b"})
	if out, err := exec.Command(bin, "validate", serverCfg, clientCfg).CombinedOutput(); err != nil || !strings.Contains(string(out), "2 clients") {
		t.Fatalf("validate: %v\n%s", err, out)
	}
	srv := startProc(t, "server", bin, "server", "-c", serverCfg)
	cli := startProc(t, "client", bin, "client", "-c", clientCfg)
	waitFor(t, 15*time.Second, "first round trip", func() error { return testutil.EchoRoundTrip(fA, 1000, 0) })

	dial := func(addr string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		echo(t, c, "hello")
		return c
	}
	long, viaB := dial(fA), dial(fB)
	hup := func(p *proc, want string) {
		t.Helper()
		before := len(p.Out.String())
		if err := p.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, p.Name+" to log "+want, func() error {
			if !strings.Contains(p.Out.String()[before:], want) {
				return errors.New("not yet")
			}
			return nil
		})
	}

	t.Run("own keys", func(t *testing.T) {
		// bob's client, with his key, asks for alice's a and his b.
		bobA, bobB := testutil.FreePort(t), testutil.FreePort(t)
		bobCfg := filepath.Join(dir, "bob.yaml")
		body := fmt.Sprintf("server: %s\nkey_file: bob.key\ndrain_timeout: 1s\nforwards:\n  - {listen: '%s', service: a}\n  - {listen: '%s', service: b}\n",
			srvAddr, bobA, bobB)
		if err := os.WriteFile(bobCfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		bob := startProc(t, "bob", bin, "client", "-c", bobCfg)
		waitFor(t, 15*time.Second, "bob's round trip to b", func() error { return testutil.EchoRoundTrip(bobB, 1000, 5) })
		before := dialledA.Load()
		// The client may refuse and reset the connection before Dial has
		// seen it connected (on a loaded machine): that reset is the answer.
		c, err := net.Dial("tcp", bobA)
		if err == nil {
			err = readAll(c)
			c.Close()
		}
		if !isReset(err) {
			t.Errorf("bob asking for alice's a: %v, want a reset", err)
		}
		if dialledA.Load() != before {
			t.Errorf("bob's key opened alice's service: a's target dialled")
		}
		waitFor(t, 5*time.Second, "the reasons in both logs", func() error {
			if !strings.Contains(bob.Out.String(), "unknown service: no such service for this client") {
				return errors.New("bob's client does not say why")
			}
			if n := strings.Count(srv.Out.String(), `stream refused	{"remote": `); n != 1 || !strings.Contains(srv.Out.String(), `"client": "bob", "service": "\"a\"", "error": "service not allowed for this client"`) {
				return fmt.Errorf("%d stream refused lines on the server, want 1 naming bob", n)
			}
			return nil
		})
		if code := stop(t, bob); code != 0 {
			t.Errorf("bob's client exit %d", code)
		}
	})

	t.Run("service taken away", func(t *testing.T) {
		server("    key_file: alice.key\n    services: [a]", "max_frame: 16KiB\n")
		hup(srv, "reloaded")
		echo(t, long, "kept")
		if err := readAll(viaB); !isReset(err) {
			t.Errorf("alice's stream to b after b was taken from her: %v, want a reset", err)
		}
		out := srv.Out.String()
		for _, want := range []string{`"client": "alice", "service": "b", "reason": "service no longer allowed for this client"`,
			`setting needs a restart; the running value is kept	{"setting": "max_frame"}`} {
			if !strings.Contains(out, want) {
				t.Errorf("server output lacks %s", want)
			}
		}
	})

	t.Run("bad config", func(t *testing.T) {
		server("    key_file: alice.key\n    services: [a, c]", "")
		hup(srv, "reload refused")
		if !strings.Contains(srv.Out.String(), `server.yaml:10: clients.alice.services[1]: \"c\" is not one of the server's services`) {
			t.Errorf("the refusal does not name file:line and field")
		}
		echo(t, long, "still kept")
		if err := testutil.EchoRoundTrip(fA, 1000, 1); err != nil {
			t.Errorf("a new stream after a refused reload: %v", err)
		}
	})

	t.Run("forwards", func(t *testing.T) {
		// A forward on a port something else holds: the reload is
		// refused at that forward, and nothing changes.
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		client("alice.key", map[string]string{fA: "a", fC: "a", taken.Addr().String(): "a"})
		hup(cli, "reload refused")
		if !strings.Contains(cli.Out.String(), "client.yaml:") || !strings.Contains(cli.Out.String(), "address already in use") {
			t.Errorf("the refusal does not name the file and the cause")
		}
		if err := testutil.EchoRoundTrip(fA, 1000, 6); err != nil {
			t.Errorf("the forward to a after a refused reload: %v", err)
		}
		// Still listening: b is refused (alice lost it), so the client
		// may reset the connection before the dial returns.
		if c, err := net.DialTimeout("tcp", fB, time.Second); errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("a refused reload closed the forward to b: %v", err)
		} else if err == nil {
			c.Close()
		}
		if c, err := net.DialTimeout("tcp", fC, time.Second); err == nil {
			c.Close()
			t.Errorf("a refused reload opened a forward")
		}

		client("alice.key", map[string]string{fA: "a", fC: "a"})
		hup(cli, "reloaded")
		if err := testutil.EchoRoundTrip(fC, 1000, 2); err != nil {
			t.Errorf("the added forward: %v", err)
		}
		if c, err := net.DialTimeout("tcp", fB, time.Second); err == nil {
			c.Close()
			t.Errorf("the removed forward still accepts")
		}
		echo(t, long, "the link stays")
	})

	t.Run("key rotation", func(t *testing.T) {
		server("    key_files: [alice2.key, alice.key]\n    services: [a]", "")
		hup(srv, "reloaded")
		client("alice2.key", map[string]string{fA: "a", fC: "a"})
		hup(cli, "reloaded")
		waitFor(t, 10*time.Second, "a link made with the new key", func() error {
			if err := testutil.EchoRoundTrip(fC, 1000, 3); err != nil {
				return err
			}
			m, err := scrape(srvMetrics)
			if err != nil {
				return err
			}
			if !strings.Contains(m, `offload_client_links_active{client="alice"} 2`) {
				return errors.New("not two links")
			}
			return nil
		})
		echo(t, long, "across the key change")
		long.Close()
		waitFor(t, 10*time.Second, "the old link to retire", func() error {
			m, err := scrape(srvMetrics)
			if err != nil {
				return err
			}
			if !strings.Contains(m, `offload_client_links_active{client="alice"} 1`) {
				return errors.New("not one link")
			}
			return nil
		})
		server("    key_file: alice2.key\n    services: [a]", "")
		hup(srv, "reloaded")
		if strings.Contains(srv.Out.String(), "closing link") {
			t.Errorf("dropping the old key closed a link; none was left on it")
		}
		if err := testutil.EchoRoundTrip(fA, 100000, 4); err != nil {
			t.Errorf("after the rotation: %v", err)
		}
	})

	if code := stop(t, cli); code != 0 {
		t.Errorf("client exit %d", code)
	}
	if code := stop(t, srv); code != 0 {
		t.Errorf("server exit %d", code)
	}
}

func echo(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("echo of %q: %v", msg, err)
	}
	if !bytes.Equal(got, []byte(msg)) {
		t.Fatalf("echo of %q: got %q", msg, got)
	}
}

func readAll(c net.Conn) error {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	return err
}

func isReset(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestE2EClientReloadDynamic runs the built server and client and changes
// the client's socks, socks_users_file, udp_forwards and reverse with
// SIGHUP: a SOCKS connection open across the reloads carries on, a new
// users file applies to new connections, a UDP forward added works and,
// removed, frees its port, a reverse forward added listens on the server
// and a removed one stops; a config with the SOCKS listener on a taken
// port, or a users file with a bad mode, is refused, changes nothing and
// leaves no socket of its own open.
func TestE2EClientReloadDynamic(t *testing.T) {
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	keygen(t, bin, filepath.Join(dir, "offload.key"))
	users := func(name, body string, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile keeps an existing file's mode
			t.Fatal(err)
		}
	}
	users("socks.users", "alice:one\n", 0o600)
	socksTarget := startE2ETarget(t, testutil.Echo)   // on the server's side
	clientService := startE2ETarget(t, testutil.Echo) // on the client's side, reached in reverse
	_, socksPort, _ := net.SplitHostPort(socksTarget.ln.Addr().String())
	udpTarget := udpEchoServer(t, net.IPv4(127, 0, 0, 1), "")
	srvAddr, socksAddr, rev1, rev2 := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	udpListen := freeUDPOn(t, "127.0.0.1")
	serverCfg, clientCfg := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	if err := os.WriteFile(serverCfg, []byte(fmt.Sprintf(`listen: %s
key_file: offload.key
drain_timeout: 1s
socks_allow:
  - 127.0.0.1/32:%s
udp_services:
  echo: %s
reverse_allow:
  - %s
  - %s
`, srvAddr, socksPort, udpTarget.LocalAddr(), rev1, rev2)), 0o644); err != nil {
		t.Fatal(err)
	}
	fwd := testutil.FreePort(t)
	// client writes the client config; forward adds a forward to fwd.
	client := func(socks, usersFile, udp string, forward bool, reverse ...string) {
		t.Helper()
		var b strings.Builder
		fmt.Fprintf(&b, "server: %s\nkey_file: offload.key\ndrain_timeout: 1s\nredial: {min: 100ms, max: 1s}\nsocks: %s\nsocks_users_file: %s\n", srvAddr, socks, usersFile)
		if forward {
			fmt.Fprintf(&b, "forwards:\n  - {listen: '%s', service: x}\n", fwd)
		}
		if udp != "" {
			fmt.Fprintf(&b, "udp_forwards:\n  - {listen: '%s', service: echo, idle_timeout: 2s}\n", udp)
		}
		if len(reverse) > 0 {
			b.WriteString("reverse:\n")
			for _, r := range reverse {
				fmt.Fprintf(&b, "  - {listen: '%s', target: '%s'}\n", r, clientService.ln.Addr())
			}
		}
		if err := os.WriteFile(clientCfg, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	client(socksAddr, "socks.users", "", false, rev1)
	srv := startProc(t, "server", bin, "server", "-c", serverCfg)
	cli := startProc(t, "client", bin, "client", "-c", clientCfg)
	waitFor(t, 15*time.Second, "the first reverse forward", func() error { return echoOnce(rev1) })
	long, err := socksConnect(socksAddr, "alice", "one", "127.0.0.1", socksPort)
	if err != nil {
		t.Fatalf("SOCKS at start: %v", err)
	}
	defer long.Close()
	echo(t, long, "before")

	hup := func(want string) {
		t.Helper()
		before := len(cli.Out.String())
		if err := cli.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the client to log "+want, func() error {
			if !strings.Contains(cli.Out.String()[before:], want) {
				return errors.New("not yet")
			}
			return nil
		})
	}
	// udpFree says whether nothing listens on addr: it can be bound.
	udpFree := func(addr string) bool {
		a, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.ListenUDP("udp", a)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}

	t.Run("refused", func(t *testing.T) {
		// SOCKS moved to a taken port, with a forward and a UDP
		// forward: refused at socks, and the sockets it opened (the
		// forward's, before socks) are closed again.
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		client(taken.Addr().String(), "socks.users", udpListen, true, rev1)
		hup("reload refused")
		if c, err := net.DialTimeout("tcp", fwd, time.Second); err == nil {
			c.Close()
			t.Errorf("a refused reload left its forward listening")
		}
		if out := cli.Out.String(); !strings.Contains(out, "client.yaml:5: socks:") || !strings.Contains(out, "address already in use") {
			t.Errorf("the refusal does not name file:line, socks and the cause:\n%s", out)
		}
		if !udpFree(udpListen) {
			t.Errorf("a refused reload left its UDP socket open")
		}
		// A users file anyone may read.
		users("open.users", "bob:two\n", 0o644)
		client(socksAddr, "open.users", udpListen, true, rev1)
		hup("reload refused")
		if !strings.Contains(cli.Out.String(), "open.users") {
			t.Errorf("the refusal does not name the users file:\n%s", cli.Out)
		}
		if c, err := net.DialTimeout("tcp", fwd, time.Second); err == nil {
			c.Close()
			t.Errorf("a refused reload left its forward listening")
		}
		if !udpFree(udpListen) {
			t.Errorf("a refused reload left its UDP socket open")
		}
		if err := socksEcho(socksAddr, "alice", "one", "127.0.0.1", socksPort); err != nil {
			t.Errorf("the old users after refused reloads: %v", err)
		}
		echo(t, long, "after refusals")
	})

	t.Run("applied", func(t *testing.T) {
		users("socks.users", "bob:two\n", 0o600)
		client(socksAddr, "socks.users", udpListen, false, rev2)
		hup("reloaded")
		echo(t, long, "across the reload")
		if err := socksEcho(socksAddr, "alice", "one", "127.0.0.1", socksPort); err == nil {
			t.Errorf("a user no longer in the users file got through")
		}
		if err := socksEcho(socksAddr, "bob", "two", "127.0.0.1", socksPort); err != nil {
			t.Errorf("the new users file's user: %v", err)
		}
		waitFor(t, 10*time.Second, "the UDP forward added", func() error { return udpEchoOnce(udpListen, "dgram") })
		waitFor(t, 10*time.Second, "the reverse forward added", func() error { return echoOnce(rev2) })
		waitFor(t, 10*time.Second, "the removed reverse forward to stop listening", func() error {
			if c, err := net.DialTimeout("tcp", rev1, time.Second); err == nil {
				c.Close()
				return fmt.Errorf("%s still accepts", rev1)
			}
			return nil
		})
		if out := cli.Out.String(); strings.Contains(out, "needs a restart") {
			t.Errorf("a reload of socks, udp_forwards and reverse reported a restart:\n%s", out)
		}

		client(socksAddr, "socks.users", "", false, rev2)
		hup("reloaded")
		if !udpFree(udpListen) {
			t.Errorf("the removed UDP forward's socket is still open")
		}
		echo(t, long, "the link stays")
	})

	if code := stop(t, cli); code != 0 {
		t.Errorf("client exit %d", code)
	}
	if code := stop(t, srv); code != 0 {
		t.Errorf("server exit %d", code)
	}
	if n := strings.Count(cli.Out.String(), "link up"); n != 1 {
		t.Errorf("%d links, want 1: the reloads kept the link", n)
	}
}

// freeUDPOn is a UDP address on host free right now; it skips the test
// if host is IPv6 and this host has no IPv6 loopback.
func freeUDPOn(t *testing.T, host string) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(host)})
	if err != nil {
		if strings.Contains(host, ":") {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().String()
}

// udpEchoOnce sends "dgram" to addr and wants want back.
func udpEchoOnce(addr, want string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("dgram")); err != nil {
		return err
	}
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != want {
		return fmt.Errorf("got %q, want %q", buf[:n], want)
	}
	return nil
}

// udpEchoServer answers every datagram to it with prefix and the
// datagram, until the test ends; it skips the test if ip is IPv6 and this
// host has no IPv6 loopback.
func udpEchoServer(t *testing.T, ip net.IP, prefix string) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: ip})
	if err != nil {
		if ip.To4() == nil {
			t.Skipf("no IPv6 loopback: %v", err)
		}
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort(append([]byte(prefix), buf[:n]...), from)
		}
	}()
	return c
}
