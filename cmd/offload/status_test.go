package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/live"
	"github.com/offload-dev/offload/tunnel/suite"
)

func runStatusCmd(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"status"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// offload status -c reads the metrics address and token from a server's
// config and prints its link while a transfer is held open mid-way: the
// client, the bytes received so far, the stream by service; -json is the
// endpoint's JSON; a wrong or missing token is refused with the reason,
// and a config without metrics says how to add it.
func TestStatusCommand(t *testing.T) {
	testutil.LeakCheck(t)
	dir := t.TempDir()
	key := []byte("offload status command test key!")
	keyFile := filepath.Join(dir, "offload.key")
	if err := config.WriteKeyFile(keyFile, key, false); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "metrics.token")
	if err := os.WriteFile(tokFile, []byte("status-command-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const sent = 200 << 10
	held, target := testutil.ServeHeld(t, sent)

	log := zaptest.NewLogger(t)
	opt := benchTestOptions(key, log)
	srv, err := tunnel.NewServer(tunnel.ServerConfig{Options: opt, Services: map[string]string{"held": target}})
	if err != nil {
		t.Fatal(err)
	}
	sln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := tunnel.NewClient(tunnel.ClientConfig{Options: opt, Server: sln.Addr().String(), Forwards: []tunnel.Forward{{Listener: fln, Service: "held"}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ctx, sln) }()
	go func() { done <- cli.Run(ctx) }()

	metricsAddr := testutil.FreePort(t)
	file := filepath.Join(dir, "server.yaml")
	yaml := fmt.Sprintf("listen: %s\nkey_file: offload.key\nservices:\n  held: %s\nmetrics: %s\nmetrics_token_file: metrics.token\n",
		sln.Addr(), target, metricsAddr)
	if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadServer(file)
	if err != nil {
		t.Fatal(err)
	}
	stopMetrics, err := startMetrics(ctx, &cfg.Common, srv.RegisterMetrics, srv.Healthy, endStatus(srv.Status, &cfg.Common, cfg.Listen), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		stopMetrics()
		for range 2 {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	})

	held.Send(t, fln.Addr().String())

	code, out, errOut := runStatusCmd("-c", file)
	if code != 0 {
		t.Fatalf("status -c: exit %d\n%s", code, errOut)
	}
	for _, re := range []string{
		`(?m)^server ` + regexp.QuoteMeta(sln.Addr().String()) + `$`,
		`(?m)^  suite: +` + regexp.QuoteMeta(suite.Default.String()) + `$`,
		`(?m)^  engine: +software$`,
		`(?m)^  streams: +1 active; 0 ok, 0 aborted, 0 refused$`,
		`(?m)^  frames software: +[0-9]+ sealed .*, [1-9][0-9]* opened`,
		`(?m)^link 1: 127\.0\.0\.1:[0-9]+$`,
		`(?m)^  client: +default$`,
		`(?m)^  up since: +20[0-9-]+ [0-9:]+ UTC \(`,
		`(?m)^  latest rekey: +sent never, received never$`,
		`(?m)^  transfer: +(2[0-9][0-9]\.[0-9]+ KiB|[0-9.]+ MiB) received, [0-9.]+ (B|KiB) sent$`,
		`(?m)^  rate: +[1-9][0-9.]* (B|KiB|MiB|GiB)/s received`,
		`(?m)^  streams: +service held 1$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status output lacks %s:\n%s", re, out)
		}
	}

	code, out, errOut = runStatusCmd("-c", file, "-json")
	var st live.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status -json: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	if st.Role != "server" || st.Policy != "software" || st.Version == "" || st.Listen != sln.Addr().String() ||
		len(st.Links) != 1 || st.Links[0].BytesReceived < sent || st.Links[0].Client != "default" {
		t.Errorf("status -json: %+v", st)
	}

	// -addr needs the token too; with -token-file it is let in.
	if code, _, errOut := runStatusCmd("-addr", metricsAddr); code != 1 || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "token") {
		t.Errorf("-addr without the token: exit %d, %q", code, errOut)
	}
	if code, out, errOut := runStatusCmd("-addr", metricsAddr, "-token-file", tokFile); code != 0 || !strings.Contains(out, "link 1:") {
		t.Errorf("-addr with the token: exit %d\n%s%s", code, out, errOut)
	}

	// A config whose end is not running (no socket): the error says so;
	// with control: off and no metrics, what to change.
	bare := filepath.Join(dir, "bare.yaml")
	if err := os.WriteFile(bare, []byte(fmt.Sprintf("listen: %s\nkey_file: offload.key\nservices:\n  held: %s\n", sln.Addr(), target)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runStatusCmd("-c", bare); code != 1 || !strings.Contains(errOut, "is the end of "+bare+" running") {
		t.Errorf("no end running: exit %d, %q", code, errOut)
	}
	if err := os.WriteFile(bare, []byte(fmt.Sprintf("listen: %s\nkey_file: offload.key\ncontrol: off\nservices:\n  held: %s\n", sln.Addr(), target)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runStatusCmd("-c", bare); code != 1 || !strings.Contains(errOut, "metrics: 127.0.0.1:9100") || !strings.Contains(errOut, "control: off") {
		t.Errorf("control off, no metrics: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{{}, {"-c", file, "-addr", metricsAddr}, {"-c", file, "-socket", "x.sock"}, {"-c", file, "-token-file", tokFile}, {"-c", file, "extra"}} {
		if code, _, _ := runStatusCmd(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)", args, code)
		}
	}
}

// An unspecified listen host is asked on loopback.
func TestStatusDialable(t *testing.T) {
	for in, want := range map[string]string{
		"0.0.0.0:9100":   "127.0.0.1:9100",
		"[::]:9100":      "[::1]:9100",
		"127.0.0.1:9100": "127.0.0.1:9100",
		"[::1]:9100":     "[::1]:9100",
		"192.0.2.1:9100": "192.0.2.1:9100",
	} {
		if got := dialable(in); got != want {
			t.Errorf("dialable(%q) = %q, want %q", in, got, want)
		}
	}
}

// offload status works on every running end with no setting for it: with
// default configs (no metrics:), status -c asks each end's control socket.
// The server lists every client of its config (the one connected, one
// never seen) with the keys' fingerprints, which the client shows for its
// own key; the client shows its live link. The socket is the end's user's
// alone (mode 0600); the same config started twice is refused, naming the
// socket; a client killed (its socket left behind) starts again and
// replaces it; a client whose server is down says when it dials next.
func TestStatusDefaultConfig(t *testing.T) {
	testutil.LeakCheck(t)
	bin := buildOffload(t)
	dir := t.TempDir()
	keygen(t, bin, filepath.Join(dir, "a.key"))
	keygen(t, bin, filepath.Join(dir, "b.key"))
	tg := startE2ETarget(t, testutil.Echo)
	srvAddr, fwdAddr := testutil.FreePort(t), testutil.FreePort(t)
	srvFile, cliFile := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	write := func(file, body string) {
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(srvFile, fmt.Sprintf("listen: %s\nengine: software\nservices:\n  echo: %s\nclients:\n  alpha:\n    key_file: a.key\n    services: [echo]\n  beta:\n    key_file: b.key\n    services: [echo]\n", srvAddr, tg.ln.Addr()))
	write(cliFile, fmt.Sprintf("server: %s\nkey_file: a.key\nengine: software\nforwards:\n  - listen: %s\n    service: echo\n", srvAddr, fwdAddr))
	keyA, err := config.LoadKey(filepath.Join(dir, "a.key"))
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := config.LoadKey(filepath.Join(dir, "b.key"))
	if err != nil {
		t.Fatal(err)
	}
	fpA, fpB := config.KeyFingerprint(keyA), config.KeyFingerprint(keyB)

	srv := startProc(t, "server", bin, "server", "-c", srvFile)
	cli := startProc(t, "client", bin, "client", "-c", cliFile)
	waitFor(t, time.Minute, "an echo through the link", func() error { return testutil.EchoRoundTripWithin(fwdAddr, 64, 1, 30*time.Second) })

	code, out, errOut := runStatusCmd("-c", srvFile)
	if code != 0 {
		t.Fatalf("status of the server: exit %d: %s", code, errOut)
	}
	for _, re := range []string{
		`(?m)^server ` + regexp.QuoteMeta(srvAddr) + `$`,
		`(?m)^  alpha +key ` + fpA + `  connected \(1 link\)$`,
		`(?m)^  beta +key ` + fpB + `  never seen$`,
		`(?m)^link 1: 127\.0\.0\.1:\d+\n  client: +alpha\n  key: +` + fpA + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("server status lacks %s:\n%s", re, out)
		}
	}
	code, out, errOut = runStatusCmd("-c", cliFile, "-json")
	var st live.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status -json of the client: exit %d, %v: %s", code, err, errOut)
	}
	if st.Role != "client" || st.Key != fpA || len(st.Links) != 1 || st.Links[0].Key != fpA {
		t.Errorf("client status: role %s, key %s, links %+v; want a live link with key %s", st.Role, st.Key, st.Links, fpA)
	}

	// Only the end's user and root.
	cfg, err := config.LoadClient(cliFile)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(cfg.Control)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, %v; want a socket of mode 0600", cfg.Control, fi, err)
	}

	// The same config again: refused at once, the socket named.
	second := startProc(t, "second client", bin, "client", "-c", cliFile)
	if code := second.ExitCode(); code != 1 || !strings.Contains(second.Out.String(), cfg.Control) || !strings.Contains(second.Out.String(), "in use by a running offload end") {
		t.Fatalf("a second client of the same config: exit %d:\n%s", code, second.Out)
	}

	// Killed: the socket stays; a new start replaces it.
	cli.Kill()
	if _, err := os.Lstat(cfg.Control); err != nil {
		t.Fatalf("a killed client's socket is gone (%v); the stale case is not tested", err)
	}
	stop(t, srv)
	startProc(t, "client again", bin, "client", "-c", cliFile)
	waitFor(t, time.Minute, "the new client's status", func() error {
		code, out, errOut := runStatusCmd("-c", cliFile)
		if code != 0 {
			return fmt.Errorf("exit %d: %s", code, errOut)
		}
		if !regexp.MustCompile(`(?m)^  link: +down; (next dial in [0-9.]+m?s|dialling now)$`).MatchString(out) ||
			!strings.Contains(out, "last error:") {
			return fmt.Errorf("no down link with its next dial and last error:\n%s", out)
		}
		return nil
	})
}

// The default control socket that cannot be made (here its directory is
// a file) does not stop the end: it runs without one and says why; a
// control: the config sets that cannot be made stops the start at that
// line.
func TestControlSocketDefaultOptional(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RUNTIME_DIRECTORY", notDir)
	body := "server: 127.0.0.1:7000\nkey_file: k.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n"
	c, err := config.ParseClient(filepath.Join(dir, "client.yaml"), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	ln, warn, err := listenControl(&c.Common)
	if ln != nil || err != nil || warn == nil {
		t.Fatalf("default socket in a file: %v, warn %v, err %v; want no socket, a warning", ln, warn, err)
	}
	c, err = config.ParseClient(filepath.Join(dir, "client.yaml"), []byte(body+"control: "+notDir+"/x.sock\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := listenControl(&c.Common); err == nil || !strings.Contains(err.Error(), "client.yaml:6: control:") {
		t.Fatalf("a set control: that cannot be made: %v; want an error at its line", err)
	}
}
