package tunnel

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/proxyproto"
)

// sendFrom dials addr from the loopback address local (dialFrom) and
// writes hdr.
func sendFrom(t *testing.T, local, addr string, hdr []byte) net.Conn {
	t.Helper()
	c, err := dialFrom(local, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if len(hdr) > 0 {
		if _, err := c.Write(hdr); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// proxyDial is a client's Dial that writes a PROXY header naming src
// first, as a load balancer does.
func proxyDial(src netip.AddrPort) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		dst, _ := netip.ParseAddrPort(c.RemoteAddr().String())
		if _, err := c.Write(proxyproto.AppendHeader(nil, src, dst, nil)); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
}

var localHeader = proxyproto.AppendHeader(nil, netip.AddrPort{}, netip.AddrPort{}, nil)

// TestProxyProtocolRealAddress: through a PROXY header the server's logs
// see the client's address, not the balancer's; streams work.
func TestProxyProtocolRealAddress(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	saddr, srv, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echoT.addr()},
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}})
	client := netip.MustParseAddrPort("127.9.9.9:4242")
	addrs, _, _ := startClient(t, ClientConfig{Options: testOptions(log), Server: saddr, Dial: proxyDial(client)}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 1<<20, 3); err != nil {
		t.Fatal(err)
	}
	if up := logs.FilterMessage("link up").FilterFieldKey("remote").All(); len(up) != 1 || up[0].ContextMap()["remote"] != client.String() {
		t.Errorf("want the server's 'link up' with remote %v: %v", client, logs.FilterMessage("link up").All())
	}
	if srv.ppStats.Results[proxyproto.ResultOK].Load() != 1 {
		t.Errorf("ok headers: %d", srv.ppStats.Results[proxyproto.ResultOK].Load())
	}
}

// TestProxyProtocolPerSource: the per-source handshake cap counts the
// address in the header. Two pending connections that name the same
// client: the second evicts the first. Two that name different clients
// both stay, though both come from the same balancer.
func TestProxyProtocolPerSource(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	saddr, srv, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"x": "127.0.0.1:9"},
		MaxHandshakes: 8, MaxHandshakesPerSource: 1,
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	dst := netip.MustParseAddrPort(saddr)
	hdr := func(src string) []byte { return proxyproto.AppendHeader(nil, netip.MustParseAddrPort(src), dst, nil) }
	sendFrom(t, "127.0.0.1", saddr, hdr("127.20.0.1:1000"))
	sendFrom(t, "127.0.0.1", saddr, hdr("127.20.0.2:1000"))
	eventually(t, 5*time.Second, "two pending handshakes", func() bool { return srv.slots.Len() == 2 })
	if n := srv.ctr.handshakes[hsDropped].Load(); n != 0 {
		t.Fatalf("two clients behind one balancer: %d dropped", n)
	}
	sendFrom(t, "127.0.0.1", saddr, hdr("127.20.0.1:1001"))
	eventually(t, 5*time.Second, "the same client's older connection dropped", func() bool { return srv.ctr.handshakes[hsDropped].Load() == 1 })
	if n := srv.slots.Len(); n != 2 {
		t.Errorf("pending handshakes: %d, want 2", n)
	}
}

// TestProxyProtocolRefusals: a connection from outside proxy_protocol_from
// is reset unread; a missing, malformed or late header closes the
// connection; refusals are logged once per interval; a LOCAL health check
// is counted, not logged; header slots are bounded.
func TestProxyProtocolRefusals(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	saddr, srv, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echoT.addr()},
		MaxHandshakes: 4,
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, HeaderTimeout: 300 * time.Millisecond}})
	dst := netip.MustParseAddrPort(saddr)
	good := proxyproto.AppendHeader(nil, netip.MustParseAddrPort("127.30.0.1:1"), dst, nil)
	// refused dials from local, writes hdr and reads: the error that
	// ends the connection (a reset may already fail the dial or write).
	refused := func(local string, hdr []byte) error {
		c, err := dialFrom(local, saddr)
		if err != nil {
			return err
		}
		defer c.Close()
		if len(hdr) > 0 {
			if _, err := c.Write(hdr); err != nil {
				return err
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Read(make([]byte, 1))
		return err
	}
	closed := func(c net.Conn) error {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		return err
	}

	// Not from a balancer: reset though the header is good.
	for range 5 {
		if err := refused("127.0.0.3", good); err == nil || isTimeout(err) {
			t.Errorf("connection from 127.0.0.3: read %v, want it closed", err)
		}
	}
	// From the balancer without a header, with a v1 header, with a
	// truncated one: closed.
	for _, in := range [][]byte{[]byte("not a header at all, just bytes"), []byte("PROXY TCP4 127.0.0.1 127.0.0.1 1 2\r\n"), good[:20]} {
		if err := refused("127.0.0.2", in); err == nil || isTimeout(err) {
			t.Errorf("bad header %q: read %v, want it closed", in, err)
		}
	}
	// A client that dials straight past the balancer (from 127.0.0.1).
	lg, _ := testutil.ObservedLogger(t)
	addrs, _, crun := startClient(t, ClientConfig{Options: testOptions(lg), Server: saddr, RedialMin: time.Second}, "echo")
	direct, err := net.Dial("tcp", addrs["echo"])
	if err != nil {
		t.Fatal(err)
	}
	if err := closed(direct); err == nil || isTimeout(err) {
		t.Errorf("client without the balancer: %v, want a refused stream", err)
	}
	direct.Close()
	crun.stop(t)
	// LOCAL that closes at once: a health check.
	for range 3 {
		sendFrom(t, "127.0.0.2", saddr, localHeader).Close()
	}
	defer func() {
		for i := range proxyproto.NumResults {
			t.Logf("%s: %d", i, srv.ppStats.Results[i].Load())
		}
	}()
	eventually(t, 5*time.Second, "the outcomes counted", func() bool {
		// Refused: 5 and the client's dials; bad: garbage and v1; the
		// truncated header waits for the rest until the timeout.
		return srv.ppStats.Results[proxyproto.ResultRefused].Load() >= 6 && srv.ppStats.Results[proxyproto.ResultBad].Load() == 2 &&
			srv.ppStats.Results[proxyproto.ResultTimeout].Load() == 1 && srv.ppStats.Results[proxyproto.ResultLocal].Load() == 3
	})
	// Silence: timeout.
	if err := refused("127.0.0.2", nil); err == nil || isTimeout(err) {
		t.Errorf("silent connection: %v, want it closed after the header timeout", err)
	}
	if n := srv.ppStats.Results[proxyproto.ResultTimeout].Load(); n != 2 {
		t.Errorf("timeouts: %d", n)
	}
	if n := logs.FilterMessage("refused a connection that is not from a load balancer in proxy_protocol_from").Len(); n != 1 {
		t.Errorf("%d refusal lines for 5 refusals, want 1 (rate limited)", n)
	}
	if n := logs.FilterMessage("closed a connection without a valid PROXY protocol header").Len(); n != 1 {
		t.Errorf("%d bad-header lines, want 1 (rate limited)", n)
	}
	if srv.ctr.handshakes[hsOK].Load() != 0 || srv.ctr.handshakesFailed() != 0 {
		t.Errorf("refused connections reached the handshake")
	}
	// Header slots: as many as handshake slots (4); while they are all
	// taken, the listener accepts nothing more: a fifth connection waits
	// (in the kernel's listen queue, or accepted and counted busy) until
	// a slot frees, rather than being reset.
	eventually(t, 5*time.Second, "no header slot taken", func() bool { return srv.ppStats.Pending.Load() == 0 })
	var silent []net.Conn
	for range 4 {
		silent = append(silent, sendFrom(t, "127.0.0.2", saddr, good[:3]))
	}
	eventually(t, 5*time.Second, "four waiting", func() bool { return srv.ppStats.Pending.Load() == 4 })
	fifth := sendFrom(t, "127.0.0.2", saddr, good[:3])
	eventually(t, 5*time.Second, "the fifth counted busy", func() bool { return srv.ppStats.Results[proxyproto.ResultBusy].Load() == 1 })
	_ = fifth.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := fifth.Read(make([]byte, 1)); !isTimeout(err) {
		t.Errorf("fifth connection while the header slots are full: %v, want it to wait", err)
	}
	silent[0].Close()
	// The fifth takes the freed slot and times out in its header, as the
	// other three do.
	if err := closed(fifth); err == nil || isTimeout(err) {
		t.Errorf("fifth connection after a slot freed: %v, want it read and closed at its header timeout", err)
	}
	for _, c := range silent {
		c.Close()
	}
}

// TestProxyProtocolLocalServed: a LOCAL connection that goes on to send a
// handshake is served with the balancer's own address, as the spec says.
func TestProxyProtocolLocalServed(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	saddr, srv, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"echo": echoT.addr()},
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			_, err = c.Write(localHeader)
		}
		return c, err
	}
	addrs, _, _ := startClient(t, ClientConfig{Options: testOptions(log), Server: saddr, Dial: dial}, "echo")
	if err := testutil.EchoRoundTrip(addrs["echo"], 100000, 4); err != nil {
		t.Fatal(err)
	}
	up := logs.FilterMessage("link up").FilterFieldKey("remote").All()
	if len(up) != 1 || !isLoopback127(up[0].ContextMap()["remote"]) || srv.ppStats.Results[proxyproto.ResultServed].Load() != 1 {
		t.Errorf("link up %v, local served %d", up, srv.ppStats.Results[proxyproto.ResultServed].Load())
	}
}

func isLoopback127(v any) bool {
	s, _ := v.(string)
	ap, err := netip.ParseAddrPort(s)
	return err == nil && ap.Addr() == netip.MustParseAddr("127.0.0.1") && ap.Port() != 0
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestProxyProtocolPendingCost: connections that stop in the middle of
// their header cost a few KiB each (the goroutine's stack with its 2 KiB
// header buffer, the socket), and no more of them are held than there
// are header slots.
func TestProxyProtocolPendingCost(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	const slots = 64
	saddr, srv, _ := startServer(t, ServerConfig{Options: testOptions(log), Services: map[string]string{"x": "127.0.0.1:9"},
		MaxHandshakes: slots, MaxHandshakesPerSource: slots,
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, HeaderTimeout: time.Minute}})
	dst := netip.MustParseAddrPort(saddr)
	// The fixed part says 2 KiB follow; 100 bytes of them come.
	hdr := proxyproto.AppendHeader(nil, netip.MustParseAddrPort("127.40.0.1:1"), dst, make([]byte, proxyproto.MaxBody-12))
	hdr = hdr[:proxyproto.FixedLen+100]
	mem := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc + ms.StackInuse
	}
	before := mem()
	for range 2 * slots {
		c, err := dialFrom("127.0.0.1", saddr)
		if err != nil {
			continue
		}
		defer c.Close()
		_, _ = c.Write(hdr)
	}
	// The rest wait: one accepted (counted busy) for the next free slot,
	// the others in the kernel's listen queue.
	eventually(t, 10*time.Second, "the slots full and the rest waiting", func() bool {
		return srv.ppStats.Pending.Load() == slots && srv.ppStats.Results[proxyproto.ResultBusy].Load() == 1
	})
	per := (int64(mem()) - int64(before)) / slots
	t.Logf("%d connections in their header: %d bytes each (heap and stacks, this process's client ends included)", slots, per)
	if per > 32<<10 {
		t.Errorf("a pending header costs %d bytes, want a few KiB", per)
	}
}
