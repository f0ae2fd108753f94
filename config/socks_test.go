package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel"
)

func TestParseServerRules(t *testing.T) {
	s, err := ParseServer("s.yaml", []byte(`listen: "[::1]:7000"
key_file: k
socks_allow:
  - 127.0.0.2/32
  - "[::1]:8080"
  - "*.example.com:443"
udp_services:
  dns: "[::1]:53"
reverse_allow:
  - 127.0.0.1:9000-9010
  - "[::1]:9000"
`))
	if err != nil {
		t.Fatal(err)
	}
	want := ServerRules{
		SocksAllow:   []string{"127.0.0.2/32", "[::1]:8080", "*.example.com:443"},
		UDPServices:  map[string]string{"dns": "[::1]:53"},
		ReverseAllow: []string{"127.0.0.1:9000-9010", "[::1]:9000"},
	}
	if !reflect.DeepEqual(s.ServerRules, want) || len(s.Services) != 0 {
		t.Errorf("got %+v, services %v", s.ServerRules, s.Services)
	}
}

func TestParseClientDynamic(t *testing.T) {
	c, err := ParseClient("dir/c.yaml", []byte(`server: "[::1]:7000"
key_file: k
socks: "[::1]:1080"
socks_users_file: users
udp_forwards:
  - listen: 127.0.0.1:5353
    service: dns
  - listen: "[::1]:5353"
    service: dns
    idle_timeout: 5s
    max_flows: 8
reverse:
  - listen: "[::1]:9000"
    target: 127.0.0.1:22
`))
	if err != nil {
		t.Fatal(err)
	}
	want := ClientDynamic{
		Socks:          "[::1]:1080",
		SocksUsersFile: filepath.Join("dir", "users"),
		UDPForwards: []UDPForward{
			{Listen: "127.0.0.1:5353", Service: "dns", IdleTimeout: tunnel.DefaultUDPIdleTimeout, MaxFlows: tunnel.DefaultUDPMaxFlows},
			{Listen: "[::1]:5353", Service: "dns", IdleTimeout: 5 * time.Second, MaxFlows: 8},
		},
		Reverse: []ReverseForward{{Listen: "[::1]:9000", Target: "127.0.0.1:22"}},
	}
	if !reflect.DeepEqual(c.ClientDynamic, want) {
		t.Errorf("got %+v", c.ClientDynamic)
	}
}

func TestDynamicErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"server offers nothing", "listen: :7000\nkey_file: k\n", "services: missing: a server needs services, socks_allow"},
		{"bad socks rule", "listen: :7000\nkey_file: k\nsocks_allow:\n  - example.com\n", "f.yaml:4: socks_allow[0]: bad allow rule \"example.com\": a name rule needs a port"},
		{"reverse name", "listen: :7000\nkey_file: k\nreverse_allow:\n  - localhost:9000\n", "want an IP address or network"},
		{"udp target", "listen: :7000\nkey_file: k\nudp_services:\n  dns: nowhere\n", "has no port"},
		{"client nothing", "server: 127.0.0.1:7000\nkey_file: k\n", "forwards: missing: a client needs forwards, socks"},
		{"users without socks", "server: 127.0.0.1:7000\nkey_file: k\nsocks_users_file: u\nforwards:\n  - {listen: 127.0.0.1:1, service: a}\n", "is set but socks is not"},
		{"socks collides", "server: 127.0.0.1:7000\nkey_file: k\nsocks: 127.0.0.1:1\nforwards:\n  - {listen: 127.0.0.1:1, service: a}\n", "socks: address 127.0.0.1:1 is already used by forwards[0]"},
		{"reverse listen name", "server: 127.0.0.1:7000\nkey_file: k\nreverse:\n  - {listen: localhost:9000, target: 127.0.0.1:22}\n", "want an IP address and a port"},
		{"reverse twice", "server: 127.0.0.1:7000\nkey_file: k\nreverse:\n  - {listen: 127.0.0.1:9000, target: 127.0.0.1:22}\n  - {listen: 127.0.0.1:9000, target: 127.0.0.1:23}\n", "already asked for on line 4"},
		{"udp collides", "server: 127.0.0.1:7000\nkey_file: k\nudp_forwards:\n  - {listen: 127.0.0.1:53, service: a}\n  - {listen: :53, service: b}\n", "already used by udp_forwards[0]"},
	} {
		_, err := Parse("f.yaml", []byte(tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestLoadSocksUsers(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, "users", []byte("# comment\nalice:pa:ss\n\nbob:x\n"), 0o600)
	users, err := loadSocksUsers(good)
	if err != nil || !reflect.DeepEqual(users, map[string]string{"alice": "pa:ss", "bob": "x"}) {
		t.Fatalf("%v, %v", users, err)
	}
	loose := writeFile(t, "loose", []byte("alice:x\n"), 0o644)
	if _, err := loadSocksUsers(loose); !errors.Is(err, ErrKeyPermissions) {
		t.Errorf("mode 0644: %v", err)
	}
	for name, data := range map[string]string{
		"nocolon": "alice\n", "empty": "# nobody\n", "dup": "a:1\na:2\n", "nopass": "a:\n",
	} {
		p := writeFile(t, name, []byte(data), 0o600)
		if _, err := loadSocksUsers(p); !errors.Is(err, ErrUsersFormat) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := loadSocksUsers(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
}
