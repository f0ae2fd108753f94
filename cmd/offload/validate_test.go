package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/tunnel"
)

// exampleDir copies examples/*.yaml into a temporary directory with a new
// key file next to them (the key is not in the repository).
func exampleDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"server.yaml", "client.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "..", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runCmd(t, "keygen", "-o", filepath.Join(dir, "offload.key")); code != 0 {
		t.Fatalf("keygen: %s", stderr)
	}
	return dir
}

func TestValidateExamples(t *testing.T) {
	dir := exampleDir(t)
	server, client := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	code, stdout, stderr := runCmd(t, "validate", "-c", server, client)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	key, err := config.LoadKey(filepath.Join(dir, "offload.key"))
	if err != nil {
		t.Fatal(err)
	}
	want := server + ": ok (server: 2 services, suite aes-256-ctr-hmac-sha256, engine software, 1024 streams per link)\n" +
		client + ": ok (client: 1 forward, suite aes-256-ctr-hmac-sha256, engine software, 1024 streams per link)\n" +
		server + " + " + client + ": ok (client default, key " + config.KeyFingerprint(key) + "; 1 forward granted)\n"
	if stdout != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", stdout, want)
	}

	// The examples say what the prose says.
	s, err := config.LoadServer(server)
	if err != nil {
		t.Fatal(err)
	}
	if s.Listen != "192.0.2.1:7000" || s.Services["web"] != "127.0.0.1:8080" || s.Services["ssh"] != "127.0.0.1:22" {
		t.Errorf("server example: %+v", s)
	}
	c, err := config.LoadClient(client)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Servers) != 1 || c.Servers[0] != s.Listen || len(c.Forwards) != 1 || c.Forwards[0] != (config.Forward{Listen: "127.0.0.1:8080", Service: "web"}) {
		t.Errorf("client example: %+v", c)
	}
	if c.Suite != s.Suite {
		t.Errorf("examples use different suites: %v, %v", s.Suite, c.Suite)
	}
}

func TestValidateKeyFile(t *testing.T) {
	dir := exampleDir(t)
	server := filepath.Join(dir, "server.yaml")
	key := filepath.Join(dir, "offload.key")
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	line := lineOf(t, server, "key_file:")
	code, stdout, stderr := runCmd(t, "validate", server)
	want := server + line + " key_file: key file " + key + ": rule mode: it is mode 0644; group and others must have no access (chmod 600)\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant:\n%s", code, stdout, stderr, want)
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, "validate", server)
	if code != 1 || !strings.HasPrefix(stderr, server+line+" key_file: ") || !strings.Contains(stderr, "no such file") {
		t.Fatalf("missing key: exit %d, stderr %s", code, stderr)
	}
}

func TestValidateErrors(t *testing.T) {
	dir := exampleDir(t)
	bad := filepath.Join(dir, "bad.yaml")
	src := "listen: 192.0.2.1:7000\nkey_file: offload.key\nservices:\n  web: localhost\nmax_frame: 2MiB\n"
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "client.yaml")
	missing := filepath.Join(dir, "missing.yaml")
	code, stdout, stderr := runCmd(t, "validate", bad, good, missing)
	if code != 1 {
		t.Fatalf("exit %d", code)
	}
	if stdout != good+": ok (client: 1 forward, suite aes-256-ctr-hmac-sha256, engine software, 1024 streams per link)\n" {
		t.Errorf("stdout: %q", stdout)
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != 3 ||
		lines[0] != bad+`:4: services.web: target "localhost" has no port (want host:port)` ||
		!strings.HasPrefix(lines[1], bad+":5: max_frame: ") ||
		!strings.Contains(lines[2], missing) {
		t.Fatalf("stderr:\n%s", stderr)
	}
	if code, _, _ := runCmd(t, "validate"); code != 2 {
		t.Fatalf("validate without files: exit %d, want 2", code)
	}
}

// lineOf returns ":N:" for the first line of path that starts with prefix.
func lineOf(t *testing.T, path, prefix string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, prefix) {
			return fmt.Sprintf(":%d:", i+1)
		}
	}
	t.Fatalf("%s has no line starting with %q", path, prefix)
	return ""
}

// validate reads the metrics token file as start does, with the key
// file's rules, and refuses metrics beyond loopback without one.
func TestValidateMetricsToken(t *testing.T) {
	dir := exampleDir(t)
	server := filepath.Join(dir, "server.yaml")
	data, err := os.ReadFile(server)
	if err != nil {
		t.Fatal(err)
	}
	open := string(data) + "metrics: 0.0.0.0:9100\n"
	if err := os.WriteFile(server, []byte(open), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, "validate", server)
	if code != 1 || !strings.Contains(stderr, server+lineOf(t, server, "metrics:")+" metrics: 0.0.0.0:9100 is not a loopback address") {
		t.Fatalf("metrics on all interfaces without a token: exit %d, stderr %s", code, stderr)
	}
	if err := os.WriteFile(server, []byte(open+"metrics_token_file: metrics.token\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "metrics.token")
	if err := os.WriteFile(tok, []byte("c2VjcmV0LXRva2VuLWZvci10ZXN0cw==\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runCmd(t, "validate", server)
	want := server + lineOf(t, server, "metrics_token_file:") + " metrics_token_file: token file " + tok + ": rule mode"
	if code != 1 || !strings.HasPrefix(stderr, want) {
		t.Fatalf("token file mode 0644: exit %d, stderr %s, want %s", code, stderr, want)
	}
	if err := os.Chmod(tok, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "validate", server); code != 0 {
		t.Fatalf("good token file: exit %d, stderr %s", code, stderr)
	}
}

// A config that validates also starts: for the tunables at and around
// their edges, every server and client config that config accepts gives
// options the tunnel accepts too (max_frame 1500 used to pass validate
// and fail the start).
func TestValidatedConfigStarts(t *testing.T) {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(i*7 + 1)
	}
	tunables := map[string][]string{
		"max_frame":    {"1KiB", "1000", "1008", "1500", "1504", "16KiB", "65535", "64KiB", "1MiB", "1048575"},
		"yamux_window": {"256KiB", "300000", "1MiB", "16MiB"},
		"link_buffer":  {"1MiB", "2MiB", "16MiB", "1GiB"},
		"max_streams":  {"1", "10", "1024", "65535"},
	}
	accepted := 0
	for name, values := range tunables {
		for _, v := range values {
			for _, base := range []string{
				"listen: 127.0.0.1:7000\nkey_file: k\nservices:\n  web: 127.0.0.1:8080\n",
				"server: 127.0.0.1:7000\nkey_file: k\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n",
			} {
				cfg, err := config.Parse("/etc/offload/x.yaml", []byte(base+name+": "+v+"\n"))
				if err != nil {
					continue // refused with file:line: nothing to start
				}
				accepted++
				var o tunnel.Options
				switch x := cfg.(type) {
				case *config.Server:
					o = x.TunnelOptions()
				case *config.Client:
					o = x.TunnelOptions()
				}
				if err := configOptions(o, key, zap.NewNop()).Check(); err != nil {
					t.Errorf("%s: %s passes config but the tunnel refuses it: %v", name, v, err)
				}
			}
		}
	}
	if accepted == 0 {
		t.Fatal("config accepted none of the samples")
	}
}

// The clients example validates with its key files, and each client gets
// the services it lists.
func TestValidateClientsExample(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "server-clients.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "server-clients.yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Every missing key file in one run, each at its field.
	code, _, stderr := runCmd(t, "validate", file)
	var blamed []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if m := regexp.MustCompile(`:\d+: (clients\.\S+): .*no such file`).FindStringSubmatch(l); m != nil {
			blamed = append(blamed, m[1])
		}
	}
	if want := "clients.alice.key_file clients.bob.key_files[0] clients.bob.key_files[1] clients.admin.key_file"; code != 1 || strings.Join(blamed, " ") != want {
		t.Fatalf("without key files: exit %d, blamed %q, want %q:\n%s", code, blamed, want, stderr)
	}
	for _, k := range []string{"alice.key", "bob-2.key", "bob.key", "admin.key"} {
		if code, _, stderr := runCmd(t, "keygen", "-o", filepath.Join(dir, k)); code != 0 {
			t.Fatalf("keygen: %s", stderr)
		}
	}
	code, stdout, stderr := runCmd(t, "validate", file)
	if code != 0 || !strings.Contains(stdout, "server: 3 services, 3 clients") {
		t.Fatalf("exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	s, err := config.LoadServer(file)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.LoadClientKeys()
	if err != nil {
		t.Fatal(err)
	}
	sc, err := serverConfig(s, configOptions(s.TunnelOptions(), nil, zap.NewNop()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || len(sc.Clients) != 3 || len(sc.Clients[1].Keys) != 2 || !sc.Clients[2].Access.AllServices ||
		strings.Join(sc.Clients[0].Access.Services, ",") != "web,ssh" {
		t.Errorf("clients: %+v", sc.Clients)
	}
}

// TestValidateDynamicExamples: the SOCKS, UDP and reverse settings the
// examples carry commented out are valid once uncommented, and validate
// counts them.
func TestValidateDynamicExamples(t *testing.T) {
	dir := exampleDir(t)
	start := regexp.MustCompile(`^# (socks|socks_users_file|socks_allow|udp_services|udp_forwards|reverse_allow|reverse):`)
	for _, name := range []string{"server.yaml", "client.yaml"} {
		p := filepath.Join(dir, name)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		in := false
		for i, l := range lines {
			switch {
			case start.MatchString(l):
				in = true
			case in && strings.HasPrefix(l, "#   "):
			default:
				in = false
			}
			if in {
				lines[i] = strings.TrimPrefix(l, "# ")
			}
		}
		if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "socks.users"), []byte("alice:s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	server, client := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	code, stdout, stderr := runCmd(t, "validate", "-c", server, client)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	key, err := config.LoadKey(filepath.Join(dir, "offload.key"))
	if err != nil {
		t.Fatal(err)
	}
	// The pair: the examples' client asks only what the server grants.
	want := server + ": ok (server: 2 services, 4 socks rules, 1 UDP service, 2 reverse rules, suite aes-256-ctr-hmac-sha256, engine software, 1024 streams per link)\n" +
		client + ": ok (client: 1 forward, 1 socks listener, 1 UDP forward, 1 reverse forward, suite aes-256-ctr-hmac-sha256, engine software, 1024 streams per link)\n" +
		server + " + " + client + ": ok (client default, key " + config.KeyFingerprint(key) + "; 1 forward, socks, 1 UDP forward, 1 reverse forward granted)\n"
	if stdout != want {
		t.Fatalf("stdout:\n%s\nwant:\n%s", stdout, want)
	}
	if err := os.Chmod(filepath.Join(dir, "socks.users"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCmd(t, "validate", "-c", client); code != 1 || !strings.Contains(stderr, "socks_users_file: SOCKS users file") {
		t.Errorf("a users file others can read: exit %d, %s", code, stderr)
	}
}

// validate refuses an engine the start refuses, with the start's words:
// afalg:foo is a driver no kernel has (and this one may have no AF_ALG at
// all), so offload server stops at its engine and validate must too.
func TestValidateEngineAsStart(t *testing.T) {
	dir := exampleDir(t)
	server := filepath.Join(dir, "server.yaml")
	data, err := os.ReadFile(server)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "afalg.yaml")
	src := edit(t, server, string(data), `(?m)^engine: software$`, "engine: afalg:foo")
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, vErr := runCmd(t, "validate", bad)
	if code != 1 || stdout != "" || !strings.Contains(vErr, bad+":") || !strings.Contains(vErr, " engine: ") {
		t.Fatalf("validate: exit %d, stdout %q, stderr %q; want exit 1 and the engine's error", code, stdout, vErr)
	}
	code, _, sErr := runCmd(t, "server", "-c", bad)
	if code != 1 || !strings.HasSuffix(sErr, "\noffload server: "+vErr) {
		t.Fatalf("server: exit %d, stderr %q; want validate's %q", code, sErr, vErr)
	}
}

// pairDir writes a server with two clients and two keys (alice: web and
// the UDP service dns, SOCKS to 192.0.2.0/24, reverse on 127.0.0.1:9000;
// bob: ssh), and returns the directory.
func pairDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []string{"alice.key", "bob.key", "eve.key"} {
		if code, _, stderr := runCmd(t, "keygen", "-o", filepath.Join(dir, k)); code != 0 {
			t.Fatalf("keygen: %s", stderr)
		}
	}
	writeFile(t, filepath.Join(dir, "server.yaml"), `listen: 127.0.0.1:7000
engine: software
services:
  web: 127.0.0.1:8080
  ssh: 127.0.0.1:22
udp_services:
  dns: 127.0.0.1:53
clients:
  alice:
    key_file: alice.key
    services: [web, dns]
    socks_allow: [192.0.2.0/24]
    reverse_allow: [127.0.0.1:9000]
  bob:
    key_file: bob.key
    services: [ssh]
`)
	return dir
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// offload validate SERVER CLIENT checks the pair as the server would
// meet the client: a client granted what it asks passes and is named
// with its key's fingerprint; each of the four mismatches (another suite,
// a key the server lacks, a forward to a service the server lacks, one
// the client may not use) and a SOCKS, UDP or reverse forward the client
// is not granted fails, named as the handshake or the server names it, at
// the client config's line.
func TestValidatePairs(t *testing.T) {
	dir := pairDir(t)
	server := filepath.Join(dir, "server.yaml")
	alice, err := config.LoadKey(filepath.Join(dir, "alice.key"))
	if err != nil {
		t.Fatal(err)
	}
	const head = "server: 127.0.0.1:7000\nengine: software\n"
	for _, tc := range []struct {
		name, client string
		ok           bool
		want         []string
	}{
		{"granted", head + "key_file: alice.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\nsocks: 127.0.0.1:1080\n" +
			"udp_forwards:\n  - listen: 127.0.0.1:5353\n    service: dns\nreverse:\n  - listen: 127.0.0.1:9000\n    target: 127.0.0.1:22\n", true,
			[]string{"client.yaml: ok (client alice, key " + config.KeyFingerprint(alice) + "; 1 forward, socks, 1 UDP forward, 1 reverse forward granted)"}},
		{"other suite", head + "suite: aes-256-cbc-hmac-sha256\nkey_file: alice.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n", false,
			[]string{"the handshake fails; the client says: server uses aes-256-ctr-hmac-sha256, we use aes-256-cbc-hmac-sha256; the server says: client uses aes-256-cbc-hmac-sha256"}},
		{"other key", head + "key_file: eve.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n", false,
			[]string{"the handshake fails; the client says: authentication failed", "the server says: authentication failed (client holds none of our 2 keys",
				"the server's: alice " + config.KeyFingerprint(alice) + ", bob "}},
		{"missing service", head + "key_file: alice.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n  - listen: 127.0.0.1:8081\n    service: ftp\n", false,
			[]string{"client.yaml:8: forwards[1].service: the server refuses client alice: unknown service: the server has no such service (it has ssh, web)"}},
		{"service not allowed", head + "key_file: bob.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n", false,
			[]string{"client.yaml:6: forwards[0].service: the server refuses client bob: service not allowed for this client (it may use ssh)"}},
		{"socks, UDP and reverse not granted", head + "key_file: bob.key\nforwards:\n  - listen: 127.0.0.1:8080\n    service: ssh\nsocks: 127.0.0.1:1080\n" +
			"udp_forwards:\n  - listen: 127.0.0.1:5353\n    service: dns\nreverse:\n  - listen: 127.0.0.1:9000\n    target: 127.0.0.1:22\n", false,
			[]string{"client.yaml:7: socks: the server refuses client bob: not allowed by the server: every destination: the server has no socks_allow for this client",
				"client.yaml:10: udp_forwards[0].service: the server refuses client bob: UDP service not allowed for this client (it may use ssh)",
				"client.yaml:12: reverse[0].listen: the server refuses client bob: not allowed by the server: listen address 127.0.0.1:9000 is not in the server's reverse_allow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := filepath.Join(dir, "client.yaml")
			writeFile(t, client, tc.client)
			code, stdout, stderr := runCmd(t, "validate", server, client)
			if (code == 0) != tc.ok {
				t.Errorf("exit %d, want ok %v\nstdout:\n%s\nstderr:\n%s", code, tc.ok, stdout, stderr)
			}
			// Each file alone is fine: only the pair fails.
			if !strings.Contains(stdout, client+": ok (client:") {
				t.Errorf("the client config alone did not validate:\n%s%s", stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout+stderr, w) {
					t.Errorf("output lacks %q:\nstdout:\n%s\nstderr:\n%s", w, stdout, stderr)
				}
			}
		})
	}
}
