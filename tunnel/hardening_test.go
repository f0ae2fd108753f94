package tunnel

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/stream"
)

// firstWrite keeps a copy of the first Write on a connection: what an
// eavesdropper records of a client's first flight.
type firstWrite struct {
	net.Conn
	once  sync.Once
	first []byte
}

func (c *firstWrite) Write(p []byte) (int, error) {
	c.once.Do(func() { c.first = append([]byte(nil), p...) })
	return c.Conn.Write(p)
}

// genuineLink brings up one real link to addr (handshake, record layer,
// yamux) and returns it with the first flight its client sent.
func genuineLink(t *testing.T, addr string, opt Options) (flight []byte, sess *yamux.Session) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fw := &firstWrite{Conn: c}
	keys, err := handshake.Client(context.Background(), fw, opt.handshakeConfig())
	if err != nil {
		c.Close()
		t.Fatalf("genuine handshake: %v", err)
	}
	rc, err := record.New(c, keys, opt.Suite, record.Options{})
	keys.Wipe()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	ycfg := yamux.DefaultConfig()
	ycfg.LogOutput = io.Discard
	ycfg.AcceptBacklog = 1024
	ycfg.EnableKeepAlive = false
	sess, err = yamux.Client(rc, ycfg)
	if err != nil {
		rc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return fw.first, sess
}

func heapInuse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// TestAttackReplayFlood: a first flight recorded from the wire and replayed 300
// times gets no link, costs the server next to no memory, and is logged
// rate-limited. (Protocol version 1 gave every replay a link: record
// layer, yamux session and "link up", about 60 KiB each.)
func TestAttackReplayFlood(t *testing.T) {
	testutil.LeakCheck(t)
	const replays = 300
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	opt := testOptions(log)
	addr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"echo": echoT.addr()}})
	opt.setDefaults()

	flight, sess := genuineLink(t, addr, opt)
	// "link up" once the server settled the resumption offer (this
	// client, as an older one, answers it as a ping), else it is not
	// logged if the link closes first.
	eventually(t, 5*time.Second, "the genuine link", func() bool { return srv.ctr.links.Load() == 1 && logs.FilterMessage("link up").Len() == 1 })
	sess.Close()
	eventually(t, 5*time.Second, "the genuine link to go", func() bool { return srv.ctr.links.Load() == 0 })
	t.Logf("recorded a first flight of %d bytes", len(flight))

	before := heapInuse()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	maxLinks := int64(0)
	for range replays {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		conns = append(conns, c)
		if _, err := c.Write(flight); err != nil {
			t.Fatalf("replay: %v", err)
		}
		// Read what the server answers (v1: its Noise message) so the
		// handshake is done on its side before the next replay.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		var b [64]byte
		_, _ = io.ReadAtLeast(c, b[:], 1)
		maxLinks = max(maxLinks, srv.ctr.links.Load())
	}
	time.Sleep(200 * time.Millisecond) // let any link that is coming come up
	maxLinks = max(maxLinks, srv.ctr.links.Load())
	grew := heapInuse() - before
	ok := srv.ctr.handshakes[hsOK].Load()
	t.Logf("%d replays: %d links up at most, %d handshakes ok, %d refused as replays; heap grew by %d KiB",
		replays, maxLinks, ok, srv.ctr.handshakes[hsReplay].Load(), grew>>10)
	if maxLinks != 0 || ok != 1 {
		t.Errorf("replays got links: %d up at most, %d handshakes ok (want 0 and the genuine 1)", maxLinks, ok)
	}
	// Both ends of the replays' TCP connections live in this process; a
	// link each would be about 60 KiB, 18 MiB for all.
	if grew > 4<<20 {
		t.Errorf("heap grew by %d MiB for %d replays", grew>>20, replays)
	}
	if n := logs.FilterMessage("link up").Len(); n != 1 {
		t.Errorf("%d link up lines, want the genuine one", n)
	}
	if n := logs.FilterMessage("handshake failed").Len(); n > 2 {
		t.Errorf("%d handshake failure lines for %d replays, want them rate-limited", n, replays)
	}
	// A genuine client still gets in.
	_, sess = genuineLink(t, addr, opt)
	eventually(t, 5*time.Second, "a new genuine link", func() bool { return srv.ctr.links.Load() == 1 })
	sess.Close()
}

// needSource skips the test when this machine can't dial from the
// loopback address src (the flood tests need several sources).
func needSource(t *testing.T, src string) {
	t.Helper()
	if c, err := dialFrom(src, "127.0.0.1:1"); err != nil && !errors.Is(err, syscall.ECONNREFUSED) {
		t.Skipf("can't dial from %s: %v", src, err)
	} else if c != nil {
		c.Close()
	}
}

// flood runs workers goroutines, each opening connections with dial(w, n)
// (w the worker, n its count of attempts), writing first(w, n) on each
// (nothing when it is nil) and holding it until the server drops it or
// hold has passed, until stop is called; stop waits for the workers.
// flooded counts the connections opened.
func flood(t *testing.T, workers int, hold time.Duration, dial func(w, n int) (net.Conn, error), first func(w, n int) []byte) (flooded *atomic.Int64, stop func()) {
	flooded = new(atomic.Int64)
	done := make(chan struct{})
	var wg, held sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				c, err := dial(w, n)
				if err != nil {
					continue
				}
				flooded.Add(1)
				if first != nil {
					if b := first(w, n); b != nil {
						_, _ = c.Write(b)
					}
				}
				held.Add(1)
				go func() {
					defer held.Done()
					_ = c.SetReadDeadline(time.Now().Add(hold))
					_, _ = io.Copy(io.Discard, c)
					c.Close()
				}()
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	// A test that fails before it calls stop must not leave the flood
	// running into the next tests (their leak checks would fail): stop
	// it, and wait for the connections it holds, when the test ends.
	t.Cleanup(func() {
		stop()
		held.Wait()
	})
	return flooded, stop
}

// dialFrom dials addr from the loopback address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 2 * time.Second}
	return d.Dial("tcp", addr)
}

// TestAttackFloodBesideClients: a fast flood of connections that never finish
// their first flight, from a few addresses, runs while genuine clients
// handshake: every genuine handshake completes, and the flood is evicted.
func TestAttackFloodBesideClients(t *testing.T) {
	testutil.LeakCheck(t)
	needSource(t, "127.0.0.2")
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.HandshakeTimeout = 20 * time.Second // as in TestAttackFloodManySourcesSlowClient
	cfg := ServerConfig{Options: opt, Services: map[string]string{"x": "127.0.0.1:1"}, MaxHandshakes: 16, MaxLinks: 100}
	addr, srv, _ := startServer(t, cfg)
	opt.setDefaults()

	// Four sources, each writing part of a hello, then nothing.
	flooded, stop := flood(t, 4, 3*time.Second,
		func(w, _ int) (net.Conn, error) { return dialFrom(net.IPv4(127, 0, 0, byte(2+w)).String(), addr) },
		func(int, int) []byte { return []byte("OFLD\x02") })
	// Let the flood fill the slots first.
	eventually(t, time.Minute, "the flood to fill the slots", func() bool { return srv.ctr.handshakes[hsDropped].Load() > 100 })

	const clients, each = 4, 10
	failed := runGenuine(t, opt, clients, each, func(i int) (net.Conn, error) {
		return dialFrom(net.IPv4(127, 0, 1, byte(1+i)).String(), addr) // each client its own address
	})
	stop()
	okN := genuineOK(srv, clients*each, failed)
	t.Logf("flood: %d connections, %d evicted, %d refused; genuine: %d of %d ok on the server, %d failed on the client",
		flooded.Load(), srv.ctr.handshakes[hsDropped].Load(), srv.ctr.handshakes[hsRefused].Load(), okN, clients*each, failed)
	if failed != 0 || okN != clients*each {
		t.Errorf("%d of %d genuine handshakes failed beside the flood", clients*each-int(okN), clients*each)
	}
	eventually(t, 5*time.Second, "the slots to empty", func() bool { return srv.slots.Len() == 0 })
}

// neverReads is a target that accepts and never reads, with a small
// receive buffer so that the kernel holds little for it.
func neverReads(t *testing.T) string {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestAttackLinkBuffer: a client with the PSK opens many more streams than the
// link budget holds, each sending to a target that never reads: the
// server's stream buffers stay within link_buffer, and the excess streams
// are reset rather than left hanging.
func TestAttackLinkBuffer(t *testing.T) {
	testutil.LeakCheck(t)
	const streams, perStream = 64, 1 << 20
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.YamuxWindow = 256 << 10
	opt.LinkBuffer = 4 << 20
	// The server's connections to the sink get small send buffers too:
	// else the kernel takes a megabyte per stream, and the stream buffers
	// the budget bounds never fill.
	addr, srv, _ := startServerTuned(t, testutil.Listen(t), ServerConfig{Options: opt, Services: map[string]string{"sink": neverReads(t)}}, func(s *Server) {
		s.dialer.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096) })
			return errors.Join(err, serr)
		}
	})
	opt.setDefaults()
	_, sess := genuineLink(t, addr, opt)
	before := heapInuse()

	req, _ := stream.AppendRequest(nil, stream.KindService, "sink")
	chunk := make([]byte, stream.ChunkHeader+stream.MaxChunk)
	binary.BigEndian.PutUint32(chunk, stream.MaxChunk)
	var wg sync.WaitGroup
	var reset, opened atomic.Int64
	var sts []*yamux.Stream
	for range streams {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		sts = append(sts, st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = st.SetWriteDeadline(time.Now().Add(3 * time.Second))
			if _, err := st.Write(req); err != nil {
				return
			}
			opened.Add(1)
			for sent := 0; sent < perStream; sent += stream.MaxChunk {
				if _, err := st.Write(chunk); err != nil {
					if errors.Is(err, yamux.ErrConnectionReset) || errors.Is(err, yamux.ErrStreamClosed) {
						reset.Add(1)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	grew := heapInuse() - before
	t.Logf("%d streams of %d KiB to a target that never reads (window %d KiB, link_buffer %d KiB, max_streams %d): heap grew by %d KiB, %d streams reset",
		streams, perStream>>10, opt.YamuxWindow>>10, opt.LinkBuffer>>10, opt.MaxStreams, grew>>10, reset.Load())
	// The budget counts the data yamux may buffer; its bytes.Buffer can
	// allocate up to twice the data it holds, so the heap may grow by up
	// to twice the budget (without it: 64 streams x 256 KiB, 16 MiB of
	// data). On top come costs outside the budget that do not grow with
	// the streams: both ends' record-layer pipelines (about 670 KiB each,
	// docs/protocol.md), the pooled copy buffers of the streams served
	// (docs/defences.md) and the goroutines: 2 MiB for all of them.
	const outside = 2 << 20
	if limit := 2*int64(opt.LinkBuffer) + outside; grew > limit {
		t.Errorf("heap grew by %d KiB, budget %d KiB", grew>>10, limit>>10)
	}
	if reset.Load() == 0 {
		t.Errorf("no stream beyond the budget was reset")
	}
	if n := srv.ctr.backlogResets.Load(); n == 0 || n > streams {
		t.Errorf("server counted %d streams reset at the link's cap", n)
	}
	for _, st := range sts {
		st.Close()
	}
	sess.Close()
	eventually(t, 5*time.Second, "the link to go", func() bool { return srv.ctr.links.Load() == 0 })
}

// TestMaxLinks: a client's new link beyond max_links_per_client replaces
// its oldest (which a redialling client has given up), so one client can
// never hold the links others need; a client with no link beyond
// max_links is refused with a busy alert, and gets in once one is freed.
func TestMaxLinks(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	clients := []ServerClient{
		{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{AllServices: true}},
		{Name: "bob", Keys: [][]byte{testPSK(2)}, Access: Access{AllServices: true}},
		{Name: "carol", Keys: [][]byte{testPSK(3)}, Access: Access{AllServices: true}},
	}
	addr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"x": "127.0.0.1:1"},
		Clients: clients, MaxLinks: 2, MaxLinksPerClient: 1})
	opt.setDefaults()
	as := func(b byte) Options { o := opt; o.PSK = testPSK(b); return o }
	links := func(n int64) func() bool { return func() bool { return srv.ctr.links.Load() == n } }

	_, a1 := genuineLink(t, addr, as(1))
	eventually(t, 5*time.Second, "alice's link", links(1))
	_, a2 := genuineLink(t, addr, as(1))
	select {
	case <-a1.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("alice's second link did not replace her first")
	}
	_, b1 := genuineLink(t, addr, as(2))
	eventually(t, 5*time.Second, "alice's and bob's links", links(2))
	if n := srv.ctr.linksReplaced.Load(); n != 1 {
		t.Errorf("%d links replaced, want 1", n)
	}

	// Full, and carol has no link to replace: busy.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	carol := as(3)
	_, err = handshake.Client(context.Background(), c, carol.handshakeConfig())
	c.Close()
	if !errors.Is(err, handshake.ErrBusy) {
		t.Fatalf("carol with the links full: %v, want ErrBusy", err)
	}
	// Full, but bob has one: his new link replaces it.
	_, b2 := genuineLink(t, addr, as(2))
	select {
	case <-b1.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("bob's new link did not replace his old one while the links were full")
	}
	if srv.ctr.handshakes[hsBusy].Load() != 1 || srv.ctr.links.Load() != 2 || srv.ctr.linksReplaced.Load() != 2 {
		t.Fatalf("busy %d, links %d, replaced %d; want 1, 2, 2",
			srv.ctr.handshakes[hsBusy].Load(), srv.ctr.links.Load(), srv.ctr.linksReplaced.Load())
	}
	if a2.IsClosed() || b2.IsClosed() {
		t.Fatal("a newest link was closed")
	}
	a2.Close()
	eventually(t, 5*time.Second, "alice's link to go", links(1))
	_, c1 := genuineLink(t, addr, as(3))
	eventually(t, 5*time.Second, "carol's link", links(2))
	b2.Close()
	c1.Close()
	eventually(t, 5*time.Second, "the links to go", links(0))
}

// TestAttackOneClientCannotHoldTheLinks: at the defaults, a client that opens
// link after link (a stolen key, a broken client) keeps
// max_links_per_client of them and every other client still comes up.
func TestAttackOneClientCannotHoldTheLinks(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	clients := []ServerClient{
		{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{AllServices: true}},
		{Name: "bob", Keys: [][]byte{testPSK(2)}, Access: Access{AllServices: true}},
	}
	addr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"x": "127.0.0.1:1"}, Clients: clients})
	opt.setDefaults()
	bob := opt
	bob.PSK = testPSK(2)
	var sessions []*yamux.Session
	for range 3 * DefaultMaxLinks {
		_, s := genuineLink(t, addr, bob)
		sessions = append(sessions, s)
	}
	eventually(t, 5*time.Second, "bob at his cap", func() bool {
		return srv.ctr.links.Load() == DefaultMaxLinksPerClient && srv.clientCounters("bob").links.Load() == DefaultMaxLinksPerClient
	})
	alice := opt
	alice.PSK = testPSK(1)
	_, a := genuineLink(t, addr, alice)
	eventually(t, 5*time.Second, "alice's link", func() bool { return srv.clientCounters("alice").links.Load() == 1 })
	if n := srv.ctr.handshakes[hsBusy].Load(); n != 0 {
		t.Errorf("%d clients refused busy", n)
	}
	var b strings.Builder
	srv.ctr.writePrometheus(&b)
	for _, want := range []string{`offload_limit{role="server",name="max_links"} 4`, `offload_limit{role="server",name="max_links_per_client"} 2`,
		fmt.Sprintf("offload_links_replaced_total %d", 3*DefaultMaxLinks-DefaultMaxLinksPerClient)} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	a.Close()
	for _, s := range sessions {
		s.Close()
	}
	eventually(t, 5*time.Second, "the links to go", func() bool { return srv.ctr.links.Load() == 0 })
}

func TestLinkCaps(t *testing.T) {
	for _, c := range []struct{ links, per, clients, wantLinks, wantPer int }{
		{0, 0, 0, DefaultMaxLinks, DefaultMaxLinksPerClient},
		{0, 0, 1, DefaultMaxLinks, DefaultMaxLinksPerClient},
		{0, 0, 10, 20, 2},
		{0, 3, 10, 30, 3},
		{5, 0, 10, 5, 2},
		{0, 1, 2, DefaultMaxLinks, 1},
	} {
		l, p := LinkCaps(c.links, c.per, c.clients)
		if l != c.wantLinks || p != c.wantPer {
			t.Errorf("LinkCaps(%d, %d, %d) = %d, %d; want %d, %d", c.links, c.per, c.clients, l, p, c.wantLinks, c.wantPer)
		}
	}
	if _, err := NewServer(ServerConfig{Options: testOptions(nil), Services: map[string]string{"x": "127.0.0.1:1"}, MaxLinks: 1, MaxLinksPerClient: 2}); err == nil {
		t.Error("max_links_per_client over max_links accepted")
	}
}

// runGenuine runs clients genuine clients beside a flood, each making each
// handshakes in turn over connections dial(i) makes, closing each soon
// after; it returns when they are done, with the handshakes that failed on
// the client side.
func runGenuine(t *testing.T, opt Options, clients, each int, dial func(i int) (net.Conn, error)) int64 {
	var genuine sync.WaitGroup
	var failed atomic.Int64
	// The genuine clients wait as long as they need: what these tests
	// judge is whether the server lets them through, and a client's own
	// deadline expiring on a starved CPU (a race build beside a CPU hog)
	// says nothing of that. The server keeps its handshake timeout.
	hc := opt.handshakeConfig()
	hc.Timeout = max(hc.Timeout, 30*time.Second)
	for i := range clients {
		genuine.Add(1)
		go func() {
			defer genuine.Done()
			for range each {
				c, err := dial(i)
				if err != nil {
					failed.Add(1)
					t.Logf("genuine dial: %v", err)
					continue
				}
				keys, err := handshake.Client(context.Background(), c, hc)
				if err == nil {
					keys.Wipe()
					// The server counts its side once it read the
					// confirmation; wait for its verdict (a link, then EOF
					// as we close, or a reset if it dropped us).
					time.Sleep(20 * time.Millisecond)
				} else {
					failed.Add(1)
					t.Logf("genuine handshake: %v", err)
				}
				c.Close()
			}
		}()
	}
	genuine.Wait()
	return failed.Load()
}

// genuineOK waits up to 5 s for the server to have counted total genuine
// handshakes ok, less the failed ones, and returns its count.
func genuineOK(srv *Server, total int, failed int64) uint64 {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if srv.ctr.handshakes[hsOK].Load()+uint64(failed) >= uint64(total) {
			break
		}
	}
	return srv.ctr.handshakes[hsOK].Load()
}

// TestLinkDownDuringDrain: a link whose write met a client that had
// already closed (EPIPE, ECONNRESET) is a hang-up once the drain has begun
// (bench stops both ends together, and the drain's GoAway found the
// client gone: TestBenchJSONSoftwareAndUnavailable saw a "link failed"
// warning); before the drain it stays a failure.
func TestLinkDownDuringDrain(t *testing.T) {
	for _, tc := range []struct {
		drain bool
		err   error
		warn  bool
	}{
		{false, fmt.Errorf("record: writev: %w", syscall.EPIPE), true},
		{true, fmt.Errorf("record: writev: %w", syscall.EPIPE), false},
		{true, fmt.Errorf("record: read: %w", syscall.ECONNRESET), false},
		{true, record.ErrAuth, true},
	} {
		log, logs := testutil.ObservedLogger(t)
		srv, err := NewServer(ServerConfig{Options: testOptions(log), Services: map[string]string{"x": "127.0.0.1:1"}})
		if err != nil {
			t.Fatal(err)
		}
		if tc.drain {
			close(srv.stopping)
		}
		l := &link{log: log, ctr: srv.clientCounters("default")}
		srv.linkDown(l, tc.err, time.Second)
		warned := logs.FilterMessage("link failed").Len() == 1
		if warned != tc.warn || (srv.ctr.linkErrors.Load() == 1) != tc.warn {
			t.Errorf("drain %v, %v: warned %v, link errors %d; want a warning and a count: %v",
				tc.drain, tc.err, warned, srv.ctr.linkErrors.Load(), tc.warn)
		}
	}
}
