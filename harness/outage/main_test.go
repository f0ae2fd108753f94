package main

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// The instrument without namespaces: the targets on loopback, the
// applications dialling a relay to them that the test can cut, as the
// tunnel's ends would be.

// relay forwards each connection to its target and can drop them all.
type relay struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (rl *relay) serve(t *testing.T, target string) string {
	return testutil.Serve(t, func(c net.Conn) {
		u, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer u.Close()
		rl.mu.Lock()
		rl.conns = append(rl.conns, c, u)
		rl.mu.Unlock()
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(u, c)
			_ = u.(*net.TCPConn).CloseWrite()
			close(done)
		}()
		_, _ = io.Copy(c, u)
		_ = c.(*net.TCPConn).CloseWrite()
		<-done
	})
}

// cut resets every connection it relays (SO_LINGER 0: an RST), as a
// tunnel that drops its streams does.
func (rl *relay) cut() {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for _, c := range rl.conns {
		_ = c.(*net.TCPConn).SetLinger(0)
		_ = c.Close()
	}
}

func testRig(t *testing.T) (*rig, *relay) {
	r := &rig{}
	for range 3 {
		r.lns = append(r.lns, testutil.Listen(t))
	}
	t.Cleanup(func() {
		for _, l := range r.lns {
			l.Close()
		}
	})
	r.serveTargets()
	rl := &relay{}
	for i, l := range r.lns {
		r.fwd[i] = rl.serve(t, l.Addr().String())
	}
	var d net.Dialer
	r.dial = d.DialContext
	return r, rl
}

func TestLoadIntact(t *testing.T) {
	r, _ := testRig(t)
	l, err := startLoad(context.Background(), r, 20, 3<<20+5, 7)
	if err != nil {
		t.Fatal(err)
	}
	p := &progress{r: r, l: l}
	if err := p.waitFor(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	l.finish(time.Minute)
	if n, ex := l.resets(); n != 0 || l.up.err != nil || l.down.err != nil {
		t.Fatalf("%d resets (%q), upload %v, download %v; want none", n, ex, l.up.err, l.down.err)
	}
	if got := r.sunk.Load(); got < 3<<20+5 {
		t.Errorf("the sink counted %d bytes, want at least %d", got, 3<<20+5)
	}
}

func TestLoadSeesResets(t *testing.T) {
	r, rl := testRig(t)
	l, err := startLoad(context.Background(), r, 20, 1<<40, 9)
	if err != nil {
		t.Fatal(err)
	}
	p := &progress{r: r, l: l}
	if err := p.waitFor(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	rl.cut()
	// What the sockets still held arrives after the cut: far more than
	// that must move for the transfers to count as moving.
	if d := p.movedBy(context.Background(), time.Now(), 1<<30); d >= 0 {
		t.Errorf("movedBy after the cut = %v, want -1 (the transfers failed)", d)
	}
	l.finish(time.Minute)
	n, ex := l.resets()
	if n != 20 || l.up.err == nil || l.down.err == nil {
		t.Fatalf("%d of 20 streams reset (%q), upload %v, download %v; want all", n, ex, l.up.err, l.down.err)
	}
	rw := row{echoReset: n, up: l.up.err, down: l.down.err}
	if rw.resets() != 22 || rw.mismatches() != 0 {
		t.Errorf("row: %d resets, %d mismatches; want 22, 0", rw.resets(), rw.mismatches())
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-quick", "-streams", "7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.streams != 7 || o.bytes != quick.bytes || o.cuts != quick.cuts || len(o.outages) != 1 || o.maxStreams != 1024 {
		t.Errorf("-quick -streams 7: %+v", o)
	}
	o, err = parseFlags([]string{"-bytes", "1GiB", "-outages", "1s, 2m", "-streams", "2000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.bytes != 1<<30 || len(o.outages) != 2 || o.outages[1] != 2*time.Minute || o.maxStreams != 2064 {
		t.Errorf("-bytes 1GiB -outages '1s, 2m' -streams 2000: %+v", o)
	}
	for _, bad := range [][]string{{"-bytes", "0"}, {"-bytes", "12XB"}, {"-outages", "3"}, {"-cuts", "-1"}, {"extra"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestWaitingLines(t *testing.T) {
	got := waitingLines("links: 0\nSession 3f2a waiting for its client since 12:00:01, 1000 streams, 2.1 MiB kept\nrates: 0 B/s\n")
	if len(got) != 1 || !strings.Contains(got[0], "waiting") {
		t.Errorf("waitingLines = %q", got)
	}
	if got := waitingLines("links: 1\nstreams: 4\n"); len(got) != 0 {
		t.Errorf("waitingLines of a status without sessions = %q", got)
	}
}
