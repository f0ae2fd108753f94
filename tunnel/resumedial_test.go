package tunnel

import (
	"bytes"
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// TestResumeDialsOverlap: while its session waits for a link, the client's
// connects overlap (redial.Overlap): on a path that swallows SYNs a second
// connect starts while the first is still pending, never more than four
// at once; once connects get through, the session resumes and the stream
// carries on. With a connect a second, no two were ever pending at once.
func TestResumeDialsOverlap(t *testing.T) {
	o, px := echoBehindCutProxy(t)
	var (
		blackhole atomic.Bool
		mu        sync.Mutex
		live      []context.Context // the pending connects' contexts
		most      int
		d         net.Dialer
	)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !blackhole.Load() {
			return d.DialContext(ctx, network, addr)
		}
		// Pending: a connect whose context has not ended (a round
		// cancels its own before the next begins).
		mu.Lock()
		live = slices.DeleteFunc(live, func(c context.Context) bool { return c.Err() != nil })
		live = append(live, ctx)
		most = max(most, len(live))
		mu.Unlock()
		<-ctx.Done() // a SYN into a dead path: only the round's end stops it
		return nil, ctx.Err()
	}
	addrs, cli, _ := startClient(t, ClientConfig{Options: o, Server: px.addr(), Dial: dial}, "echo")
	c := streamAcross(t, addrs["echo"])
	blackhole.Store(true)
	px.freeze()
	msg := []byte("across overlapping dials")
	if _, err := c.Write(msg); err != nil { // in use: the stall watch probes
		t.Fatal(err)
	}
	eventually(t, time.Minute, "two connects pending at once", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return most >= 2
	})
	blackhole.Store(false)
	echoResumed(t, c, msg, cli)
	mu.Lock()
	defer mu.Unlock()
	if most > 4 {
		t.Fatalf("%d connects pending at once; a round has four", most)
	}
}

// echoBehindCutProxy starts a resumable server with an "echo" service
// behind a cut proxy, with keepalives off so that only the client's stall
// watch can give a silent link up; it returns the options for the client.
func echoBehindCutProxy(t *testing.T) (Options, *cutProxy) {
	log, _ := testutil.ObservedLogger(t)
	echo := startTarget(t, func(c net.Conn) { _, _ = io.Copy(c, c) })
	o := resumeOptions(log)
	o.Keepalive = 0
	saddr, _, _ := startServer(t, ServerConfig{Options: o, Services: map[string]string{"echo": echo.addr()}})
	px := startCutProxy(t, saddr)
	return o, px
}

// echoResumed reads msg's echo on c, sent across an outage, and checks
// that cli resumed its session for it.
func echoResumed(t *testing.T, c net.Conn, msg []byte, cli *Client) {
	t.Helper()
	got := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo across the outage: %q, %v", got, err)
	}
	waitResumed(t, 1, cli.ctr)
}
