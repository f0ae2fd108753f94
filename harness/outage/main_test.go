package main

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// The instrument without namespaces: the targets on loopback, the
// applications dialling a proxy (-proxy's path) to each, that the test
// can cut, as the tunnel's ends would be.

type proxies []*proxy

func (ps proxies) cut() {
	for _, p := range ps {
		p.cut()
	}
}

func testRig(t *testing.T) (*rig, proxies) {
	r := &rig{}
	for range 3 {
		r.lns = append(r.lns, testutil.Listen(t))
	}
	var ps proxies
	t.Cleanup(func() {
		for _, l := range r.lns {
			l.Close()
		}
		for _, p := range ps {
			p.close()
		}
	})
	r.serveTargets()
	for i, l := range r.lns {
		p, err := newProxy(l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
		r.fwd[i] = p.addr()
	}
	var d net.Dialer
	r.dial = d.DialContext
	return r, ps
}

// TestProxyOutage: -proxy's path resets what it carries when it goes
// down, refuses new connections while down, and carries them again once
// up; a cut resets without refusing.
func TestProxyOutage(t *testing.T) {
	p, err := newProxy(testutil.Serve(t, func(c net.Conn) { testutil.Echo(c) }))
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	echo := func() (net.Conn, error) {
		c, err := net.Dial("tcp", p.addr())
		if err == nil {
			err = echoOnce(c, []byte("through the proxy"), time.Minute)
		}
		return c, err
	}
	c, err := echo()
	if err != nil {
		t.Fatal(err)
	}
	p.setDown(true)
	// Only a reset or an EOF ends this read: the cut is the event.
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the path went down: %d bytes, %v; want a reset", n, err)
	}
	c.Close()
	if c, err := echo(); err == nil {
		c.Close()
		t.Fatal("a new connection echoed while the path was down")
	}
	p.setDown(false)
	c, err = echo()
	if err != nil {
		t.Fatalf("after the path came back: %v", err)
	}
	defer c.Close()
	if n := p.cut(); n != 1 {
		t.Errorf("cut reset %d connections, want 1", n)
	}
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after a cut: %v; want a reset", err)
	}
	c2, err := echo()
	if err != nil {
		t.Fatalf("after a cut (nothing refused): %v", err)
	}
	c2.Close()
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
	r, ps := testRig(t)
	l, err := startLoad(context.Background(), r, 20, 1<<40, 9)
	if err != nil {
		t.Fatal(err)
	}
	p := &progress{r: r, l: l}
	if err := p.waitFor(context.Background(), 1<<20); err != nil {
		t.Fatal(err)
	}
	ps.cut()
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
	if o, err = parseFlags([]string{"-proxy", "-quick"}, io.Discard); err != nil || o.roam || !o.proxy || o.cuts != quick.cuts {
		t.Errorf("-proxy -quick: %+v, %v; want no roam", o, err)
	}
	for _, bad := range [][]string{{"-bytes", "0"}, {"-bytes", "12XB"}, {"-outages", "3"}, {"-cuts", "-1"}, {"extra"},
		{"-proxy", "-roam"}, {"-proxy", "-rate", "1mbit"}} {
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
