package tunnel

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/internal/socks5"

	"github.com/offload-dev/offload/internal/testutil"
)

// Per-client SOCKS destinations and UDP services: alice's key opens what
// her Access lists, bob's opens none of it, and a reload that takes
// alice's SOCKS destination away resets her open SOCKS stream.
func TestClientsDynamicAccess(t *testing.T) {
	testutil.LeakCheck(t)
	log, logs := testutil.ObservedLogger(t)
	tg := echoOn(t, "127.0.0.1:0")
	var udpSeen atomic.Int64
	udpTarget := udpOn(t, "127.0.0.1:0")
	udpServe(t, udpTarget, func(d []byte) [][]byte { udpSeen.Add(1); return [][]byte{d} })

	opt := testOptions(log)
	opt.PSK = nil
	udp := map[string]string{"echo": udpTarget.LocalAddr().String()}
	cfg := ServerConfig{Options: opt, Rules: mustRules(t, nil, udp, nil), Clients: []ServerClient{
		{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{Services: []string{"echo"}, Rules: mustRules(t, []string{"127.0.0.1/32"}, nil, nil)}},
		{Name: "bob", Keys: [][]byte{testPSK(2)}},
	}}
	saddr, srv, _ := startServer(t, cfg)
	srv.refuseLog.Every = 0

	type end struct{ socks, udp string }
	start := func(psk []byte) end {
		clog, _ := testutil.ObservedLogger(t)
		o := testOptions(clog)
		o.PSK = psk
		ln := listenOn(t, "127.0.0.1:0")
		fwd := udpOn(t, "127.0.0.1:0")
		startClient(t, ClientConfig{Options: o, Server: saddr, Socks: &Socks{Listener: ln}, UDPForwards: []UDPForward{{Conn: fwd, Service: "echo"}}})
		return end{ln.Addr().String(), fwd.LocalAddr().String()}
	}
	alice, bob := start(testPSK(1)), start(testPSK(2))

	req := socksRequest("127.0.0.1", port(t, tg.addr()))
	aliceConn, rep := socksDial(t, alice.socks, "", "", req)
	if rep != 0 {
		t.Fatalf("alice's SOCKS request to an address in her socks_allow: reply %d, want 0", rep)
	}
	echoThrough(t, aliceConn)
	if _, rep := socksDial(t, bob.socks, "", "", req); rep != socks5.ReplyNotAllowed {
		t.Errorf("bob's SOCKS request (no socks_allow of his own): reply %d, want %d", rep, socks5.ReplyNotAllowed)
	}
	if n := tg.accepted(); n != 1 {
		t.Errorf("the target was dialled %d times, want once (alice's)", n)
	}

	// UDP: alice's datagram comes back; bob's never reaches the target.
	udpEcho := func(addr string) error {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		msg := []byte("datagram")
		buf := make([]byte, 64)
		for try := 0; try < 5; try++ {
			_, _ = c.Write(msg)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if n, err := c.Read(buf); err == nil && bytes.Equal(buf[:n], msg) {
				return nil
			}
		}
		return net.ErrClosed
	}
	if err := udpEcho(alice.udp); err != nil {
		t.Errorf("alice's UDP service: %v", err)
	}
	seen := udpSeen.Load()
	if err := udpEcho(bob.udp); err == nil {
		t.Error("bob's datagram to a UDP service he may not use came back")
	}
	if n := udpSeen.Load(); n != seen {
		t.Errorf("bob's datagrams reached the UDP target %d times", n-seen)
	}
	if n := countLogs(logs, "stream refused", map[string]string{"client": "bob"}); n < 2 {
		t.Errorf("%d refusals logged for bob, want his SOCKS and UDP requests", n)
	}

	// alice keeps her UDP service but loses her SOCKS destination.
	next := cfg
	next.Clients = []ServerClient{
		{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{Services: []string{"echo"}}},
		{Name: "bob", Keys: [][]byte{testPSK(2)}},
	}
	if err := srv.Reload(next); err != nil {
		t.Fatal(err)
	}
	if err := readErr(aliceConn); !isAbortive(err) {
		t.Errorf("alice's SOCKS stream after the reload took its destination: %v, want a reset", err)
	}
	if n := countLogs(logs, "closing stream", map[string]string{"client": "alice", "reason": "destination no longer in socks_allow"}); n != 1 {
		t.Errorf("%d closing-stream lines for alice's SOCKS stream, want 1", n)
	}
	if _, rep := socksDial(t, alice.socks, "", "", req); rep != socks5.ReplyNotAllowed {
		t.Errorf("alice's SOCKS request after the reload: reply %d, want %d", rep, socks5.ReplyNotAllowed)
	}
	if err := udpEcho(alice.udp); err != nil {
		t.Errorf("alice's UDP service after a reload that kept it: %v", err)
	}
}
