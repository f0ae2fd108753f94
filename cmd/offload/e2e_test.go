package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// The end-to-end test runs the built offload binary as two processes, a
// server and a client, on loopback, with configs made from
// examples/*.yaml, and targets in this process.

// proc is a process of the test (testutil.StartProc): the built binary,
// or a tool such as haproxy.
type proc = testutil.Proc

// keygen makes a key file at path with the built binary bin.
func keygen(t *testing.T, bin, path string) {
	t.Helper()
	if out, err := exec.Command(bin, "keygen", "-o", path).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
}

func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	return testutil.StartProc(t, name, bin, args...)
}

// stop sends SIGTERM and returns the exit code.
func stop(t *testing.T, p *proc) int {
	t.Helper()
	if !p.Stop(30 * time.Second) {
		t.Fatalf("%s did not exit within 30s of SIGTERM", p.Name)
	}
	return p.ExitCode()
}

// built is the offload binary the package's tests share: built once per
// run of the package (buildOffload), removed by TestMain.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

// TestMain removes the binary the tests shared. The ends the tests start
// (in this process and built) make their control sockets in a directory
// of the run (RUNTIME_DIRECTORY, tunnel/control), not in root's
// /var/run/offload.
func TestMain(m *testing.M) {
	run, err := os.MkdirTemp("", "offload-run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("RUNTIME_DIRECTORY", run)
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	_ = os.RemoveAll(run)
	os.Exit(code)
}

// buildOffload returns the offload binary built from this package, the
// same for every test of the run: it is built at the first call.
func buildOffload(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "offload-e2e-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		bin := filepath.Join(dir, "offload")
		// go test puts its own GOROOT/bin first in PATH.
		gobin, err := exec.LookPath("go")
		if err != nil {
			built.err = fmt.Errorf("no go command to build offload with: %w", err)
			return
		}
		cmd := exec.Command(gobin, "build", "-o", bin, ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		built.bin = bin
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// edit replaces the one match of re in s, failing if there is not exactly
// one: the example files changed and the test must follow.
func edit(t *testing.T, file, s, re, repl string) string {
	t.Helper()
	r := regexp.MustCompile(re)
	if n := len(r.FindAllStringIndex(s, -1)); n != 1 {
		t.Fatalf("%s: %d matches for %q, want 1 (did the example change?)", file, n, re)
	}
	return r.ReplaceAllLiteralString(s, repl)
}

type e2eAddrs struct {
	server, serverMetrics, clientMetrics string
	forwards                             map[string]string // service → client listen address
}

// writeConfigs writes server.yaml and client.yaml, from the examples, to
// dir and returns the addresses they use.
func writeConfigs(t *testing.T, dir string, services map[string]string) e2eAddrs {
	t.Helper()
	a := e2eAddrs{server: testutil.FreePort(t), serverMetrics: testutil.FreePort(t), clientMetrics: testutil.FreePort(t), forwards: map[string]string{}}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var svc, fwd strings.Builder
	for name, target := range services {
		fmt.Fprintf(&svc, "  %s: %s\n", name, target)
		a.forwards[name] = testutil.FreePort(t)
		fmt.Fprintf(&fwd, "  - listen: %s\n    service: %s\n", a.forwards[name], name)
	}

	s := read("server.yaml")
	s = edit(t, "server.yaml", s, `(?m)^listen: .*$`, "listen: "+a.server)
	s = edit(t, "server.yaml", s, `(?m)^services:\n(  .*\n)+`, "services:\n"+svc.String())
	s = edit(t, "server.yaml", s, `(?m)^# metrics: .*$`, "metrics: "+a.serverMetrics)
	s = edit(t, "server.yaml", s, `(?m)^drain_timeout: .*$`, "drain_timeout: 2s")
	// The transfer runs 32 streams; the default link_buffer carries 12.
	s = edit(t, "server.yaml", s, `(?m)^link_buffer: [^ ]*`, "link_buffer: 48MiB")

	c := read("client.yaml")
	c = edit(t, "client.yaml", c, `(?m)^server: .*$`, "server: "+a.server)
	c = edit(t, "client.yaml", c, `(?m)^forwards:\n(  .*\n)+`, "forwards:\n"+fwd.String())
	c = edit(t, "client.yaml", c, `(?m)^  min: .*$`, "  min: 100ms")
	c = edit(t, "client.yaml", c, `(?m)^  max: .*$`, "  max: 1s")
	c = edit(t, "client.yaml", c, `(?m)^drain_timeout: .*$`, "drain_timeout: 2s")
	c = edit(t, "client.yaml", c, `(?m)^link_buffer: [^ ]*`, "link_buffer: 48MiB")
	c += "metrics: " + a.clientMetrics + "\n"

	for name, body := range map[string]string{"server.yaml": s, "client.yaml": c} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// e2eTarget is a TCP server in this process.
type e2eTarget struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func startE2ETarget(t *testing.T, handle func(net.Conn)) *e2eTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &e2eTarget{ln: ln, conns: map[net.Conn]bool{}}
	tg.wg.Add(1)
	go func() {
		defer tg.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.mu.Lock()
			tg.conns[c] = true
			tg.mu.Unlock()
			tg.wg.Add(1)
			go func() {
				defer tg.wg.Done()
				handle(c)
				c.Close()
				tg.mu.Lock()
				delete(tg.conns, c)
				tg.mu.Unlock()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		tg.mu.Lock()
		for c := range tg.conns {
			c.Close()
		}
		tg.mu.Unlock()
		tg.wg.Wait()
	})
	return tg
}

func waitFor(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// srcSeed seeds the endless stream the "src" target sends.
const srcSeed = 99

func TestE2E(t *testing.T) {
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	keygen(t, bin, filepath.Join(dir, "offload.key"))
	echoT := startE2ETarget(t, testutil.Echo)
	srcT := startE2ETarget(t, func(c net.Conn) { _, _ = io.Copy(c, testutil.Stream(srcSeed)) })
	a := writeConfigs(t, dir, map[string]string{"echo": echoT.ln.Addr().String(), "src": srcT.ln.Addr().String()})
	serverCfg, clientCfg := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")

	srv := startProc(t, "server", bin, "server", "-c", serverCfg)
	cli := startProc(t, "client", bin, "client", "-c", clientCfg)
	echoAddr := a.forwards["echo"]
	waitFor(t, 15*time.Second, "first round trip", func() error { return testutil.EchoRoundTrip(echoAddr, 1000, 0) })

	t.Run("transfer", func(t *testing.T) {
		// 32 concurrent streams, 8 MiB each way per stream: 256 MiB
		// up and 256 MiB back.
		const streams = 32
		per := int64(8 << 20)
		if testing.Short() {
			per = 256 << 10
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, streams)
		for i := range streams {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := testutil.EchoRoundTrip(echoAddr, per, uint64(i+1)); err != nil {
					errs <- fmt.Errorf("stream %d: %w", i, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		d := time.Since(start)
		total := streams * per
		t.Logf("%d streams: %d MiB each way in %v (%.1f MiB/s each way)", streams, total>>20, d.Round(time.Millisecond), float64(total)/(1<<20)/d.Seconds())
		m, err := scrape(a.serverMetrics)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`offload_streams_total{role="server",result="ok"}`, `offload_bytes_total{engine="software",dir="decrypt"}`, `offload_handshakes_total{role="server",result="ok"} 1`} {
			if !strings.Contains(m, want) {
				t.Errorf("server metrics lack %s:\n%s", want, m)
			}
		}
	})

	parent := t
	t.Run("server killed", func(t *testing.T) {
		// Streams that are moving data when the server process dies must
		// all end with an error; none may look complete. The application
		// only reads: Linux reports a RST to the first call on the socket
		// (a concurrent write would take the error and leave the read an
		// EOF).
		const streams = 8
		type result struct {
			read int64
			err  error
		}
		results := make(chan result, streams)
		progress := make(chan struct{}, streams)
		var conns []net.Conn
		var wg sync.WaitGroup
		for range streams {
			c, err := net.Dial("tcp", a.forwards["src"])
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			wg.Add(1)
			go func() { // checks every byte against what the target sends
				defer wg.Done()
				want := testutil.Stream(srcSeed)
				got := make([]byte, 32<<10)
				exp := make([]byte, 32<<10)
				var n int64
				signalled := false
				for {
					k, err := c.Read(got)
					if k > 0 {
						_, _ = io.ReadFull(want, exp[:k])
						if !bytes.Equal(got[:k], exp[:k]) {
							results <- result{n, fmt.Errorf("corrupted bytes at offset %d", n)}
							return
						}
						n += int64(k)
						if n >= 1<<20 && !signalled {
							signalled = true
							progress <- struct{}{}
						}
					}
					if err != nil {
						results <- result{n, err}
						return
					}
				}
			}()
		}
		defer func() {
			for _, c := range conns {
				c.Close()
			}
			wg.Wait()
		}()
		for range streams {
			select {
			case <-progress:
			case <-time.After(30 * time.Second):
				t.Fatal("streams made no progress")
			}
		}
		// While they run, offload status shows them on the link, and the
		// bytes that came from the target (1 MiB a stream at least).
		out, err := exec.Command(bin, "status", "-c", serverCfg).CombinedOutput()
		for _, re := range []string{`(?m)^  streams: .*service src 8`, `(?m)^  transfer: .* received, [0-9.]+ (MiB|GiB) sent$`, `(?m)^  client: +default$`} {
			if err != nil || !regexp.MustCompile(re).Match(out) {
				t.Errorf("offload status: %v, lacks %s:\n%s", err, re, out)
			}
		}
		// Killed and restarted: the client's session, kept for
		// resume_window (on by default), meets a server that knows no
		// session; its streams end with an error that says so.
		srv.Kill()
		srv = startProc(parent, "server (restarted)", bin, "server", "-c", serverCfg)
		for range streams {
			select {
			case r := <-results:
				if errors.Is(r.err, io.EOF) {
					t.Errorf("server killed: a stream ended cleanly after %d bytes; want an error", r.read)
				} else {
					t.Logf("stream ended after %d bytes: %v", r.read, r.err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("streams did not end after the server was killed and restarted")
			}
		}
		waitFor(t, 15*time.Second, "the client to log why its session ended", func() error {
			if !strings.Contains(cli.Out.String(), "unknown session (the server restarted") {
				return errors.New("no 'unknown session' in the client's log")
			}
			return nil
		})

		// The client redials and new streams work.
		waitFor(t, 15*time.Second, "round trip after the restart", func() error { return testutil.EchoRoundTrip(echoAddr, 1<<20, 7) })
		m, err := scrape(a.clientMetrics)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"offload_link_up 1", `offload_streams_total{role="client",result="aborted"}`} {
			if !strings.Contains(m, want) {
				t.Errorf("client metrics lack %q:\n%s", want, m)
			}
		}
		if strings.Contains(m, "offload_redials_total 0\n") {
			t.Errorf("client metrics count no redials:\n%s", m)
		}
	})

	// SIGTERM: both exit 0.
	if code := stop(t, cli); code != 0 {
		t.Errorf("client exited %d after SIGTERM", code)
	}
	if code := stop(t, srv); code != 0 {
		t.Errorf("server exited %d after SIGTERM", code)
	}
	for _, p := range []*proc{cli, srv} {
		if !strings.Contains(p.Out.String(), "stopped") {
			t.Errorf("%s did not log that it stopped", p.Name)
		}
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestKeyFileMode: a key file others can read stops the start.
func TestServerRefusesOpenKeyFile(t *testing.T) {
	testutil.LeakCheck(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "offload.key")
	if code, _, stderr := runCmd(t, "keygen", "-o", key); code != 0 {
		t.Fatal(stderr)
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	a := writeConfigs(t, dir, map[string]string{"echo": "127.0.0.1:9"})
	_ = a
	for _, c := range []string{"server", "client"} {
		code, _, stderr := runCmd(t, c, "-c", filepath.Join(dir, c+".yaml"))
		if code != 1 || !strings.Contains(stderr, "chmod 600") || !strings.Contains(stderr, "key_file") {
			t.Errorf("%s with a 0644 key: exit %d: %s", c, code, stderr)
		}
	}
}

// TestEngineRefused: an engine spec that can't serve stops the start with
// the engine's reason.
func TestEngineRefused(t *testing.T) {
	testutil.LeakCheck(t)
	dir := t.TempDir()
	if code, _, stderr := runCmd(t, "keygen", "-o", filepath.Join(dir, "offload.key")); code != 0 {
		t.Fatal(stderr)
	}
	writeConfigs(t, dir, map[string]string{"echo": "127.0.0.1:9"})
	p := filepath.Join(dir, "server.yaml")
	b, _ := os.ReadFile(p)
	for spec, want := range map[string]string{
		"afalg:no-such-driver-xyz": "engine afalg:no-such-driver-xyz can not serve",
	} {
		s := edit(t, "server.yaml", string(b), `(?m)^engine: .*$`, "engine: "+spec)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCmd(t, "server", "-c", p)
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("engine %s: exit %d: %s", spec, code, stderr)
		}
	}
}
