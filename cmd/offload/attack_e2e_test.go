package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/handshake"
)

// vmRSS reads a process's resident set size in bytes.
func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// metric returns the value of the sample named exactly name in m.
func metric(m, name string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`)
	sm := re.FindStringSubmatch(m)
	if sm == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(sm[1], 64)
	return v, err == nil
}

// recorder keeps the first Write on a connection: the first flight as an
// eavesdropper on the wire records it.
type recorder struct {
	net.Conn
	once  sync.Once
	first []byte
}

func (r *recorder) Write(p []byte) (int, error) {
	r.once.Do(func() { r.first = append([]byte(nil), p...) })
	return r.Conn.Write(p)
}

// TestE2EReplayFlood attacks the built server as issue 9 did: one genuine
// client's first flight, recorded from the wire, is replayed 1,000 times
// in a burst while every replay's connection is held open. Protocol
// version 1 gave each replay a link (record layer, yamux session, three
// log lines): +61 MiB of RSS for 1,000. Now no replay gets a link, the
// server's RSS barely moves, and the failures are logged rate-limited.
func TestE2EReplayFlood(t *testing.T) {
	testutil.LeakCheck(t)
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc to read RSS from: %v", err)
	}
	const replays, workers = 1000, 8
	bin := buildOffload(t)
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "offload.key")
	keygen(t, bin, keyFile)
	echoT := startE2ETarget(t, testutil.Echo)
	a := writeConfigs(t, dir, map[string]string{"echo": echoT.ln.Addr().String()})
	srv := startProc(t, "server", bin, "server", "-c", filepath.Join(dir, "server.yaml"))
	waitFor(t, 15*time.Second, "the server's metrics", func() error { _, err := scrape(a.serverMetrics); return err })

	cfg, err := config.LoadServer(filepath.Join(dir, "server.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	psk, err := config.LoadKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", a.server)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Conn: c}
	keys, err := handshake.Client(context.Background(), rec, handshake.Config{Suite: cfg.Suite, PSK: psk})
	if err != nil {
		t.Fatalf("genuine handshake: %v", err)
	}
	keys.Wipe()
	flight := rec.first
	waitFor(t, 5*time.Second, "the genuine link", func() error { return wantMetric(a.serverMetrics, "offload_links_active", 1) })
	c.Close()
	waitFor(t, 5*time.Second, "the genuine link to go", func() error { return wantMetric(a.serverMetrics, "offload_links_active", 0) })
	before, err := vmRSS(srv.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	var peakLinks float64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range replays / workers {
				c, err := net.Dial("tcp", a.server)
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
				_, _ = c.Write(flight)
				// Version 1 answered with its Noise message and kept the
				// link; now the server closes at once.
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = io.Copy(io.Discard, c)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	time.Sleep(500 * time.Millisecond) // links that are coming come up
	m, err := scrape(a.serverMetrics)
	if err != nil {
		t.Fatal(err)
	}
	peakLinks, _ = metric(m, "offload_links_active")
	after, err := vmRSS(srv.Cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	replayed, _ := metric(m, `offload_handshakes_total{role="server",result="replay"}`)
	ok, _ := metric(m, `offload_handshakes_total{role="server",result="ok"}`)
	t.Logf("%d replays of a %d-byte flight in %v: %v links up, %v handshakes ok, %v refused as replays; server RSS %.1f → %.1f MiB",
		replays, len(flight), took.Round(time.Millisecond), peakLinks, ok, replayed, float64(before)/(1<<20), float64(after)/(1<<20))
	if peakLinks != 0 || ok != 1 {
		t.Errorf("replays got links: %v up, %v handshakes ok (want 0 and the genuine 1)", peakLinks, ok)
	}
	if replayed < replays*9/10 {
		t.Errorf("%v of %d replays counted as replays", replayed, replays)
	}
	// The runtime's heap goal and the kernel's socket memory make a few
	// MiB of noise; a link per replay was +61 MiB.
	if grew := after - before; grew > 16<<20 {
		t.Errorf("server RSS grew by %.1f MiB for %d replays", float64(grew)/(1<<20), replays)
	}
	// The genuine link closed right after its handshake: with
	// resume_window on (the default) the server logs it as a link whose
	// resumption offer went unanswered rather than "link up". Either is a
	// link; no replay gets one.
	out := srv.Out.String()
	if n := strings.Count(out, "link up") + strings.Count(out, "resumption failed"); n != 1 {
		t.Errorf("%d link up or resumption failed lines, want the genuine link's one", n)
	}
	if n := strings.Count(out, "handshake failed"); n > 3 {
		t.Errorf("%d handshake failure lines for %d replays, want them rate-limited", n, replays)
	}
	if code := stop(t, srv); code != 0 {
		t.Errorf("server exit code %d", code)
	}
}

// wantMetric checks that the unlabelled metric name has value want.
func wantMetric(addr, name string, want float64) error {
	m, err := scrape(addr)
	if err != nil {
		return err
	}
	if v, ok := metric(m, name); !ok || v != want {
		return fmt.Errorf("%s = %v (found %v), want %v", name, v, ok, want)
	}
	return nil
}
