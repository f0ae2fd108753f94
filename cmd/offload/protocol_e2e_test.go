package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// refPython is a python3 that has the cryptography package, or "".
func refPython() (string, string) {
	var why []string
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		path, err := exec.LookPath(p)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		out, err := exec.Command(path, "-c", "import cryptography").CombinedOutput()
		if err == nil {
			return path, ""
		}
		why = append(why, path+": "+strings.TrimSpace(string(out)))
	}
	return "", strings.Join(why, "; ")
}

// TestE2EProtocolFromDocs runs testdata/refclient.py, a client written
// from docs/protocol.md alone (Noise written out by hand, the key
// confirmation, record keys, rekey ratchet, frames, yamux and the stream
// protocol), against the built server, for a CTR and a CBC suite. It
// proves the document is precise enough to reimplement the handshake and
// rekey, and checks from outside that a replayed first flight gets no
// answer and that a frame under the previous epoch's keys or with a
// flipped bit closes the link with nothing delivered. It speaks protocol
// version 3 (max_frame in the Noise payloads) and, as an older client
// would, version 2, which the server still answers.
func TestE2EProtocolFromDocs(t *testing.T) {
	py, why := refPython()
	if py == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no python3 with the cryptography package, and CI=true requires this test (scripts/deps.sh installs python3-cryptography): %s", why)
		}
		t.Skipf("no python3 with the cryptography package (scripts/deps.sh installs python3-cryptography; under CI=true this fails): %s", why)
	}
	bin := buildOffload(t)
	for _, run := range []struct{ suite, version string }{
		{"aes-256-ctr-hmac-sha256", "3"}, {"aes-128-cbc-hmac-sha256", "3"}, {"aes-256-ctr-hmac-sha256", "2"},
	} {
		suite := run.suite
		t.Run(suite+"/v"+run.version, func(t *testing.T) {
			dir := t.TempDir()
			keyFile := filepath.Join(dir, "offload.key")
			keygen(t, bin, keyFile)
			echo := startE2ETarget(t, testutil.Echo)
			a := writeConfigs(t, dir, map[string]string{"echo": echo.ln.Addr().String()})
			cfgPath := filepath.Join(dir, "server.yaml")
			b, err := os.ReadFile(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			s := edit(t, "server.yaml", string(b), `(?m)^suite: .*$`, "suite: "+suite)
			// The server rekeys what it sends every second: the reference
			// client's pieces come 1.2 s apart, so it must follow.
			s = edit(t, "server.yaml", s, `(?m)^rekey_interval: [^ ]*`, "rekey_interval: 1s")
			if err := os.WriteFile(cfgPath, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
			srv := startProc(t, "server", bin, "server", "-c", cfgPath)
			waitFor(t, 15*time.Second, "the server's metrics", func() error { _, err := scrape(a.serverMetrics); return err })

			cmd := exec.Command(py, filepath.Join("testdata", "refclient.py"), a.server, keyFile, suite, "echo", "1.2")
			cmd.Env = append(os.Environ(), "OFFLOAD_REF_VERSION="+run.version)
			timer := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
			out, err := cmd.CombinedOutput()
			timer.Stop()
			t.Logf("refclient.py:\n%s", out)
			if err != nil {
				t.Fatalf("refclient.py: %v", err)
			}
			wants := []string{"link ok", "replay ok", "oldkeys ok", "tamper ok"}
			if run.version == "3" {
				// The server's config leaves max_frame at 64 KiB.
				wants = append(wants, "version 3: server max_frame 65536, this client sends frames of at most 65536")
			}
			for _, want := range wants {
				if !strings.Contains(string(out), want) {
					t.Errorf("refclient.py did not say %q", want)
				}
			}
			// The server rekeyed what it sent back, and the client
			// followed from the document alone.
			m := regexp.MustCompile(`server frames in epoch (\d+)`).FindSubmatch(out)
			if m == nil {
				t.Fatal("refclient.py did not say which epoch the server's frames reached")
			}
			if n, _ := strconv.Atoi(string(m[1])); n < 2 {
				t.Errorf("the server's frames reached epoch %d, want 2 or more (rekey_interval 1s, pieces 1.2 s apart)", n)
			}
			// What the server saw: one replay refused, two links failed on a
			// tag, and the genuine one served.
			metrics, err := scrape(a.serverMetrics)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]float64{
				`offload_handshakes_total{role="server",result="replay"}`: 1,
				`offload_handshakes_total{role="server",result="ok"}`:     3,
				`offload_streams_total{role="server",result="ok"}`:        1,
				// The link's three and oldkeys's one.
				`offload_rekeys_total{role="server",dir="decrypt"}`: 4,
			} {
				if got, ok := metric(metrics, name); !ok || got != want {
					t.Errorf("%s = %v (found %v), want %v", name, got, ok, want)
				}
			}
			// Frames that failed their tag: the tampered one and the stale
			// one, and maybe the oldkeys link's next frame: the reference
			// client answers the server's resumption offer (a yamux ping,
			// resume_window being on by default) under the nonce the stale
			// frame took, and the record layer may open it before the link
			// is closed.
			if got, ok := metric(metrics, `offload_auth_failures_total{role="server"}`); !ok || got < 2 || got > 3 {
				t.Errorf("offload_auth_failures_total{role=\"server\"} = %v (found %v), want 2, or 3 with the offer's answer", got, ok)
			}
			if code := stop(t, srv); code != 0 {
				t.Errorf("server exit %d", code)
			}
		})
	}
}
