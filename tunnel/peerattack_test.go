package tunnel

import (
	"context"
	"encoding/binary"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/mux"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/stream"
)

// rawLink is a peer with the PSK that speaks the record layer but writes
// yamux frames by hand: what a malicious client can send.
func rawLink(t *testing.T, addr string, opt Options) (*record.Conn, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := handshake.Client(context.Background(), c, opt.handshakeConfig())
	if err != nil {
		c.Close()
		t.Fatalf("handshake: %v", err)
	}
	rc, err := record.New(c, keys, opt.Suite, record.Options{})
	keys.Wipe()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc, c
}

// TestAttackPingFlood: a client with the PSK sends yamux pings as fast as it can
// and never reads the replies. yamux answers each ping from a goroutine of
// its own that waits up to 10 s for the send queue, so once the replies
// back up every ping held a goroutine (and, when it gave up, logged a
// line): 1.5 s of pings made hundreds of thousands. The server must stay
// bounded: cut the link, hold a handful of goroutines, log little.
func TestAttackPingFlood(t *testing.T) {
	testutil.LeakCheck(t)
	log, logs := testutil.ObservedLogger(t)
	opt := testOptions(log)
	addr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"echo": "127.0.0.1:1"}})
	opt.setDefaults()
	g0 := runtime.NumGoroutine()
	h0 := heapInuse()
	rc, _ := rawLink(t, addr, opt)
	eventually(t, 5*time.Second, "the link", func() bool { return srv.ctr.links.Load() == 1 })

	// 4096 pings per Write, one record frame or so each.
	batch := make([]byte, 0, 4096*12)
	id := uint32(0)
	var maxG atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if n := int64(runtime.NumGoroutine() - g0); n > maxG.Load() {
				maxG.Store(n)
			}
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	sent := 0
	for time.Now().Before(deadline) {
		batch = batch[:0]
		for range 4096 {
			id++
			batch = testutil.YamuxHeader(batch, testutil.YamuxPing, testutil.YamuxSYN, 0, id)
		}
		_ = rc.SetWriteDeadline(deadline)
		if _, err := rc.Write(batch); err != nil {
			break
		}
		sent += 4096
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-sampled
	grew := heapInuse() - h0
	t.Logf("%d pings sent, never read: server goroutines +%d at most, heap +%d KiB, link up: %v, %d log lines",
		sent, maxG.Load(), grew>>10, srv.ctr.links.Load() == 1, logs.Len())
	if maxG.Load() > 1000 {
		t.Errorf("the server held %d goroutines for unanswered pings", maxG.Load())
	}
	if grew > 8<<20 {
		t.Errorf("the server's heap grew by %d MiB", grew>>20)
	}
	rc.Close()
	eventually(t, 15*time.Second, "the link to go", func() bool { return srv.ctr.links.Load() == 0 })
	if n := logs.Len(); n > 50 {
		t.Errorf("%d log lines", n)
	}
	if logs.FilterMessage("link failed").FilterFieldKey("error").Len() == 0 {
		t.Errorf("the flood was not logged as the reason the link failed")
	}
	// The reason is the ping limit's (tunnel/mux), and the link is
	// counted as failed (offload_link_errors_total).
	var reason string
	for _, e := range logs.FilterMessage("link failed").All() {
		if err, ok := e.ContextMap()["error"].(string); ok {
			reason = err
		}
	}
	if !strings.Contains(reason, mux.ErrPingFlood.Error()) {
		t.Errorf("link failed with %q, want %q", reason, mux.ErrPingFlood)
	}
	if srv.ctr.linkErrors.Load() == 0 {
		t.Errorf("the flooded link was not counted as a link error")
	}
}

// TestAttackStrayFrameLogFlood: a client with the PSK sends window updates and
// data for a stream that does not exist, and ACKs for a stream it opened
// itself, 20,000 of each. yamux logs a line per frame ("frame for missing
// stream", "Discarding data for stream", two "established stream without
// inflight SYN" per ACK); a peer must not be able to write the server's log at that
// rate (a router's log is RAM or flash), so they are rate-limited.
func TestAttackStrayFrameLogFlood(t *testing.T) {
	testutil.LeakCheck(t)
	log, logs := testutil.ObservedLogger(t)
	opt := testOptions(log)
	addr, srv, _ := startServer(t, ServerConfig{Options: opt, Services: map[string]string{"echo": "127.0.0.1:1"}})
	opt.setDefaults()
	rc, _ := rawLink(t, addr, opt)
	eventually(t, 5*time.Second, "the link", func() bool { return srv.ctr.links.Load() == 1 })
	const frames = 20000
	var b []byte
	for i := range frames {
		b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, 0, 1001, 1)
		b = testutil.YamuxHeader(b, testutil.YamuxData, 0, 1003+2*uint32(i%8), 4)
		b = append(b, "data"...)
	}
	// A real stream afterwards: the link still works. Before its
	// request, ACKs on it: yamux logs two lines for each ACK of a stream
	// it did not open.
	req, _ := stream.AppendRequest(nil, stream.KindService, "nosuch")
	b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, testutil.YamuxSYN, 1, 0)
	for range frames {
		b = testutil.YamuxHeader(b, testutil.YamuxWindowUpdate, testutil.YamuxACK, 1, 0)
	}
	b = testutil.YamuxHeader(b, testutil.YamuxData, 0, 1, uint32(len(req)))
	b = append(b, req...)
	if _, err := rc.Write(b); err != nil {
		t.Fatal(err)
	}
	// Stream 1 is answered (the server's ACK and refusal): every stray
	// frame before it was read. 60,000 frames through yamux take seconds
	// under -race on a busy machine (47,495 in 10 s once): the deadline
	// only stops a hung test.
	_ = rc.SetReadDeadline(time.Now().Add(2 * time.Minute))
	var got []byte
	buf := make([]byte, 4096)
	for len(got) < 2*12+1 {
		n, err := rc.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("reading the answer to stream 1: %v (%d bytes)", err, len(got))
		}
	}
	n := logs.FilterMessageSnippet("missing stream").Len() + logs.FilterMessageSnippet("Discarding data").Len() +
		logs.FilterMessageSnippet("without inflight SYN").Len()
	t.Logf("%d stray frames: %d log lines about them, %d lines in all", 3*frames, n, logs.Len())
	if n > 10 {
		t.Errorf("%d log lines for %d stray frames", n, 3*frames)
	}
	rc.Close()
	eventually(t, 5*time.Second, "the link to go", func() bool { return srv.ctr.links.Load() == 0 })
}

// TestAttackReverseLinkBuffer: a client with the PSK and reverse_allow opens
// reverse listeners, connections that never read arrive on each, and the
// client sends as much as the windows take on every reverse connection.
// The streams the server opens for reverse connections have receive
// windows too: they must come out of the link's budget, so the server's
// stream buffers stay within link_buffer however many listeners the link
// holds.
func TestAttackReverseLinkBuffer(t *testing.T) {
	testutil.LeakCheck(t)
	log, _ := testutil.ObservedLogger(t)
	opt := testOptions(log)
	opt.YamuxWindow = 256 << 10
	opt.LinkBuffer = 4 << 20
	opt.MaxStreams = 8
	o := opt
	o.setDefaults()
	// 6 listeners of the link's 8 streams: each takes up to 8 connections
	// (a listener's own cap), but the link has room for 2 more streams.
	listeners, perListener := o.MaxStreams-2, o.MaxStreams
	var allow, addrs []string
	for range listeners {
		a := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t, "127.0.0.1")))
		addrs = append(addrs, a)
		allow = append(allow, "127.0.0.1/32:"+a[strings.LastIndexByte(a, ':')+1:])
	}
	addr, srv, _ := startServer(t, ServerConfig{Options: opt, Rules: mustRules(t, nil, nil, allow)})
	_, sess := genuineLink(t, addr, o)
	before := heapInuse()

	for _, a := range addrs {
		st, err := sess.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		req, _ := stream.AppendRequest(nil, stream.KindReverseListen, a)
		_ = st.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := st.Write(req); err != nil {
			t.Fatal(err)
		}
		if err := stream.ReadResponse(st); err != nil {
			t.Fatalf("reverse listen %s: %v", a, err)
		}
	}
	// The client side: every reverse connection is answered and fed.
	// Each reverse stream stays open until the end (the connections never
	// end either), so the streams accepted are the streams held at once.
	var fed, accepted, settled atomic.Int64
	var wg sync.WaitGroup
	release := make(chan struct{})
	chunk := make([]byte, stream.ChunkHeader+stream.MaxChunk)
	binary.BigEndian.PutUint32(chunk, stream.MaxChunk)
	go func() {
		for {
			st, err := sess.AcceptStream()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer st.Close()
				_ = st.SetDeadline(time.Now().Add(3 * time.Second))
				if _, err := stream.ReadRequest(st); err != nil {
					return
				}
				accepted.Add(1)
				defer func() { <-release }()
				defer settled.Add(1)
				if _, err := st.Write(stream.AppendResponse(nil, stream.StatusOK, "")); err != nil {
					return
				}
				for range 16 { // 1 MiB
					if _, err := st.Write(chunk); err != nil {
						return
					}
					fed.Add(stream.MaxChunk)
				}
			}()
		}
	}()
	// Connections that never read, as many as each listener takes.
	var conns []net.Conn
	for _, a := range addrs {
		for range perListener {
			// Connections beyond the link's streams are reset, which
			// may already fail the dial.
			if c, err := net.Dial("tcp", a); err == nil {
				conns = append(conns, c)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	eventually(t, 10*time.Second, "the reverse streams to be fed", func() bool { return settled.Load() == accepted.Load() })
	grew := heapInuse() - before
	close(release)
	wg.Wait()
	t.Logf("%d reverse listeners × %d connections that never read, window %d KiB, link_buffer %d KiB (%d streams): %d reverse streams, the client fed %d KiB, server heap grew by %d KiB",
		listeners, perListener, o.YamuxWindow>>10, o.LinkBuffer>>10, o.MaxStreams, accepted.Load(), fed.Load()>>10, grew>>10)
	if n, most := accepted.Load(), int64(o.MaxStreams-listeners); n > most {
		t.Errorf("%d reverse connection streams beside %d listeners: the link carries %d streams", n, listeners, o.MaxStreams)
	}
	if limit := 2 * int64(o.LinkBuffer); grew > limit {
		t.Errorf("heap grew by %d KiB, budget %d KiB", grew>>10, limit>>10)
	}
	for _, c := range conns {
		c.Close()
	}
	sess.Close()
	eventually(t, 5*time.Second, "the link to go", func() bool { return srv.ctr.links.Load() == 0 })
}
