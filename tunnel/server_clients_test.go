package tunnel

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
)

// clientOf starts a client with key psk and one forward per service.
func clientOf(t *testing.T, log *zap.Logger, saddr string, psk []byte, services ...string) (map[string]string, *Client, *running) {
	t.Helper()
	opt := testOptions(log)
	opt.PSK = psk
	return startClient(t, ClientConfig{Options: opt, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond}, services...)
}

// openEcho connects to addr and checks one round trip; the connection
// stays open for more.
func openEcho(t *testing.T, addr string) net.Conn {
	t.Helper()
	c := dialT(t, addr)
	if err := echoOnce(c, []byte("hello")); err != nil {
		t.Fatalf("echo through %s: %v", addr, err)
	}
	return c
}

func echoOnce(c net.Conn, msg []byte) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if !bytes.Equal(got, msg) {
		return errors.New("echo differs")
	}
	return nil
}

func countLogs(logs *observer.ObservedLogs, msg string, fields map[string]string) int {
	n := 0
	for _, e := range logs.FilterMessage(msg).All() {
		ok := true
		ctx := e.ContextMap()
		for k, v := range fields {
			if s, _ := ctx[k].(string); s != v {
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

// Two clients with their own keys: each reaches its own services only; a
// request for another's service is refused with a reason at the client,
// logged once with the client's name at the server, and dials nothing.
func TestClientsOwnKeys(t *testing.T) {
	testutil.LeakCheck(t)
	log, logs := testutil.ObservedLogger(t)
	tgA := startTarget(t, testutil.Echo)
	tgB := startTarget(t, testutil.Echo) // only bob may reach it
	opt := testOptions(log)
	opt.PSK = nil
	saddr, srv, _ := startServer(t, ServerConfig{Options: opt,
		Services: map[string]string{"a": tgA.addr(), "b": tgB.addr()},
		Clients: []ServerClient{
			{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{Services: []string{"a"}}},
			{Name: "bob", Keys: [][]byte{testPSK(2), testPSK(3)}, Access: Access{Services: []string{"b"}}},
		}})
	set := metrics.NewSet()
	srv.RegisterMetrics(set)

	aAddrs, aCli, _ := clientOf(t, log, saddr, testPSK(1), "a", "b", "nope")
	openEcho(t, aAddrs["a"])
	for _, svc := range []string{"b", "nope"} {
		if err := dialAndRead(aAddrs[svc]); !isAbortive(err) {
			t.Fatalf("alice asking for %q: ended with %v, want a reset", svc, err)
		}
	}
	if n := tgB.accepted(); n != 0 {
		t.Fatalf("alice's key opened bob's service: its target was dialled %d times", n)
	}
	eventually(t, 5*time.Second, "alice's client to count two refusals", func() bool { return aCli.ctr.streams[streamRefused].Load() == 2 })
	var reasons []string
	for _, e := range logs.FilterMessage("connection refused").All() {
		if s, _ := e.ContextMap()["error"].(string); s != "" {
			reasons = append(reasons, s)
		}
	}
	for _, r := range reasons {
		if r != "unknown service: no such service for this client" {
			t.Errorf("client's reason %q: want the same reason for a service of another client and one that does not exist", r)
		}
	}
	if n := countLogs(logs, "stream refused", map[string]string{"client": "alice", "service": `"b"`}); n != 1 {
		t.Errorf("server logged %d refusals of alice's request for b, want 1", n)
	}
	if n := countLogs(logs, "link up", map[string]string{"client": "alice"}); n != 1 {
		t.Errorf("%d server link-up lines with client=alice, want 1", n)
	}

	// bob, with either of his keys, reaches b and not a.
	for _, k := range []byte{2, 3} {
		bAddrs, _, brun := clientOf(t, log, saddr, testPSK(k), "a", "b")
		openEcho(t, bAddrs["b"])
		if err := dialAndRead(bAddrs["a"]); !isAbortive(err) {
			t.Fatalf("bob asking for a: ended with %v, want a reset", err)
		}
		brun.stop(t)
	}
	if n := tgA.accepted(); n != 1 {
		t.Errorf("a's target dialled %d times, want 1 (alice's)", n)
	}

	// A key that is no client's gets no link.
	c, err := net.Dial("tcp", saddr)
	if err != nil {
		t.Fatal(err)
	}
	o := testOptions(log)
	o.PSK = testPSK(9)
	_, err = handshake.Client(t.Context(), c, o.handshakeConfig())
	c.Close()
	if !errors.Is(err, handshake.ErrAuth) {
		t.Fatalf("a key of no client: %v, want ErrAuth", err)
	}

	wants := []string{
		`offload_client_streams_total{client="alice",result="refused"} 2`,
		`offload_client_streams_total{client="bob",result="refused"} 2`,
		`offload_client_links_active{client="alice"} 1`,
		`offload_client_links_active{client="bob"} 0`,
		`offload_client_streams_active{client="alice"} 1`,
		// Bytes are counted as a stream ends: bob's two echoes of 5.
		`offload_client_stream_bytes_total{client="bob",dir="to_target"} 10`,
	}
	var body string
	deadline := time.Now().Add(5 * time.Second)
	for missing := wants; len(missing) > 0; {
		var buf bytes.Buffer
		set.WritePrometheus(&buf)
		body, missing = buf.String(), nil
		for _, w := range wants {
			if !strings.Contains(body, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) > 0 && time.Now().After(deadline) {
			t.Fatalf("metrics lack %q:\n%s", missing, grepLines(body, "offload_client_"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// A reload keeps the streams that remain allowed, resets the others with
// a reason, closes links of removed clients and rotated-out keys, and a
// bad config changes nothing.
func TestServerReload(t *testing.T) {
	testutil.LeakCheck(t)
	log, logs := testutil.ObservedLogger(t)
	tgA := startTarget(t, testutil.Echo)
	tgB := startTarget(t, testutil.Echo)
	opt := testOptions(log)
	opt.PSK = nil
	services := map[string]string{"a": tgA.addr(), "b": tgB.addr()}
	cfg := ServerConfig{Options: opt, Services: services, Clients: []ServerClient{
		{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{AllServices: true}},
		{Name: "bob", Keys: [][]byte{testPSK(2), testPSK(3)}, Access: Access{Services: []string{"a"}}},
		{Name: "carol", Keys: [][]byte{testPSK(4)}, Access: Access{Services: []string{"a"}}},
	}}
	saddr, srv, _ := startServer(t, cfg)
	aAddrs, _, _ := clientOf(t, log, saddr, testPSK(1), "a", "b")
	bAddrs, _, _ := clientOf(t, log, saddr, testPSK(2), "a")
	cAddrs, _, _ := clientOf(t, log, saddr, testPSK(4), "a")
	aliceA, aliceB := openEcho(t, aAddrs["a"]), openEcho(t, aAddrs["b"])
	bobA := openEcho(t, bAddrs["a"])
	carolA := openEcho(t, cAddrs["a"])

	// A bad config: refused, everything keeps working.
	bad := cfg
	bad.Clients = append(append([]ServerClient(nil), cfg.Clients...), ServerClient{Name: "dave", Keys: [][]byte{testPSK(5)}, Access: Access{Services: []string{"c"}}})
	if err := srv.Reload(bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("reload with a client of an unknown service: %v, want ErrConfig", err)
	}
	dup := cfg
	dup.Clients = append(append([]ServerClient(nil), cfg.Clients...), ServerClient{Name: "eve", Keys: [][]byte{testPSK(1)}, Access: Access{AllServices: true}})
	if err := srv.Reload(dup); !errors.Is(err, ErrConfig) {
		t.Fatalf("reload with a key twice: %v, want ErrConfig", err)
	}
	for _, c := range []net.Conn{aliceA, aliceB, bobA, carolA} {
		if err := echoOnce(c, []byte("after a bad reload")); err != nil {
			t.Fatalf("a stream after a refused reload: %v", err)
		}
	}

	// b removed, bob's key 2 rotated out (3 stays), carol removed.
	next := cfg
	next.Services = map[string]string{"a": tgA.addr()}
	next.Clients = []ServerClient{
		{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{AllServices: true}},
		{Name: "bob", Keys: [][]byte{testPSK(3)}, Access: Access{Services: []string{"a"}}},
	}
	if err := srv.Reload(next); err != nil {
		t.Fatal(err)
	}
	if err := echoOnce(aliceA, bytes.Repeat([]byte("kept "), 1000)); err != nil {
		t.Fatalf("alice's stream to a, which the reload keeps: %v", err)
	}
	for name, c := range map[string]net.Conn{"alice's b (service removed)": aliceB, "bob's a (key rotated out)": bobA, "carol's a (client removed)": carolA} {
		if err := readErr(c); !isAbortive(err) {
			t.Errorf("%s: ended with %v, want a reset", name, err)
		}
	}
	for _, want := range []struct {
		msg    string
		fields map[string]string
	}{
		{"closing stream", map[string]string{"client": "alice", "service": "b", "reason": "service removed from the config"}},
		{"closing link", map[string]string{"client": "bob", "reason": "the key this link was made with is no longer accepted (rotated out)"}},
		{"closing link", map[string]string{"client": "carol", "reason": "client removed from the config"}},
	} {
		if n := countLogs(logs, want.msg, want.fields); n != 1 {
			t.Errorf("%d %q lines with %v, want 1", n, want.msg, want.fields)
		}
	}
	// alice's forward to b now hears the service is gone; a new stream
	// to a works.
	if err := dialAndRead(aAddrs["b"]); !isAbortive(err) {
		t.Errorf("alice asking for the removed b: %v, want a reset", err)
	}
	openEcho(t, aAddrs["a"])
	if n := tgB.accepted(); n != 1 {
		t.Errorf("b's target dialled %d times, want once (before the reload)", n)
	}

	// Taking a service from a client resets its stream too.
	last := next
	last.Clients = []ServerClient{{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{Services: []string{}}}}
	if err := srv.Reload(last); err != nil {
		t.Fatal(err)
	}
	if err := readErr(aliceA); !isAbortive(err) {
		t.Errorf("alice's stream to a after a was taken from her: %v, want a reset", err)
	}
	// aliceA and the one opened after the first reload.
	if n := countLogs(logs, "closing stream", map[string]string{"client": "alice", "service": "a", "reason": "service no longer allowed for this client"}); n != 2 {
		t.Errorf("%d closing-stream lines for alice's a, want 2", n)
	}
}

// The client's reload: forwards added, removed and re-pointed, and a new
// key, with which the client moves to a new link while its streams on
// the old one finish.
func TestClientReload(t *testing.T) {
	testutil.LeakCheck(t)
	log, logs := testutil.ObservedLogger(t)
	tgA := startTarget(t, testutil.Echo)
	tgB := startTarget(t, testutil.Echo)
	opt := testOptions(log)
	opt.PSK = nil
	saddr, srv, _ := startServer(t, ServerConfig{Options: opt,
		Services: map[string]string{"a": tgA.addr(), "b": tgB.addr()},
		Clients:  []ServerClient{{Name: "alice", Keys: [][]byte{testPSK(1), testPSK(2)}, Access: Access{AllServices: true}}}})
	copt := testOptions(log)
	copt.PSK = testPSK(1)
	lnA, lnB := testutil.Listen(t), testutil.Listen(t)
	cli, err := NewClient(ClientConfig{Options: copt, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond,
		Forwards: []Forward{{Listener: lnA, Service: "a"}, {Listener: lnB, Service: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Reload(ClientLive{PSK: testPSK(1), Forwards: []Forward{{Listener: lnA, Service: "a"}}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("reload before Run: %v, want ErrConfig", err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	r := &running{cancel: rcancel, done: make(chan error, 1)}
	go func() { r.done <- cli.Run(rctx) }()
	t.Cleanup(func() { r.stop(t) })

	long := openEcho(t, lnA.Addr().String())
	viaB := openEcho(t, lnB.Addr().String())

	// Remove b's forward, add one to b on another port, and a new key.
	lnC := testutil.Listen(t)
	if err := cli.Reload(ClientLive{PSK: testPSK(2), Forwards: []Forward{{Listener: lnA, Service: "a"}, {Listener: lnC, Service: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", lnB.Addr().String(), time.Second); err == nil {
		t.Errorf("the removed forward still accepts connections")
	}
	openEcho(t, lnC.Addr().String())
	eventually(t, 5*time.Second, "a second link, made with the new key", func() bool {
		return countLogs(logs, "link up", map[string]string{"client": "alice"}) == 2
	})
	// The stream on the old link carries on until it ends; then the old
	// link is retired.
	if err := echoOnce(long, []byte("still here")); err != nil {
		t.Fatalf("the stream on the old link after the key changed: %v", err)
	}
	if err := echoOnce(viaB, []byte("the removed forward's connection")); err != nil {
		t.Fatalf("a connection of a removed forward: %v", err)
	}
	long.Close()
	viaB.Close()
	eventually(t, 5*time.Second, "the old link to be retired", func() bool { return srv.ctr.links.Load() == 1 })
	// Now the server may drop the old key: nothing is left on it.
	if err := srv.Reload(ServerConfig{Options: opt, Services: map[string]string{"a": tgA.addr(), "b": tgB.addr()},
		Clients: []ServerClient{{Name: "alice", Keys: [][]byte{testPSK(2)}, Access: Access{AllServices: true}}}}); err != nil {
		t.Fatal(err)
	}
	openEcho(t, lnA.Addr().String())
	if n := countLogs(logs, "closing link", nil); n != 0 {
		t.Errorf("%d links closed by the server's reload, want 0", n)
	}
	// Re-point a at b.
	if err := cli.Reload(ClientLive{PSK: testPSK(2), Forwards: []Forward{{Listener: lnA, Service: "b"}, {Listener: lnC, Service: "b"}}}); err != nil {
		t.Fatal(err)
	}
	before := tgB.accepted()
	openEcho(t, lnA.Addr().String())
	if tgB.accepted() != before+1 {
		t.Errorf("forward a re-pointed at b did not reach b")
	}
}

// ServerConfig.Check and NewServer refuse clients that can't work, and
// accept a single PSK or clients without one.
func TestServerConfigCheck(t *testing.T) {
	opt := testOptions(zap.NewNop())
	opt.PSK = nil
	svc := map[string]string{"a": "127.0.0.1:1"}
	many := make([]ServerClient, handshake.MaxKeys/2+1)
	for i := range many {
		many[i] = ServerClient{Name: string(rune('a'+i/26)) + string(rune('a'+i%26)), Keys: [][]byte{testPSK(byte(2 * i)), testPSK(byte(2*i + 1))}}
	}
	for name, clients := range map[string][]ServerClient{
		"no psk, no clients": nil,
		"unknown service":    {{Name: "x", Keys: [][]byte{testPSK(1)}, Access: Access{Services: []string{"b"}}}},
		"no key":             {{Name: "x"}},
		"short key":          {{Name: "x", Keys: [][]byte{testPSK(1)[:16]}}},
		"same key twice":     {{Name: "x", Keys: [][]byte{testPSK(1)}}, {Name: "y", Keys: [][]byte{testPSK(1)}}},
		"same name twice":    {{Name: "x", Keys: [][]byte{testPSK(1)}}, {Name: "x", Keys: [][]byte{testPSK(2)}}},
		"too many keys":      many,
	} {
		cfg := ServerConfig{Options: opt, Services: svc, Clients: clients}
		if err := cfg.Check(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Check: %v, want ErrConfig", name, err)
		}
		if _, err := NewServer(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: NewServer: %v, want ErrConfig", name, err)
		}
	}
	ok := ServerConfig{Options: opt, Services: svc, Clients: many[:handshake.MaxKeys/2]}
	if err := ok.Check(); err != nil {
		t.Errorf("%d clients with 2 keys each: %v", handshake.MaxKeys/2, err)
	}
	ok = ServerConfig{Options: testOptions(zap.NewNop()), Services: svc}
	if err := ok.Check(); err != nil {
		t.Errorf("a single PSK: %v", err)
	}
}
