package tunnel

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/proxyproto"

	"github.com/offload-dev/offload/internal/testutil"
)

// TestAttackProxyProtocolFloodOneClient: behind a load balancer, one client
// address floods connections that send part of a hello, as fast as it
// can, beside genuine clients with other addresses. The per-source cap
// must hold through the balancer: the flood costs its own source, not the
// others. It did not: the PROXY reader hands a connection whose header it
// read to the accept loop and holds its header slot while it waits, so
// when the flood came faster than the accept loop took connections, the
// waiting flood filled every header slot and new connections, the genuine
// ones included, were reset as busy (against the built server, 9 of 29
// genuine handshakes got through). Now a source may have at most
// max_handshakes_per_source connections waiting to be handed over; a
// further one from it is reset at once and counted as dropped.
func TestAttackProxyProtocolFloodOneClient(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	saddr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"x": "127.0.0.1:9"},
		MaxHandshakes: 16, MaxHandshakesPerSource: 4, MaxLinks: 100,
		ProxyProtocol: &ProxyProtocol{From: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}})
	opt.setDefaults()
	dst := netip.MustParseAddrPort(saddr)

	// One client address behind the balancer: a header, part of a hello.
	flooded, stop := flood(t, 8, 2*time.Second,
		func(int, int) (net.Conn, error) { return net.Dial("tcp", saddr) },
		func(w, n int) []byte {
			src := netip.AddrPortFrom(netip.MustParseAddr("203.0.113.5"), uint16(1000+w*10000+n%10000))
			return append(proxyproto.AppendHeader(nil, src, dst, nil), "OFLD\x02"...)
		})
	eventually(t, time.Minute, "the flood to be dropped", func() bool { return srv.ctr.handshakes[hsDropped].Load() > 200 })

	const clients, each = 4, 5
	failed := runGenuine(t, opt, clients, each, func(i int) (net.Conn, error) {
		return proxyDial(netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + i)}), 4000))(context.Background(), "tcp", saddr)
	})
	stop()
	okN := genuineOK(srv, clients*each, failed)
	t.Logf("flood: %d connections from one client address, %d dropped, %d header slots busy; genuine: %d of %d ok on the server, %d failed on the client",
		flooded.Load(), srv.ctr.handshakes[hsDropped].Load(), srv.ppStats.Results[proxyproto.ResultBusy].Load(), okN, clients*each, failed)
	if failed != 0 || okN != clients*each {
		t.Errorf("%d of %d genuine handshakes failed beside one client's flood", clients*each-int(okN), clients*each)
	}
}
