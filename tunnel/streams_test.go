package tunnel

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/stream"
)

// defaultsPair is pair with the default stream settings (max_streams,
// link_buffer, yamux_window), not testOptions' larger link_buffer.
func defaultsPair(t *testing.T, server, client func(*Options), services map[string]string, forwards ...string) (map[string]string, *Server) {
	t.Helper()
	log, _ := testutil.ObservedLogger(t)
	so, co := testOptions(log), testOptions(log)
	so.LinkBuffer, co.LinkBuffer = DefaultOptions().LinkBuffer, DefaultOptions().LinkBuffer
	if server != nil {
		server(&so)
	}
	if client != nil {
		client(&co)
	}
	saddr, srv, _ := startServer(t, ServerConfig{Options: so, Services: services})
	addrs, _, _ := startClient(t, ClientConfig{Options: co, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond}, forwards...)
	return addrs, srv
}

// TestThousandStreams: on the defaults one link carries 1,000 streams at
// once, each answered and carrying data, then held open; every one of
// them still works after the last opened (before tunnel/mux the link
// carried 12: link_buffer / (yamux_window + 256 KiB), and the 13th was
// never answered).
func TestThousandStreams(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	addrs, srv := defaultsPair(t, nil, nil, map[string]string{"echo": echoT.addr()}, "echo")
	const streams = 1000
	msg := bytes.Repeat([]byte("0123456789abcdef"), 64) // 1 KiB
	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	got := make([]byte, len(msg))
	for i := range streams {
		c, err := net.Dial("tcp", addrs["echo"])
		if err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(msg); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("stream %d of %d held open: %v", i+1, streams, err)
		}
	}
	if n := srv.ctr.active.Load(); n != streams {
		t.Errorf("server has %d active streams, want %d", n, streams)
	}
	// All held, all still carry data.
	for i, c := range conns {
		if _, err := c.Write(msg[:16]); err != nil {
			t.Fatalf("held stream %d: %v", i+1, err)
		}
		if _, err := io.ReadFull(c, got[:16]); err != nil || !bytes.Equal(got[:16], msg[:16]) {
			t.Fatalf("held stream %d: %v", i+1, err)
		}
	}
}

// TestBusyAnsweredAtOnce: a stream past the server's max_streams is
// answered at once, busy, with the reason and the setting to raise, at
// both ends; it does not wait for a deadline.
func TestBusyAnsweredAtOnce(t *testing.T) {
	testutil.LeakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	log, logs := testutil.ObservedLogger(t)
	so, co := testOptions(log), testOptions(log)
	so.MaxStreams = 4
	// Long timeouts: a stream left unanswered would hang the test well
	// past its deadline, not end it with a timeout that looks like an
	// answer.
	co.DialTimeout = time.Minute
	saddr, _, _ := startServer(t, ServerConfig{Options: so, Services: map[string]string{"echo": echoT.addr()}})
	addrs, _, _ := startClient(t, ClientConfig{Options: co, Server: saddr, RedialMin: 20 * time.Millisecond, RedialMax: 200 * time.Millisecond}, "echo")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	b := []byte("x")
	for i := range 4 {
		c, err := net.Dial("tcp", addrs["echo"])
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("stream %d: %v", i+1, err)
		}
	}
	if err := connEnd(t, addrs["echo"], b); !isAbortive(err) {
		t.Fatalf("stream 5 of 4: %v, want a reset", err)
	}
	// The client resets the connection, then logs why: wait for the line.
	eventually(t, 5*time.Second, "the client's refusal in its log", func() bool {
		return logs.FilterMessage("connection refused").Len() >= 1
	})
	refusals := logs.FilterMessage("connection refused").All()
	if len(refusals) != 1 {
		t.Fatalf("%d refusals logged by the client, want 1", len(refusals))
	}
	if e, _ := refusals[0].ContextMap()["error"].(string); !strings.Contains(e, stream.ErrBusy.Error()) || !strings.Contains(e, "max_streams") {
		t.Errorf("client logged %q: want busy, naming max_streams", e)
	}
	if n := logs.FilterMessage("stream refused").Len(); n != 1 {
		t.Errorf("%d refusals logged by the server, want 1", n)
	}
}
