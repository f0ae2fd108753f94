package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// TestE2EDynamic runs the built binary as server and client with SOCKS5,
// a UDP forward and a reverse forward configured, and uses each from
// outside: curl (or a hand-made SOCKS5 request) through the client's
// SOCKS listener, UDP datagrams through the forward, and a connection to
// the server's reverse listener that reaches a service on the client's
// side. A denied SOCKS destination is refused and logged once.
func TestE2EDynamic(t *testing.T) {
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	keygen(t, bin, filepath.Join(dir, "offload.key"))
	if err := os.WriteFile(filepath.Join(dir, "socks.users"), []byte("alice:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	echo := func(c net.Conn) { _, _ = io.Copy(c, c) }
	socksTarget := startE2ETarget(t, echo)   // on the server's side
	clientService := startE2ETarget(t, echo) // on the client's side, reached in reverse
	udpTarget := udpEchoServer(t, net.IPv6loopback, "echo:")
	canary := startE2ETarget(t, echo)
	_, canaryPort, _ := net.SplitHostPort(canary.ln.Addr().String())
	serverAddr, socksAddr, reverseAddr := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	udpListen := freeUDP(t)
	_, socksPort, _ := net.SplitHostPort(socksTarget.ln.Addr().String())

	server := fmt.Sprintf(`listen: %s
key_file: offload.key
drain_timeout: 1s
socks_allow:
  - 127.0.0.1/32:%s
udp_services:
  echo: "%s"
reverse_allow:
  - %s
`, serverAddr, socksPort, udpTarget.LocalAddr(), reverseAddr)
	client := fmt.Sprintf(`server: %s
key_file: offload.key
drain_timeout: 1s
redial:
  min: 100ms
  max: 1s
socks: %s
socks_users_file: socks.users
udp_forwards:
  - listen: "%s"
    service: echo
    idle_timeout: 5s
reverse:
  - listen: %s
    target: %s
`, serverAddr, socksAddr, udpListen, reverseAddr, clientService.ln.Addr())
	for name, body := range map[string]string{"server.yaml": server, "client.yaml": client} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "validate", "-c", filepath.Join(dir, name)).CombinedOutput(); err != nil {
			t.Fatalf("validate %s: %v\n%s", name, err, out)
		}
	}
	srv := startProc(t, "server", bin, "server", "-c", filepath.Join(dir, "server.yaml"))
	cli := startProc(t, "client", bin, "client", "-c", filepath.Join(dir, "client.yaml"))

	// Reverse: the server's listener reaches the client's service.
	waitFor(t, 15*time.Second, "reverse forward", func() error { return echoOnce(reverseAddr) })

	// SOCKS5 with a password, by name (resolved on the server).
	waitFor(t, 10*time.Second, "SOCKS5", func() error {
		return socksEcho(socksAddr, "alice", "s3cret", "localhost", socksPort)
	})
	if err := socksEcho(socksAddr, "alice", "wrong", "localhost", socksPort); err == nil {
		t.Error("a wrong password got through")
	}
	// The client logs one refusal per 10 s: let this one be logged before
	// the next refusal can take its turn. (It answers the SOCKS client
	// before it logs, so the answer alone does not say the line is out.)
	waitFor(t, 30*time.Second, "the client's log of the failed authentication", func() error {
		if !strings.Contains(cli.Out.String(), "authentication failed for user") {
			return errors.New("not logged yet")
		}
		return nil
	})
	if err := socksEcho(socksAddr, "alice", "s3cret", "127.0.0.3", canaryPort); err == nil || !strings.Contains(err.Error(), "reply 2") {
		t.Errorf("denied destination: %v", err)
	}
	if curl, err := exec.LookPath("curl"); err == nil {
		// curl's own SOCKS5 against the echo target: it sends an HTTP
		// request and gets it back, which it can't parse, but the
		// SOCKS5 part must succeed (exit code other than 97, proxy).
		cmd := exec.Command(curl, "-sS", "--max-time", "5", "--socks5-basic", "--proxy", "socks5h://alice:s3cret@"+socksAddr, "http://localhost:"+socksPort+"/")
		err := cmd.Run()
		if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() == 97 {
			t.Errorf("curl through SOCKS5: %v", err)
		}
	}

	// UDP over IPv6.
	waitFor(t, 10*time.Second, "UDP forward", func() error { return udpEchoOnce(udpListen, "echo:dgram") })

	if code := stop(t, cli); code != 0 {
		t.Errorf("client exit %d", code)
	}
	// The reverse listener goes with the link.
	waitFor(t, 10*time.Second, "the reverse listener to close", func() error {
		if c, err := net.DialTimeout("tcp", reverseAddr, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("%s still accepts", reverseAddr)
		}
		return nil
	})
	if code := stop(t, srv); code != 0 {
		t.Errorf("server exit %d", code)
	}
	out := srv.Out.String()
	if n := strings.Count(out, "stream refused"); n != 1 || !strings.Contains(out, "not in the server's socks_allow") {
		t.Errorf("server logged %d refusals:\n%s", n, out)
	}
}

func freeUDP(t *testing.T) string { return freeUDPOn(t, "::1") }

func echoOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	return echoConn(c)
}

// socksEcho does a SOCKS5 CONNECT with username/password to host:port
// through proxy and checks an echo.
func socksEcho(proxy, user, pass, host, port string) error {
	c, err := socksConnect(proxy, user, pass, host, port)
	if err != nil {
		return err
	}
	defer c.Close()
	return echoConn(c)
}

// socksConnect does a SOCKS5 CONNECT with username/password to host:port
// through proxy and returns the connection, with a 5 s deadline.
func socksConnect(proxy, user, pass, host, port string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", proxy, time.Second)
	if err != nil {
		return nil, err
	}
	if err := socksHandshake(c, user, pass, host, port); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func socksHandshake(c net.Conn, user, pass, host, port string) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 10)
	req := []byte{5, 1, 2}
	req = append(append(append(req, 1, byte(len(user))), user...), byte(len(pass)))
	req = append(req, pass...)
	req = append(append(req, 5, 1, 0, 3, byte(len(host))), host...)
	p, _ := strconv.Atoi(port)
	req = binary.BigEndian.AppendUint16(req, uint16(p))
	if _, err := c.Write(req); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, buf[:4]); err != nil {
		return fmt.Errorf("method and auth: %w", err)
	}
	if buf[1] != 2 || buf[3] != 0 {
		return fmt.Errorf("auth refused: % x", buf[:4])
	}
	if _, err := io.ReadFull(c, buf[:10]); err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	if buf[1] != 0 {
		return fmt.Errorf("reply %d", buf[1])
	}
	return nil
}

func echoConn(c net.Conn) error {
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		return err
	}
	if string(buf) != "ping" {
		return fmt.Errorf("got %q", buf)
	}
	return nil
}
