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

	"go.uber.org/zap/zaptest"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel"
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
	opt := tunnel.Options{Suite: suite.Default, PSK: key, StatusInterval: -1, Logger: log}
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
	var st tunnel.Status
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

	// A config without metrics: the error says what to add.
	bare := filepath.Join(dir, "bare.yaml")
	if err := os.WriteFile(bare, []byte(fmt.Sprintf("listen: %s\nkey_file: offload.key\nservices:\n  held: %s\n", sln.Addr(), target)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runStatusCmd("-c", bare); code != 1 || !strings.Contains(errOut, "metrics: 127.0.0.1:9100") {
		t.Errorf("no metrics: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{{}, {"-c", file, "-addr", metricsAddr}, {"-c", file, "-token-file", tokFile}, {"-c", file, "extra"}} {
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
