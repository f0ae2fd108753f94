package tunnel

import (
	"context"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/metrics"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/metricsserver"
)

// The server is healthy while it serves and not while it drains: a
// balancer checking /healthz stops sending it new clients while its open
// streams finish.
func TestServerHealthyWhileDraining(t *testing.T) {
	testutil.LeakCheck(t)
	holdT := startTarget(t, func(c net.Conn) {
		_, _ = c.Write([]byte("hello"))
		_, _ = io.Copy(io.Discard, c)
	})
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.DrainTimeout = 20 * time.Second
	saddr, srv, srun := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"hold": holdT.addr()}})
	eventually(t, 5*time.Second, "healthy", srv.Healthy)
	addrs, cli, _ := startClient(t, ClientConfig{Options: testOptions(log), Server: saddr}, "hold")
	c, err := net.Dial("tcp", addrs["hold"])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 5)); err != nil {
		t.Fatal(err)
	}
	if !cli.Healthy() {
		t.Error("client with a link up is not healthy")
	}
	srun.cancel()
	eventually(t, 5*time.Second, "unhealthy once draining", func() bool { return !srv.Healthy() })
	select {
	case <-srun.done:
		t.Fatal("the server stopped before its stream ended")
	default:
	}
	c.Close()
	srun.stop(t)
	if srv.Healthy() {
		t.Error("healthy after Serve returned")
	}
}

// Every address the tunnel takes works with IPv6 literals on ::1: the
// server's listener, a service target, the client's servers (the first
// dead), its forward, the metrics listener, and proxy_protocol_from (the
// header names an IPv6 client).
func TestIPv6EveryAddress(t *testing.T) {
	testutil.LeakCheck(t)
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback on this machine: %v", err)
	} else {
		ln.Close()
	}
	listen6 := func() net.Listener {
		ln, err := net.Listen("tcp", "[::1]:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	echo := testutil.ServeOn(t, "::1", testutil.Echo)

	log, logs := testutil.ObservedLogger(t)
	saddr, srv, _ := startServerOn(t, listen6(), ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echo},
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("::1/128")}}})
	client := netip.MustParseAddrPort("[::1]:4242")
	dead := deadAddr(t, "tcp", "::1")
	fwd := listen6()
	cli, err := NewClient(ClientConfig{Options: testOptions(log), Servers: []string{dead, saddr}, Dial: proxyDial(client),
		Forwards: []Forward{{Listener: fwd, Service: "echo"}}, RedialMin: 20 * time.Millisecond, RedialMax: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cli.Run(ctx) }()
	defer func() { cancel(); <-done }()

	mln := listen6()
	set := metrics.NewSet()
	srv.RegisterMetrics(set)
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan error, 1)
	go func() {
		mdone <- metricsserver.Serve(mctx, mln, metricsserver.Options{Metrics: metricsPage(set), Logger: log, Health: srv.Healthy})
	}()
	defer func() { mcancel(); <-mdone }()

	if err := testutil.EchoRoundTrip(fwd.Addr().String(), 1<<20, 6); err != nil {
		t.Fatal(err)
	}
	if up := logs.FilterMessage("link up").FilterFieldKey("remote").All(); len(up) != 1 || up[0].ContextMap()["remote"] != client.String() {
		t.Errorf("server's link up: %v, want remote %v", up, client)
	}
	if up := logs.FilterMessage("link up").FilterFieldKey("server").All(); len(up) != 1 || up[0].ContextMap()["server"] != saddr {
		t.Errorf("client's link up: %v, want server %v", up, saddr)
	}
	if code, body := testutil.Request(t, "GET", mln.Addr().String(), "/healthz"); code != 200 {
		t.Errorf("/healthz on %v: %d %q", mln.Addr(), code, body)
	}
	if code, body := testutil.Request(t, "GET", mln.Addr().String(), "/metrics"); code != 200 || !strings.Contains(body, "offload_proxy_headers_total{result=\"ok\"} 1\n") {
		t.Errorf("/metrics on %v: %d\n%s", mln.Addr(), code, body)
	}
}
