package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/control"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

const goodServer = `listen: 192.0.2.1:7000
key_file: offload.key
services:
  web: 127.0.0.1:8080
  ssh: 127.0.0.1:22
`

const goodClient = `server: 192.0.2.1:7000
key_file: /etc/offload/offload.key
forwards:
  - listen: 127.0.0.1:8080
    service: web
`

func TestParseServerDefaults(t *testing.T) {
	s, err := ParseServer("dir/server.yaml", []byte(goodServer))
	if err != nil {
		t.Fatal(err)
	}
	want := &Server{
		Common: Common{
			File:             "dir/server.yaml",
			KeyFile:          filepath.Join("dir", "offload.key"),
			Suite:            suite.Default,
			Engine:           "software",
			MaxFrame:         65536,
			YamuxWindow:      1 << 20,
			Keepalive:        15 * time.Second,
			DialTimeout:      10 * time.Second,
			HandshakeTimeout: 10 * time.Second,
			MaxStreams:       1024,
			LinkBuffer:       16 << 20,
			DrainTimeout:     10 * time.Second,
			MemoryLimit:      20 << 20,
			Log:              Log{Level: zapcore.InfoLevel, Format: "console"},
		},
		Listen:                 "192.0.2.1:7000",
		Services:               map[string]string{"web": "127.0.0.1:8080", "ssh": "127.0.0.1:22"},
		MaxLinksPerClient:      2,
		MaxHandshakes:          64,
		MaxHandshakesPerSource: 8,
	}
	// Not in the literal above, so that its alignment stays as it was.
	want.EngineCheckInterval = 5 * time.Minute
	want.ResumeWindow = time.Minute
	want.RekeyInterval = time.Hour
	want.Control = control.DefaultPath(ControlName("dir/server.yaml"))
	s.fields = nil
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("got  %+v\nwant %+v", s, want)
	}
}

func TestParseServerAllFields(t *testing.T) {
	src := goodServer + `suite: AES-128-CBC-HMAC-SHA256
engine: afalg:cbc(aes-generic)
max_frame: 64KiB
yamux_window: 4194304
keepalive: 0
dial_timeout: 3s
handshake_timeout: 1m
max_streams: 10
link_buffer: 64MiB
max_links: 2
max_links_per_client: 1
max_handshakes: 32
max_handshakes_per_source: 4
drain_timeout: 0s
log: {level: debug, format: json}
metrics: "[::1]:9100"
verify: 100
engine_check_interval: 1m
rekey_interval: 10m
`
	s, err := ParseServer("/etc/offload/server.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Common
	if c.KeyFile != "/etc/offload/offload.key" {
		t.Errorf("KeyFile = %q", c.KeyFile)
	}
	if c.Suite != (suite.Suite{Cipher: engine.Cipher{Mode: engine.CBC, KeyBits: 128}, MAC: suite.HMACSHA256}) {
		t.Errorf("Suite = %v", c.Suite)
	}
	if c.Engine != "afalg:cbc(aes-generic)" || c.MaxFrame != 64<<10 || c.YamuxWindow != 4<<20 ||
		c.Keepalive != 0 || c.DialTimeout != 3*time.Second || c.HandshakeTimeout != time.Minute ||
		c.MaxStreams != 10 || c.DrainTimeout != 0 || c.Log != (Log{zapcore.DebugLevel, "json"}) || c.Metrics != "[::1]:9100" ||
		c.LinkBuffer != 64<<20 || c.Verify != 100 || c.EngineCheckInterval != time.Minute || c.RekeyInterval != 10*time.Minute {
		t.Errorf("got %+v", c)
	}
	if s.MaxLinks != 2 || s.MaxLinksPerClient != 1 || s.MaxHandshakes != 32 || s.MaxHandshakesPerSource != 4 {
		t.Errorf("server caps: %d links, %d per client, %d handshakes, %d per source", s.MaxLinks, s.MaxLinksPerClient, s.MaxHandshakes, s.MaxHandshakesPerSource)
	}
}

func TestParseClient(t *testing.T) {
	src := goodClient + `  - listen: ":2222"
    service: ssh
redial:
  min: 1s
  max: 1m
`
	c, err := ParseClient("client.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Servers, []string{"192.0.2.1:7000"}) || c.KeyFile != "/etc/offload/offload.key" {
		t.Errorf("got %+v", c)
	}
	wantF := []Forward{{"127.0.0.1:8080", "web"}, {":2222", "ssh"}}
	if !reflect.DeepEqual(c.Forwards, wantF) {
		t.Errorf("Forwards = %+v", c.Forwards)
	}
	if c.Redial != (Redial{time.Second, time.Minute}) {
		t.Errorf("Redial = %+v", c.Redial)
	}
	c2, err := ParseClient("client.yaml", []byte(goodClient))
	if err != nil {
		t.Fatal(err)
	}
	if c2.Redial != (Redial{tunnel.DefaultRedialMin, tunnel.DefaultRedialMax}) || c2.YamuxWindow != tunnel.DefaultOptions().YamuxWindow {
		t.Errorf("defaults: %+v", c2)
	}
}

func TestParseDispatch(t *testing.T) {
	v, err := Parse("s.yaml", []byte(goodServer))
	if _, ok := v.(*Server); !ok || err != nil {
		t.Fatalf("Parse(server) = %T, %v", v, err)
	}
	v, err = Parse("c.yaml", []byte(goodClient))
	if _, ok := v.(*Client); !ok || err != nil {
		t.Fatalf("Parse(client) = %T, %v", v, err)
	}
	// A server file missing services is still recognised by listen, and
	// its error is about services, not about what kind of file it is.
	_, err = Parse("s.yaml", []byte("listen: :7000\nkey_file: k\n"))
	if got := positions(t, err); !reflect.DeepEqual(got, []string{"1:services"}) {
		t.Fatalf("Parse(server without services) errors at %v: %v", got, err)
	}
	for _, src := range []string{"key_file: k\n", goodServer + "forwards: []\n"} {
		_, err := Parse("x.yaml", []byte(src))
		if !errors.Is(err, ErrUnknownKind) {
			t.Errorf("Parse(%q) = %v, want ErrUnknownKind", src, err)
		}
	}
}

// positions returns "LINE:FIELD" for each error in err, which must be
// Errors.
func positions(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %v (%T) is not Errors", err, err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		if e.Line < 1 {
			t.Errorf("error without a line: %v", e)
		}
		out[i] = fmt.Sprintf("%d:%s", e.Line, e.Field)
	}
	return out
}

func TestErrorPositions(t *testing.T) {
	tests := []struct {
		name   string
		client bool
		src    string
		want   []string
	}{
		{"target without port", false, "listen: :7000\nkey_file: k\nservices:\n  web: localhost\n", []string{"4:services.web"}},
		{"listen without port", false, "key_file: k\nlisten: 0.0.0.0\nservices: {a: 'b:1'}\n", []string{"2:listen"}},
		{"port range", false, "listen: :0\nkey_file: k\nservices: {a: 'b:65536'}\n", []string{"1:listen", "3:services.a"}},
		{"named port", false, "listen: :http\nkey_file: k\nservices: {a: 'b:1'}\n", []string{"1:listen"}},
		{"bad host", false, "listen: :1\nkey_file: k\nservices: {a: 'b c:1'}\n", []string{"3:services.a"}},
		{"service name", false, "listen: :1\nkey_file: k\nservices:\n  ok: a:1\n  Web: a:2\n  -x: a:3\n", []string{"5:services.Web", "6:services.-x"}},
		{"no services", false, "listen: :1\nkey_file: k\nservices: {}\n", []string{"3:services"}},
		{"services not a map", false, "listen: :1\nkey_file: k\nservices:\n  - a:1\n", []string{"3:services"}},
		{"empty target", false, "listen: :1\nkey_file: k\nservices:\n  web:\n", []string{"4:services.web"}},
		{"missing required", false, "listen: :1\nservices: {a: 'b:1'}\n", []string{"1:key_file"}},
		{"unknown field", false, goodServer + "max_fram: 1\n", []string{"6:max_fram"}},
		{"unknown nested", false, goodServer + "log:\n  level: info\n  colour: true\n", []string{"8:log.colour"}},
		{"duplicate", false, goodServer + "listen: :1\n", []string{"6:listen"}},
		{"suite", false, goodServer + "suite: aes-256-gcm\n", []string{"6:suite"}},
		{"ecb suite", false, goodServer + "suite: aes-256-ecb-hmac-sha256\n", []string{"6:suite"}},
		{"engine", false, goodServer + "engine: openssl\n", []string{"6:engine"}},
		{"engine driver", false, goodServer + "engine: 'afalg:'\n", []string{"6:engine"}},
		{"engine driver on software", false, goodServer + "engine: software:x\n", []string{"6:engine"}},
		{"engine cryptodev driver", false, goodServer + "engine: cryptodev:cbc-aes-aesni\n", []string{"6:engine"}},
		{"sizes", false, goodServer + "max_frame: 512\nyamux_window: 32MiB\n", []string{"6:max_frame", "7:yamux_window"}},
		{"size hard cap", false, goodServer + "max_frame: 1048577\n", []string{"6:max_frame"}},
		{"size units", false, goodServer + "max_frame: 16KB\nyamux_window: 1 furlong\n", []string{"6:max_frame", "7:yamux_window"}},
		{"size not whole blocks", false, goodServer + "max_frame: 1500\n", []string{"6:max_frame"}},
		{"durations", false, goodServer + "keepalive: 15\ndial_timeout: 0\nhandshake_timeout: -1s\ndrain_timeout: soon\n",
			[]string{"6:keepalive", "7:dial_timeout", "8:handshake_timeout", "9:drain_timeout"}},
		{"max_streams", false, goodServer + "max_streams: 0\n", []string{"6:max_streams"}},
		// The tunnel's rule (tunnel.Options.Check), at the file's line.
		{"keepalive too often", false, goodServer + "keepalive: 100ms\n", []string{"6:keepalive"}},
		{"rekey_interval", false, goodServer + "rekey_interval: 100ms\n", []string{"6:rekey_interval"}},
		{"rekey_interval zero", false, goodServer + "rekey_interval: 0s\n", []string{"6:rekey_interval"}},
		{"rekey_interval long", false, goodServer + "rekey_interval: 48h\n", []string{"6:rekey_interval"}},
		{"server caps", false, goodServer + "max_links: 0\nmax_handshakes: 5000\nmax_handshakes_per_source: x\n",
			[]string{"6:max_links", "7:max_handshakes", "8:max_handshakes_per_source"}},
		{"per client over all", false, goodServer + "max_links: 2\nmax_links_per_client: 3\n", []string{"7:max_links_per_client"}},
		{"per client zero", false, goodServer + "max_links_per_client: 0\n", []string{"6:max_links_per_client"}},
		{"per source over all", false, goodServer + "max_handshakes: 4\nmax_handshakes_per_source: 8\n", []string{"7:max_handshakes_per_source"}},
		{"link_buffer range", false, goodServer + "link_buffer: 256KiB\n", []string{"6:link_buffer"}},
		{"link_buffer below one stream", false, goodServer + "link_buffer: 1MiB\n", []string{"6:link_buffer"}},
		{"window over link_buffer", false, goodServer + "yamux_window: 16MiB\n", []string{"6:yamux_window"}},
		{"log", false, goodServer + "log:\n  level: verbose\n  format: xml\n", []string{"7:log.level", "8:log.format"}},
		{"log not a map", false, goodServer + "log: debug\n", []string{"6:log"}},
		{"metrics", false, goodServer + "metrics: 9100\n", []string{"6:metrics"}},
		{"metrics is listen", false, goodServer + "metrics: 192.0.2.1:7000\nmetrics_token_file: t\n", []string{"6:metrics"}},
		{"verify", false, goodServer + "verify: -1\n", []string{"6:verify"}},
		{"verify unit", false, goodServer + "verify: 1KiB\n", []string{"6:verify"}},
		{"verify huge", false, goodServer + "verify: 2000000\n", []string{"6:verify"}},
		// 1ns ran the known answers back to back: 109% CPU on the 2-core
		// development machine.
		{"engine_check_interval tiny", false, goodServer + "engine_check_interval: 1ns\n", []string{"6:engine_check_interval"}},
		{"engine_check_interval under a second", false, goodServer + "engine_check_interval: 999ms\n", []string{"6:engine_check_interval"}},
		{"engine_check_interval", false, goodServer + "engine_check_interval: 5\n", []string{"6:engine_check_interval"}},
		{"metrics not loopback", false, goodServer + "metrics: 192.0.2.1:9100\n", []string{"6:metrics"}},
		{"metrics all interfaces", false, goodServer + "metrics: 0.0.0.0:9100\n", []string{"6:metrics"}},
		{"metrics all v6", false, goodServer + "metrics: '[::]:9100'\n", []string{"6:metrics"}},
		{"metrics host name", false, goodServer + "metrics: router.lan:9100\n", []string{"6:metrics"}},
		{"metrics token without metrics", false, goodServer + "metrics_token_file: t\n", []string{"6:metrics_token_file"}},
		{"metrics token empty", false, goodServer + "metrics: :9100\nmetrics_token_file: ''\n", []string{"7:metrics_token_file"}},
		{"client metrics not loopback", true, goodClient + "metrics: 192.0.2.2:9100\n", []string{"6:metrics"}},
		{"list for scalar", false, goodServer + "suite: [a, b]\n", []string{"6:suite"}},
		{"alias", false, "listen: &a ':1'\nkey_file: *a\nservices: {a: 'b:1'}\n", []string{"2:key_file"}},
		{"merge key", false, goodServer + "<<: {a: 1}\n", []string{"6:"}},
		{"syntax", false, "listen: :1\nkey_file: k\nservices:\n  web: \"127.0.0.1:80\n", []string{"4:"}},
		{"tab indent", false, "listen: :1\n\tkey_file: k\n", []string{"2:"}},
		{"two documents", false, goodServer + "---\n" + goodServer, []string{"7:"}},
		{"empty", false, "# nothing\n", []string{"1:"}},
		{"not a mapping", false, "- a\n- b\n", []string{"1:"}},
		{"errors in order", false, "services:\n  web: x\nlisten: x\nkey_file: ''\n", []string{"2:services.web", "3:listen", "4:key_file"}},

		{"client server address", true, "server: :7000\nkey_file: k\nforwards: [{listen: ':1', service: a}]\n", []string{"1:server"}},
		{"client no forwards", true, "server: a:1\nkey_file: k\nforwards: []\n", []string{"3:forwards"}},
		{"client forward fields", true, "server: a:1\nkey_file: k\nforwards:\n  - listen: 127.0.0.1:80\n  - service: web\n  - listen: :1\n    service: Web\n    extra: 1\n",
			[]string{"4:forwards[0].service", "5:forwards[1].listen", "7:forwards[2].service", "8:forwards[2].extra"}},
		{"client forward not a map", true, "server: a:1\nkey_file: k\nforwards:\n  - 127.0.0.1:80\n", []string{"4:forwards[0]"}},
		{"client duplicate listen", true, "server: a:1\nkey_file: k\nforwards:\n  - {listen: '127.0.0.1:80', service: a}\n  - {listen: '127.0.0.1:81', service: a}\n  - {listen: ':80', service: b}\n  - {listen: '[::ffff:127.0.0.1]:81', service: b}\n",
			[]string{"6:forwards[2].listen", "7:forwards[3].listen"}},
		{"client redial", true, goodClient + "redial:\n  min: 10s\n  max: 1s\n", []string{"7:redial.min"}},
		{"client redial zero", true, goodClient + "redial:\n  min: 0\n  maximum: 1s\n", []string{"7:redial.min", "8:redial.maximum"}},
		{"client has services", true, goodClient + "services: {a: 'b:1'}\n", []string{"6:services"}},
		{"client tunables", true, goodClient + "yamux_window: 1KiB\n", []string{"6:yamux_window"}},
		{"client has server caps", true, goodClient + "max_links: 2\n", []string{"6:max_links"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.client {
				_, err = ParseClient("f.yaml", []byte(tt.src))
			} else {
				_, err = ParseServer("f.yaml", []byte(tt.src))
			}
			if err == nil {
				t.Fatalf("no error for\n%s", tt.src)
			}
			if got := positions(t, err); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("errors at %q, want %q:\n%v", got, tt.want, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "f.yaml:") {
					t.Errorf("line %q does not start with the file name", line)
				}
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	_, err := ParseServer("examples/server.yaml", []byte("listen: :7000\nkey_file: k\nservices:\n  web: localhost\n  ssh: 127.0.0.1:22\nmax_frame: 2MiB\n"))
	want := `examples/server.yaml:4: services.web: target "localhost" has no port (want host:port)
examples/server.yaml:6: max_frame: 2MiB is more than the maximum of 1048576 bytes`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	var es Errors
	if !errors.As(err, &es) || es[0].Col != 8 {
		t.Fatalf("column of first error: %+v", es[0])
	}
}

func TestCommonLoadKey(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(cfg, []byte(goodServer), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := LoadServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyFile != filepath.Join(dir, "offload.key") {
		t.Fatalf("KeyFile = %q, want it next to the config", s.KeyFile)
	}
	_, err = s.LoadKey()
	var e *Error
	if !errors.As(err, &e) || e.Line != 2 || e.Field != "key_file" || e.File != cfg || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LoadKey without a key file: %#v", err)
	}
	key, _ := GenerateKey()
	if err := os.WriteFile(s.KeyFile, EncodeKey(key), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.KeyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = s.LoadKey()
	if !errors.Is(err, ErrKeyPermissions) || !strings.HasPrefix(err.Error(), cfg+":2: key_file: key file ") {
		t.Fatalf("LoadKey with mode 0644: %v", err)
	}
	if err := os.Chmod(s.KeyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadKey(); err != nil {
		t.Fatal(err)
	}
	// FieldError blames a field the file doesn't set on line 1.
	if e := s.FieldError("engine", engine.ErrUnsupported).(*Error); e.Line != 1 || !errors.Is(e, engine.ErrUnavailable) {
		t.Fatalf("FieldError(engine) = %+v", e)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load(missing) = %v", err)
	}
	if _, err := LoadClient(dir); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("LoadClient(dir) = %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadServer(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("LoadServer(big) = %v", err)
	}
}

func TestParseProfileAndHybrid(t *testing.T) {
	c, err := ParseClient("/etc/offload/client.yaml", []byte(goodClient+"engine: hybrid\nprofile: calib/profile.json\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Engine != selector.SpecHybrid || c.Profile != "/etc/offload/calib/profile.json" {
		t.Errorf("engine %q profile %q", c.Engine, c.Profile)
	}
	c, err = ParseClient("client.yaml", []byte(goodClient+"profile: /var/lib/offload/p.json\n"))
	if err != nil || c.Profile != "/var/lib/offload/p.json" {
		t.Errorf("absolute profile: %v %q", err, c.Profile)
	}
	if c, _ := ParseClient("client.yaml", []byte(goodClient)); c.Profile != "" {
		t.Errorf("default profile %q, want empty (the selector's default)", c.Profile)
	}
	_, err = ParseClient("client.yaml", []byte(goodClient+"profile: ''\n"))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != "profile" || errs[0].Line != 6 {
		t.Errorf("empty profile: %v", err)
	}
}

func TestParseMemoryLimit(t *testing.T) {
	c, err := ParseClient("client.yaml", []byte(goodClient))
	if err != nil || c.MemoryLimit != DefaultMemoryLimit {
		t.Fatalf("default: %v %d", err, c.MemoryLimit)
	}
	for src, want := range map[string]int{"0": 0, "16MiB": 16 << 20, "64MiB": 64 << 20} {
		c, err := ParseClient("client.yaml", []byte(goodClient+"memory_limit: "+src+"\n"))
		if err != nil || c.MemoryLimit != want {
			t.Errorf("memory_limit %s: %v %d, want %d", src, err, c.MemoryLimit, want)
		}
	}
	for _, src := range []string{"1MiB", "lots", "-1"} {
		_, err := ParseClient("client.yaml", []byte(goodClient+"memory_limit: "+src+"\n"))
		var errs Errors
		if !errors.As(err, &errs) || errs[0].Field != "memory_limit" || errs[0].Line != 6 {
			t.Errorf("memory_limit %s: %v", src, err)
		}
	}
}

func TestParseMaxProcs(t *testing.T) {
	c, err := ParseClient("client.yaml", []byte(goodClient))
	if err != nil || c.MaxProcs != 0 {
		t.Fatalf("default: %v %d, want 0 (the runtime's choice)", err, c.MaxProcs)
	}
	for src, want := range map[string]int{"0": 0, "1": 1, "4": 4, "1024": 1024} {
		c, err := ParseClient("client.yaml", []byte(goodClient+"max_procs: "+src+"\n"))
		if err != nil || c.MaxProcs != want {
			t.Errorf("max_procs %s: %v %d, want %d", src, err, c.MaxProcs, want)
		}
	}
	for _, src := range []string{"-1", "1025", "two", "1.5", "[1]"} {
		_, err := ParseClient("client.yaml", []byte(goodClient+"max_procs: "+src+"\n"))
		var errs Errors
		if !errors.As(err, &errs) || errs[0].Field != "max_procs" || errs[0].Line != 6 {
			t.Errorf("max_procs %s: %v", src, err)
		}
	}
}

// The config's defaults are the tunnel's: a setting left out means the
// same whether the tunnel or the config fills it in.
func TestDefaultsMatchTunnel(t *testing.T) {
	s, err := ParseServer("s.yaml", []byte(goodServer))
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseClient("c.yaml", []byte(goodClient))
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]tunnel.Options{"server": s.TunnelOptions(), "client": c.TunnelOptions()} {
		if want := tunnel.DefaultOptions(); !reflect.DeepEqual(o, want) {
			t.Errorf("%s: options %+v, want the tunnel's defaults %+v", name, o, want)
		}
	}
	if links, per := tunnel.LinkCaps(s.MaxLinks, s.MaxLinksPerClient, 0); links != tunnel.DefaultMaxLinks || per != tunnel.DefaultMaxLinksPerClient ||
		s.MaxHandshakes != tunnel.DefaultMaxHandshakes || s.MaxHandshakesPerSource != tunnel.DefaultMaxHandshakesPerSource {
		t.Errorf("server caps: links %d, per client %d, handshakes %d, per source %d", links, per, s.MaxHandshakes, s.MaxHandshakesPerSource)
	}
	if c.Redial != (Redial{tunnel.DefaultRedialMin, tunnel.DefaultRedialMax}) {
		t.Errorf("redial %+v", c.Redial)
	}
	if s.LinkStreams() != tunnel.DefaultOptions().MaxStreams || s.LinkStreams() < 1000 {
		t.Errorf("link streams: config %d, want at least 1000 at the defaults", s.LinkStreams())
	}
}

// Metrics are served on loopback unless a token file is set.
func TestMetricsAddress(t *testing.T) {
	for _, tc := range []struct {
		src, addr, token string
	}{
		{"metrics: :9100\n", "127.0.0.1:9100", ""},
		// localhost is not resolved: a hosts file naming another
		// address made validate pass what the start refused.
		{"metrics: localhost:9100\n", "127.0.0.1:9100", ""},
		{"metrics: LocalHost:9100\n", "127.0.0.1:9100", ""},
		{"metrics: localhost.:9100\n", "127.0.0.1:9100", ""},
		{"metrics: 127.0.0.2:9100\n", "127.0.0.2:9100", ""},
		{"metrics: '[::1]:9100'\n", "[::1]:9100", ""},
		{"metrics: 0.0.0.0:9100\nmetrics_token_file: metrics.token\n", "0.0.0.0:9100", "/etc/offload/metrics.token"},
		{"metrics_token_file: /run/t\nmetrics: 192.0.2.1:9100\n", "192.0.2.1:9100", "/run/t"},
	} {
		s, err := ParseServer("/etc/offload/server.yaml", []byte(goodServer+tc.src))
		if err != nil {
			t.Errorf("%q: %v", tc.src, err)
			continue
		}
		if s.Metrics != tc.addr || s.MetricsTokenFile != tc.token {
			t.Errorf("%q: metrics %q, token file %q; want %q, %q", tc.src, s.Metrics, s.MetricsTokenFile, tc.addr, tc.token)
		}
	}
}

func TestCheckEngineCryptodev(t *testing.T) {
	for _, ok := range []string{"cryptodev", "cryptodev:hw"} {
		if err := CheckEngine(ok); err != nil {
			t.Errorf("CheckEngine(%q) = %v", ok, err)
		}
	}
	// cryptodev-linux cannot bind a driver by name: only :hw is a choice.
	for _, bad := range []string{"cryptodev:", "cryptodev:cbc-aes-aesni", "cryptodev:HW"} {
		if err := CheckEngine(bad); err == nil {
			t.Errorf("CheckEngine(%q) = nil, want an error", bad)
		}
	}
}

// Config validation and the runtime accept exactly the same engine specs:
// CheckEngine passes a spec if and only if selector.Engines, which the
// tunnel's start calls, gets past the spec and on to the engine (here it
// then stops: the context is cancelled, or the engine is unavailable in
// this container). Every registry spec, auto and hybrid, and near misses.
func TestCheckEngineIsTheRuntimeCheck(t *testing.T) {
	specs := []string{"", ":", "auto", "hybrid", "auto:x", "hybrid:", "AUTO", " auto", "all", "openssl",
		"cryptodev:", "cryptodev:HW", "cryptodev:cbc-aes-aesni", "software:", "software:x",
		"afalg:", "afalg::", "afalg:a b", "afalg:" + strings.Repeat("d", 127), "afalg:" + strings.Repeat("d", 128),
		"afalg:cbc(aes-generic)", "afalg:x:y", "afalg-aead:", "afalg-aead:virtio_crypto", "afalg-aead:é"}
	for _, f := range engine.Families() {
		specs = append(specs, f.Name, f.Name+":hw", f.Name+":virtio_crypto_aes_cbc", f.Name+":", f.Name+" ", strings.ToUpper(f.Name))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, spec := range specs {
		cfgErr := CheckEngine(spec)
		_, _, runErr := selector.Engines(ctx, spec, engine.Cipher{Mode: engine.CTR, KeyBits: 256},
			selector.EngineOptions{Profile: filepath.Join(t.TempDir(), "profile.json"), Stats: new(record.Stats)})
		runRefused := errors.Is(runErr, engine.ErrUnknownEngine)
		if (cfgErr != nil) != runRefused {
			t.Errorf("%q: config says %v, the runtime %v", spec, cfgErr, runErr)
		}
		if cfgErr != nil && !errors.Is(cfgErr, engine.ErrUnknownEngine) {
			t.Errorf("%q: %v does not wrap ErrUnknownEngine", spec, cfgErr)
		}
	}
}

func TestLinkWait(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		err  string
	}{
		{"", tunnel.DefaultOptions().LinkWait, ""},
		{"link_wait: 0\n", 0, ""},
		{"link_wait: 500ms\n", 500 * time.Millisecond, ""},
		{"link_wait: 2m\n", 0, "6: link_wait: 2m0s: want 0 (reset at once) to 1m0s"},
		{"link_wait: soon\n", 0, "6: link_wait: "},
	} {
		c, err := ParseClient("c.yaml", []byte(goodClient+tc.line))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, want %q", tc.line, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case c.LinkWait != tc.want:
			t.Errorf("%q: link_wait %v, want %v", tc.line, c.LinkWait, tc.want)
		}
	}
}

// TestResumeWindow: resume_window is read on either end, a minute by
// default, 0 turns it off, and Check's range is reported at the file's
// line.
func TestResumeWindow(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration
		err  string
	}{
		{"", time.Minute, ""},
		{"resume_window: 0\n", 0, ""},
		{"resume_window: 1m\n", time.Minute, ""},
		{"resume_window: 2h\n", 0, "resume_window: 2h0m0s: want 0 (off) to 1h0m0s"},
		{"resume_window: later\n", 0, "6: resume_window: "},
	} {
		c, err := ParseClient("c.yaml", []byte(goodClient+tc.line))
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: got %v, want %q", tc.line, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.line, err)
		case c.ResumeWindow != tc.want || c.TunnelOptions().ResumeWindow != tc.want:
			t.Errorf("%q: resume_window %v (tunnel %v), want %v", tc.line, c.ResumeWindow, c.TunnelOptions().ResumeWindow, tc.want)
		}
	}
}
