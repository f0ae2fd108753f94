package tunnel

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/internal/socks5"

	"github.com/offload-dev/offload/internal/testutil"
)

// udpEcho sends msg to addr from a fresh socket and wants it back within
// d.
func udpEcho(addr string, msg string, d time.Duration) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != msg {
		return errors.New("UDP echo mismatch: " + string(buf[:n]))
	}
	return nil
}

// TestClientReloadDynamic: a reload changes the SOCKS users, the UDP
// forwards and the reverse forwards of a running client, in process over
// loopback: a SOCKS connection open across the reload carries on, the new
// users apply to new connections, an added UDP forward carries datagrams
// and a removed one's socket is closed, an added reverse forward listens
// on the server and a removed one stops, a changed reverse target gets
// the next connections; a refused reload changes nothing; removing socks
// closes its listener.
func TestClientReloadDynamic(t *testing.T) {
	testutil.LeakCheck(t)
	echo := echoOn(t, "127.0.0.1:0")
	echo2 := echoOn(t, "127.0.0.1:0")
	udpT := udpOn(t, "127.0.0.1:0")
	udpServe(t, udpT, func(d []byte) [][]byte { return [][]byte{d} })
	rev1 := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
	rev2 := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
	rules := mustRules(t, []string{"127.0.0.1/32"}, map[string]string{"u1": udpT.LocalAddr().String(), "u2": udpT.LocalAddr().String()}, []string{rev1, rev2})
	slog, slogs := testutil.ObservedLogger(t)
	addr, _, _ := startServer(t, ServerConfig{Options: testOptions(slog), Rules: rules})
	clog, clogs := testutil.ObservedLogger(t)
	socksLn := listenOn(t, "127.0.0.1:0")
	udp1 := udpOn(t, "127.0.0.1:0")
	live := ClientLive{
		PSK:         testPSK(1),
		Socks:       &Socks{Listener: socksLn, Users: map[string]string{"old": "pw"}},
		UDPForwards: []UDPForward{{Conn: udp1, Service: "u1"}},
		Reverse:     []Reverse{{Listen: rev1, Target: echo.addr()}},
	}
	opt := testOptions(clog)
	live.PSK = opt.PSK
	_, cli, _ := startClient(t, ClientConfig{Options: opt, Server: addr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond,
		Socks: live.Socks, UDPForwards: live.UDPForwards, Reverse: live.Reverse})
	proxy := socksLn.Addr().String()
	eventually(t, 10*time.Second, "the first reverse listener", func() bool { return dialEcho(rev1) == nil })
	if err := udpEcho(udp1.LocalAddr().String(), "one", 5*time.Second); err != nil {
		t.Fatalf("UDP forward at start: %v", err)
	}
	open, rep := socksDial(t, proxy, "old", "pw", socksRequest("127.0.0.1", port(t, echo.addr())))
	if rep != socks5.ReplySucceeded {
		t.Fatalf("SOCKS at start: reply %d", rep)
	}
	echoThrough(t, open)

	// A refused reload (a UDP socket twice) changes nothing.
	udp2 := udpOn(t, "127.0.0.1:0")
	bad := live
	bad.Socks = &Socks{Listener: socksLn, Users: map[string]string{"new": "pw2"}}
	bad.UDPForwards = []UDPForward{{Conn: udp2, Service: "u2"}, {Conn: udp2, Service: "u1"}}
	if err := cli.Reload(bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("reload with a socket twice: %v, want ErrConfig", err)
	}
	if c, rep := socksDial(t, proxy, "old", "pw", socksRequest("127.0.0.1", port(t, echo.addr()))); rep != socks5.ReplySucceeded {
		t.Fatalf("old user after a refused reload: reply %d", rep)
	} else {
		c.Close()
	}

	// The reload: new users, u1's forward replaced by u2's on another
	// socket, a second reverse forward and the first pointed elsewhere.
	next := live
	next.Socks = &Socks{Listener: socksLn, Users: map[string]string{"new": "pw2"}}
	next.UDPForwards = []UDPForward{{Conn: udp2, Service: "u2", IdleTimeout: time.Second}}
	next.Reverse = []Reverse{{Listen: rev1, Target: echo2.addr()}, {Listen: rev2, Target: echo.addr()}}
	if err := cli.Reload(next); err != nil {
		t.Fatal(err)
	}
	echoThrough(t, open) // the SOCKS connection open across the reload
	if _, rep := socksDial(t, proxy, "old", "pw", socksRequest("127.0.0.1", port(t, echo.addr()))); rep != -1 {
		t.Errorf("a removed SOCKS user: reply %d, want the authentication refused", rep)
	}
	c, rep := socksDial(t, proxy, "new", "pw2", socksRequest("127.0.0.1", port(t, echo.addr())))
	if rep != socks5.ReplySucceeded {
		t.Fatalf("the new SOCKS user: reply %d", rep)
	}
	echoThrough(t, c)
	if err := udpEcho(udp2.LocalAddr().String(), "two", 5*time.Second); err != nil {
		t.Errorf("the UDP forward added by the reload: %v", err)
	}
	// A deadline, so that an open socket fails the test, not hangs it.
	_ = udp1.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, _, err := udp1.ReadFromUDP(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the removed UDP forward's socket: %v, want it closed", err)
	}
	if err := udpEcho(udp1.LocalAddr().String(), "gone", 300*time.Millisecond); err == nil {
		t.Errorf("the removed UDP forward still answers")
	}
	eventually(t, 10*time.Second, "the reverse listener added by the reload", func() bool { return dialEcho(rev2) == nil })
	before := echo2.accepted()
	if err := dialEcho(rev1); err != nil {
		t.Fatalf("the kept reverse forward: %v", err)
	}
	if echo2.accepted() != before+1 {
		t.Errorf("the reverse forward's new target got %d connections, want 1", echo2.accepted()-before)
	}

	// Remove the first reverse forward and socks.
	last := next
	last.Socks = nil
	last.Reverse = []Reverse{{Listen: rev2, Target: echo.addr()}}
	if err := cli.Reload(last); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the removed reverse forward's listener to close", func() bool {
		c, err := net.DialTimeout("tcp", rev1, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if err := dialEcho(rev2); err != nil {
		t.Errorf("the reverse forward kept: %v", err)
	}
	if c, err := net.DialTimeout("tcp", proxy, time.Second); err == nil {
		c.Close()
		t.Errorf("the SOCKS listener still accepts after socks was removed")
	}
	echoThrough(t, open) // still: a removed listener's connections finish on their own
	// The server logs the close once the listener's connections are done,
	// after the listener stopped accepting.
	eventually(t, 10*time.Second, "the server to log the reverse listener closed", func() bool {
		return slogs.FilterMessage("reverse forward closed").Len() >= 1
	})
	if n := slogs.FilterMessage("reverse forward closed").Len(); n != 1 {
		t.Errorf("%d reverse listeners closed on the server, want 1", n)
	}
	if n := clogs.FilterMessage("link up").Len(); n != 1 {
		t.Errorf("%d links, want 1: the reloads kept the link", n)
	}
}

// TestClientReloadKeyReverse: after a new key the reverse forward moves
// to the new link (the old link's registration ends, so its listener
// frees the address) and the old link retires: a registration stream
// left on it would keep it open for ever.
func TestClientReloadKeyReverse(t *testing.T) {
	testutil.LeakCheck(t)
	svc := echoOn(t, "127.0.0.1:0")
	rev := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
	slog, _ := testutil.ObservedLogger(t)
	sopt := testOptions(slog)
	sopt.PSK = nil
	addr, srv, _ := startServer(t, ServerConfig{Options: sopt, Rules: mustRules(t, nil, nil, []string{rev}), Clients: []ServerClient{{Name: "alice", Keys: [][]byte{testPSK(1), testPSK(2)},
		Access: Access{AllServices: true, Rules: mustRules(t, nil, nil, []string{rev})}}}})
	clog, clogs := testutil.ObservedLogger(t)
	copt := testOptions(clog)
	copt.PSK = testPSK(1)
	rs := []Reverse{{Listen: rev, Target: svc.addr()}}
	_, cli, _ := startClient(t, ClientConfig{Options: copt, Server: addr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond, Reverse: rs})
	eventually(t, 10*time.Second, "the reverse listener", func() bool { return dialEcho(rev) == nil })
	if err := cli.Reload(ClientLive{PSK: testPSK(2), Reverse: rs}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a second link and the old one retired", func() bool {
		return clogs.FilterMessage("link up").Len() == 2 && srv.ctr.links.Load() == 1
	})
	eventually(t, 10*time.Second, "the reverse listener on the new link", func() bool { return dialEcho(rev) == nil })
}

// startKeyRollServer starts a server with o (its PSK ignored) whose one
// client, alice, has the keys testPSK(1) and testPSK(2) and may reach
// service "a", an echo: a client can move from one key to the other.
func startKeyRollServer(t *testing.T, o Options) (string, *Server) {
	t.Helper()
	tg := startTarget(t, testutil.Echo)
	o.PSK = nil
	saddr, srv, _ := startServer(t, ServerConfig{Options: o, Services: map[string]string{"a": tg.addr()},
		Clients: []ServerClient{{Name: "alice", Keys: [][]byte{testPSK(1), testPSK(2)}, Access: Access{AllServices: true}}}})
	return saddr, srv
}

// TestClientReloadKeyNoStreamOnOldLink: once Reload has returned with a new
// key, no new stream goes to the link made with the old one, even before
// the link loop has let that link go. A stream that did would hold the old
// link open until it ended (TestClientReload waited 30 s for such a link
// to retire, about one run in ten beside a CPU hog).
func TestClientReloadKeyNoStreamOnOldLink(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	saddr, _ := startKeyRollServer(t, testOptions(log))
	copt := testOptions(log)
	copt.PSK = testPSK(1)
	ln := testutil.Listen(t)
	cli, err := NewClient(ClientConfig{Options: copt, Server: saddr, Forwards: []Forward{{Listener: ln, Service: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	r := &running{cancel: rcancel, done: make(chan error, 1)}
	go func() { r.done <- cli.Run(rctx) }()
	t.Cleanup(func() { r.stop(t) })
	openEcho(t, ln.Addr().String()).Close()

	cli.mu.Lock()
	first := cli.sess
	cli.mu.Unlock()
	if err := cli.Reload(ClientLive{PSK: testPSK(2), Forwards: []Forward{{Listener: ln, Service: "a"}}}); err != nil {
		t.Fatal(err)
	}
	cli.mu.Lock()
	sess, retiring := cli.sess, cli.retiring
	cli.mu.Unlock()
	if sess == first && retiring != first {
		t.Fatalf("right after Reload the old link is still the client's link and not marked retiring")
	}

	// The rule openStream keeps, without the race: a link marked retiring
	// that the link loop has not let go yet takes no stream; the opener
	// waits for the next link.
	cli.mu.Lock()
	for cli.sess == nil || cli.sess == first {
		cli.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		cli.mu.Lock()
	}
	second := cli.sess
	cli.retiring = second // as Reload leaves it before the link loop sees the roll
	cli.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	st, err := cli.openStream(ctx, nil)
	cancel()
	if err == nil {
		_ = st.Close()
		t.Fatalf("openStream opened a stream on a link marked retiring")
	}
	cli.mu.Lock()
	cli.retiring = nil
	cli.mu.Unlock()
	openEcho(t, ln.Addr().String()).Close()
}
