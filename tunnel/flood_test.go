package tunnel

import (
	"crypto/rand"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"

	"github.com/offload-dev/offload/internal/testutil"
)

// slowFirstWrite delays the first Write on a connection: a client router
// whose CPU is busy, or that makes its ephemeral key (an X25519 scalar
// multiplication, milliseconds on a MIPS router) after connect returns,
// sends its first flight some time after the server could accept the
// connection.
type slowFirstWrite struct {
	net.Conn
	delay time.Duration
	once  sync.Once
}

func (c *slowFirstWrite) Write(p []byte) (int, error) {
	c.once.Do(func() { time.Sleep(c.delay) })
	return c.Conn.Write(p)
}

// TestAttackFloodManySourcesSlowClient: a flood of connections that send part
// of a hello, or nothing, from many addresses (64: one IPv6 /58 holds as
// many /64s), each address with at most one connection pending, beside
// genuine clients whose first flight leaves 30 ms after their TCP
// handshake. The per-source policy can't single the flood out (every
// source has one pending connection, the genuine client too), so the
// slot a genuine client holds between accept and the arrival of its
// flight is the oldest incomplete one soon enough and was given to the
// flood: most genuine handshakes were reset. The server now has the
// kernel hold a connection until its first bytes arrive (TCP_DEFER_ACCEPT
// on Linux), so a genuine client is accepted with its whole first flight
// (80 bytes, one segment), which no flood may take.
func TestAttackFloodManySourcesSlowClient(t *testing.T) {
	testutil.LeakCheck(t)
	needSource(t, "127.1.0.1")
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	// The flood holds its connections 2 s and the slots do the evicting:
	// a genuine handshake that is slow beside the flood (under -race on a
	// busy machine) must fail for want of a slot, not of time.
	opt.HandshakeTimeout = 20 * time.Second
	cfg := ServerConfig{Options: opt, Services: map[string]string{"x": "127.0.0.1:1"}, MaxHandshakes: 16, MaxLinks: 100}
	addr, srv, _ := startServer(t, cfg)
	opt.setDefaults()

	const sources = 64
	// Every other connection writes part of a hello, then nothing.
	flooded, stop := flood(t, 8, 2*time.Second,
		func(w, n int) (net.Conn, error) {
			return dialFrom(net.IPv4(127, 1, 0, byte(1+(n*8+w)%sources)).String(), addr)
		},
		func(_, n int) []byte {
			if n%2 == 0 {
				return []byte("OFLD\x02")
			}
			return nil
		})
	eventually(t, time.Minute, "the flood to fill the slots", func() bool { return srv.ctr.handshakes[hsDropped].Load() > 200 })

	const clients, each = 4, 5
	failed := runGenuine(t, opt, clients, each, func(i int) (net.Conn, error) {
		c, err := dialFrom(net.IPv4(127, 0, 1, byte(1+i)).String(), addr)
		if err != nil {
			return nil, err
		}
		return &slowFirstWrite{Conn: c, delay: 30 * time.Millisecond}, nil
	})
	stop()
	okN := genuineOK(srv, clients*each, failed)
	t.Logf("flood: %d connections from %d sources, %d evicted, %d refused; genuine: %d of %d ok on the server, %d failed on the client",
		flooded.Load(), sources, srv.ctr.handshakes[hsDropped].Load(), srv.ctr.handshakes[hsRefused].Load(), okN, clients*each, failed)
	if failed != 0 || okN != clients*each {
		t.Errorf("%d of %d genuine handshakes failed beside the flood", clients*each-int(okN), clients*each)
	}
}

// TestAttackWrongKeyFloodManyKeys: a server with 64 keys (clients:) tries every
// first flight under each, 64 trials, so a flood of well-formed flights
// under no key from 32 addresses, faster than the server can try them,
// fills every handshake slot with complete flights. A new connection then
// found nothing it could take and was reset, a genuine client's too:
// against the built server 50-69% of genuine handshakes got through. The
// server now remembers the sources whose flights failed the trial; a
// connection from any other source may take the slot of such a source's
// complete flight that the handshake has not begun to read yet, which
// costs nothing to give up.
func TestAttackWrongKeyFloodManyKeys(t *testing.T) {
	testutil.LeakCheck(t)
	needSource(t, "127.1.0.1")
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.HandshakeTimeout = 20 * time.Second // as in TestAttackFloodManySourcesSlowClient
	var clients []ServerClient
	for i := range handshake.MaxKeys {
		clients = append(clients, ServerClient{Name: fmt.Sprintf("c%d", i), Keys: [][]byte{testPSK(byte(100 + i))}, Access: Access{AllServices: true}})
	}
	cfg := ServerConfig{Options: opt, Services: map[string]string{"x": "127.0.0.1:1"}, Clients: clients, MaxHandshakes: 16, MaxHandshakesPerSource: 4, MaxLinks: 100}
	addr, srv, _ := startServer(t, cfg)
	opt.setDefaults()
	opt.PSK = testPSK(byte(100 + handshake.MaxKeys - 1)) // the last key: the most trials
	prefix, n := handshake.FlightHeader(opt.Suite)

	const sources = 32
	// Well-formed first flights under no key.
	flooded, stop := flood(t, 8, 2*time.Second,
		func(w, k int) (net.Conn, error) {
			return dialFrom(net.IPv4(127, 1, 0, byte(1+(k*8+w)%sources)).String(), addr)
		},
		func(int, int) []byte {
			flight := make([]byte, n)
			copy(flight, prefix)
			_, _ = rand.Read(flight[len(prefix):])
			return flight
		})
	eventually(t, time.Minute, "the flood to fill the slots with complete flights", func() bool {
		return srv.ctr.handshakes[hsRefused].Load()+srv.ctr.handshakes[hsDropped].Load() > 200
	})

	const genuineN, each = 4, 5
	failed := runGenuine(t, opt, genuineN, each, func(i int) (net.Conn, error) {
		return dialFrom(net.IPv4(127, 0, 1, byte(1+i)).String(), addr)
	})
	stop()
	okN := genuineOK(srv, genuineN*each, failed)
	t.Logf("flood: %d flights under no key from %d sources, %d tried (auth), %d refused, %d dropped; genuine: %d of %d ok on the server, %d failed on the client",
		flooded.Load(), sources, srv.ctr.handshakes[hsAuth].Load(), srv.ctr.handshakes[hsRefused].Load(), srv.ctr.handshakes[hsDropped].Load(), okN, genuineN*each, failed)
	if failed != 0 || okN != genuineN*each {
		t.Errorf("%d of %d genuine handshakes failed beside the flood", genuineN*each-int(okN), genuineN*each)
	}
}
