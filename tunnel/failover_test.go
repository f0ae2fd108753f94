package tunnel

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/internal/testutil"
)

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T, network, host string) string {
	t.Helper()
	ln, err := net.Listen(network, net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

// TestFailoverFirstDead: the first server in the list refuses
// connections; the client moves to the second and carries streams there.
func TestFailoverFirstDead(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	b, _, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echoT.addr()}})
	a := deadAddr(t, "tcp", "127.0.0.1")
	addrs, cli, _ := startClient(t, ClientConfig{Options: testOptions(log), Servers: []string{a, b},
		RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 1<<20, 1); err != nil {
		t.Fatal(err)
	}
	failed := logs.FilterMessage("link failed; redialling").All()
	if len(failed) == 0 || failed[0].ContextMap()["server"] != a || failed[0].ContextMap()["next"] != b {
		t.Errorf("want a 'link failed; redialling' line for %s with next %s, got %v", a, b, failed)
	}
	up := logs.FilterMessage("link up").FilterFieldKey("server").All()
	if len(up) != 1 || up[0].ContextMap()["server"] != b {
		t.Errorf("want one 'link up' on %s, got %v", b, up)
	}
	set := metrics.NewSet()
	cli.RegisterMetrics(set)
	var m bytes.Buffer
	set.WritePrometheus(&m)
	for _, want := range []string{"offload_failovers_total 1\n", `offload_server{server="` + b + `"} 1`, `offload_server{server="` + a + `"} 0`} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, m.String())
		}
	}
}

// TestFailoverServerStops: two servers; the one the client is linked to
// stops. The stream open on it ends with a reset (never a clean end), and
// new connections go through the other server.
func TestFailoverServerStops(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	holdT := startTarget(t, func(c net.Conn) {
		_, _ = c.Write([]byte("hello"))
		_, _ = io.Copy(io.Discard, c)
	})
	services := map[string]string{"echo": echoT.addr(), "hold": holdT.addr()}
	log, logs := testutil.ObservedLogger(t)
	a, _, arun := startServer(t, ServerConfig{Options: testOptions(log), Services: services})
	b, _, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: services})
	addrs, cli, _ := startClient(t, ClientConfig{Options: testOptions(log), Servers: []string{a, b},
		RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo", "hold")
	if err := testutil.EchoRoundTrip(addrs["echo"], 100000, 1); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", addrs["hold"])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	arun.stop(t) // drain_timeout 0: the open stream is cut
	if err := readErr(c); !isAbortive(err) {
		t.Errorf("the stream open on the stopped server ended with %v, want a reset", err)
	}
	for i := range 4 {
		if err := testutil.EchoRoundTrip(addrs["echo"], 1<<20, uint64(i+2)); err != nil {
			t.Fatalf("new stream %d after the failover: %v", i, err)
		}
	}
	up := logs.FilterMessage("link up").FilterField(zap.String("server", b)).Len()
	if up != 1 || cli.ctr.links.Load() != 1 {
		t.Errorf("want the client linked to %s (link up lines: %d, links %d)", b, up, cli.ctr.links.Load())
	}
}

// TestFailoverKeyRollStays: a new key (Reload) makes a new link on the
// same server, not the next: the server is fine.
func TestFailoverKeyRollStays(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	// Both servers take the old and the new key, as during a rotation.
	sopt := testOptions(log)
	clients := []ServerClient{{Name: "c", Keys: [][]byte{testPSK(7), testPSK(8)}, Access: Access{AllServices: true}}}
	a, _, _ := startServer(t, ServerConfig{Options: sopt, Services: map[string]string{"echo": echoT.addr()}, Clients: clients})
	b, _, _ := startServer(t, ServerConfig{Options: sopt, Services: map[string]string{"echo": echoT.addr()}, Clients: clients})
	addrs, cli, _ := startClient(t, ClientConfig{Options: testOptions(log), Servers: []string{a, b},
		RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 100000, 1); err != nil {
		t.Fatal(err)
	}
	if err := cli.Reload(ClientLive{PSK: testPSK(8), Forwards: cli.forwards}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a second link", func() bool {
		return logs.FilterMessage("link up").FilterFieldKey("server").Len() == 2
	})
	if err := testutil.EchoRoundTrip(addrs["echo"], 100000, 2); err != nil {
		t.Fatal(err)
	}
	for _, e := range logs.FilterMessage("link up").FilterFieldKey("server").All() {
		if e.ContextMap()["server"] != a {
			t.Errorf("link up on %v after a key roll, want %s", e.ContextMap()["server"], a)
		}
	}
	if n := cli.servers.Failovers(); n != 0 {
		t.Errorf("%d failovers for a key roll, want 0", n)
	}
}
