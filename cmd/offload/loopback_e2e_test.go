package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// The README's one-machine quick start with examples/loopback/ as they
// are but for the ports (the test can't count on 7000, 8000 and 8080
// being free): keygen, validate, a web target, server and client, a GET
// through the forward; then the server stops and a connection to the
// forward is reset at once (fail fast), far within dial_timeout, with the
// reason in the client's log.
func TestLoopbackQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildOffload(t)
	dir := t.TempDir()
	tunnelAddr, targetAddr, forwardAddr := testutil.FreePort(t), testutil.FreePort(t), testutil.FreePort(t)
	serverMetrics, clientMetrics := testutil.FreePort(t), testutil.FreePort(t)
	for name, edits := range map[string][][2]string{
		"server.yaml": {{`(?m)^listen: 127\.0\.0\.1:7000$`, "listen: " + tunnelAddr}, {`(?m)^  web: 127\.0\.0\.1:8000$`, "  web: " + targetAddr},
			{`(?m)^metrics: 127\.0\.0\.1:9100$`, "metrics: " + serverMetrics}},
		// dial_timeout is long so that a connection held for it, as
		// before fail fast, fails the test.
		"client.yaml": {{`(?m)^server: 127\.0\.0\.1:7000$`, "server: " + tunnelAddr + "\ndial_timeout: 60s"}, {`(?m)^  - listen: 127\.0\.0\.1:8080$`, "  - listen: " + forwardAddr},
			{`(?m)^metrics: 127\.0\.0\.1:9101$`, "metrics: " + clientMetrics}},
	} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", "loopback", name))
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		for _, e := range edits {
			s = edit(t, name, s, e[0], e[1])
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	keygen(t, bin, filepath.Join(dir, "offload.key"))
	server, client := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	if out, err := execIn(dir, bin, "validate", "server.yaml", "client.yaml"); err != nil {
		t.Fatalf("validate: %v\n%s", err, out)
	}

	ln, err := net.Listen("tcp", targetAddr)
	if err != nil {
		t.Skipf("the target's port was taken meanwhile: %v", err)
	}
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello through offload")
	})}
	go func() { _ = web.Serve(ln) }()
	t.Cleanup(func() { _ = web.Close() })

	srv := startProc(t, "server", bin, "server", "-c", server)
	cli := startProc(t, "client", bin, "client", "-c", client)
	waitFor(t, time.Minute, "the client's link", func() error {
		if !strings.Contains(cli.Out.String(), "link up") {
			return errors.New("no 'link up' yet")
		}
		return nil
	})
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + forwardAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello through offload\n" {
		t.Fatalf("through the tunnel: %q", body)
	}
	// The quick start's live view: the client's link and its one stream
	// (counted once both directions have ended, which may come after the
	// answer: asked again until then).
	var status []byte
	waitFor(t, time.Minute, "offload status to show the link and the finished stream", func() error {
		out, err := execIn(dir, bin, "status", "-c", "client.yaml")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		status = out
		for _, want := range []string{"client of " + tunnelAddr, "1 ok, 0 aborted, 0 refused", "link 1: " + tunnelAddr} {
			if !strings.Contains(string(out), want) {
				return fmt.Errorf("offload status -c client.yaml lacks %q:\n%s", want, out)
			}
		}
		return nil
	})
	t.Logf("offload status -c client.yaml:\n%s", status)

	// Only what the client logs from here on counts: a client that
	// dialled before the server listened has logged a failed redial
	// already (the test then dialled while the link still stood, and its
	// connection was aborted, not refused: seen once beside a busy core).
	mark := len(cli.Out.String())
	if code := stop(t, srv); code != 0 {
		t.Fatalf("server exit %d", code)
	}
	waitFor(t, time.Minute, "the client to see the link down", func() error {
		if !strings.Contains(cli.Out.String()[mark:], "link failed; redialling") {
			return errors.New("no failed redial yet")
		}
		return nil
	})
	start := time.Now()
	c, err := net.Dial("tcp", forwardAddr)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
		var n int
		n, err = c.Read(make([]byte, 1))
		c.Close()
		if n != 0 || err == nil {
			t.Fatalf("read %d bytes with no server", n)
		}
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Errorf("with no server: %v, want a reset", err)
	}
	if d := time.Since(start); d >= 30*time.Second {
		t.Errorf("reset after %v, want well within dial_timeout 60s", d)
	}
	waitFor(t, time.Minute, "the client to log why", func() error {
		if !strings.Contains(cli.Out.String()[mark:], "link to the server is down") {
			return errors.New("no refusal logged yet")
		}
		return nil
	})
	if code := stop(t, cli); code != 0 {
		t.Errorf("client exit %d", code)
	}
}

// execIn runs bin with args in dir, as a user following the README does.
func execIn(dir, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}
