package tunnel

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/resume"
)

// TestResumeKeptWithinBound: while a session waits for its link, each
// end keeps what its streams go on sending for resending, and no more
// than half of link_buffer (resumeBound): with 16 streams whose windows
// allow 4 MiB each way, both ends fill their kept bytes up to the bound
// and stop there, and once the path is back every byte arrives in order.
func TestResumeKeptWithinBound(t *testing.T) {
	const (
		streams   = 16
		perStream = 256 << 10 // one window each: 4 MiB offered each way
	)
	log, _ := testutil.ObservedLogger(t)
	o := resumeOptions(log)
	o.Keepalive = 0
	o.YamuxWindow = MinYamuxWindow
	o.LinkBuffer = 1 << 20
	bound := o.resumeBound()
	if bound != o.LinkBuffer/2 {
		t.Fatalf("resume bound %d, want half of link_buffer %d", bound, o.LinkBuffer)
	}

	start := make(chan struct{}) // closed once the path is down
	var mu sync.Mutex
	sunk := map[int][]byte{} // sink: what each stream delivered, by its first byte
	var opened atomic.Int32  // target connections that read their stream's id
	sink := startTarget(t, func(c net.Conn) {
		var id [1]byte
		if _, err := io.ReadFull(c, id[:]); err != nil {
			return
		}
		opened.Add(1)
		b, _ := io.ReadAll(c)
		mu.Lock()
		sunk[int(id[0])] = append(id[:], b...)
		mu.Unlock()
	})
	source := startTarget(t, func(c net.Conn) {
		var id [1]byte
		if _, err := io.ReadFull(c, id[:]); err != nil {
			return
		}
		opened.Add(1)
		<-start
		_, _ = c.Write(pattern(id[0], perStream))
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	})
	saddr, srv, _ := startServer(t, ServerConfig{Options: o, Services: map[string]string{"sink": sink.addr(), "source": source.addr()}})
	px := startCutProxy(t, saddr)
	addrs, cli, _ := startClient(t, ClientConfig{Options: o, Server: px.addr()}, "sink", "source")

	// Every stream open end to end before the cut: each target has read
	// its stream's id.
	up, down := make([]net.Conn, streams), make([]net.Conn, streams)
	for i := range streams {
		up[i] = dialT(t, addrs["sink"])
		down[i] = dialT(t, addrs["source"])
		if _, err := up[i].Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := down[i].Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, time.Minute, "every stream open end to end", func() bool {
		return opened.Load() == 2*streams
	})

	px.setDown(true)
	px.cut()
	waiting := func(st *live.Status) (live.WaitingSession, bool) {
		if len(st.Waiting) != 1 {
			return live.WaitingSession{}, false
		}
		return st.Waiting[0], true
	}
	eventually(t, time.Minute, "both ends' sessions waiting", func() bool {
		_, a := waiting(cli.Status())
		_, b := waiting(srv.Status())
		return a && b
	})
	close(start)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = up[i].Write(pattern(byte(i), perStream)[1:])
			_ = up[i].(*net.TCPConn).CloseWrite()
		}()
	}

	// kept reads both ends' kept bytes and fails the test past the bound.
	kept := func() (client, server int) {
		c, _ := waiting(cli.Status())
		s, _ := waiting(srv.Status())
		if c.BytesKept > bound || s.BytesKept > bound {
			t.Fatalf("kept bytes while waiting: client %d, server %d; the bound is %d (link_buffer/2)", c.BytesKept, s.BytesKept, bound)
		}
		return c.BytesKept, s.BytesKept
	}
	eventually(t, time.Minute, "both ends' kept bytes at their bound", func() bool {
		c, s := kept()
		return c > bound-resume.MaxData && s > bound-resume.MaxData
	})
	// The streams' windows allow eight times the bound: keep watching a
	// while, so that a bound that is not held shows as kept bytes past it.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		kept()
	}

	px.setDown(false)
	for i := range streams {
		_ = down[i].SetReadDeadline(time.Now().Add(time.Minute))
		got, err := io.ReadAll(down[i])
		if err != nil || !bytes.Equal(got, pattern(byte(i), perStream)) {
			t.Fatalf("source stream %d after the outage: %d bytes, %v; want %d bytes in order", i, len(got), err, perStream)
		}
		_ = down[i].Close()
	}
	wg.Wait()
	eventually(t, time.Minute, "every sink stream delivered whole", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sunk) == streams
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range streams {
		if want := pattern(byte(i), perStream); !bytes.Equal(sunk[i], want) {
			t.Fatalf("sink stream %d after the outage: %d bytes, want %d in order", i, len(sunk[i]), len(want))
		}
	}
	waitResumed(t, 1, cli.ctr)
}

// pattern is n bytes that start with id and then count, so that a byte
// lost, repeated or moved shows.
func pattern(id byte, n int) []byte {
	b := make([]byte, n)
	b[0] = id
	for i := 1; i < n; i++ {
		b[i] = byte(i*7 + int(id))
	}
	return b
}
