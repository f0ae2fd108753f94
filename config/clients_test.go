package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const clientsServer = `listen: :7000
services:
  web: 127.0.0.1:80
  ssh: 127.0.0.1:22
udp_services:
  dns: 127.0.0.1:53
clients:
  alice:
    key_file: alice.key
    services: [web, dns]
    socks_allow: [192.0.2.0/24, "*.example.com:443"]
    reverse_allow: ["[::1]:8022"]
  bob:
    key_files: [bob-2.key, /etc/offload/bob.key]
    services: ["*"]
  carol:
    key_file: carol.key
`

func TestParseClients(t *testing.T) {
	s, err := ParseServer("/etc/offload/server.yaml", []byte(clientsServer))
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyFile != "" {
		t.Errorf("KeyFile = %q, want none", s.KeyFile)
	}
	want := []ServerClient{
		{Name: "alice", KeyFiles: []string{"/etc/offload/alice.key"}, Services: []string{"web", "dns"},
			SocksAllow: []string{"192.0.2.0/24", "*.example.com:443"}, ReverseAllow: []string{"[::1]:8022"}},
		{Name: "bob", KeyFiles: []string{"/etc/offload/bob-2.key", "/etc/offload/bob.key"}, Services: []string{AllServices}},
		// Deny by default: no services listed, none granted.
		{Name: "carol", KeyFiles: []string{"/etc/offload/carol.key"}},
	}
	if len(s.Clients) != len(want) {
		t.Fatalf("got %d clients, want %d", len(s.Clients), len(want))
	}
	for i, c := range s.Clients {
		c.keyFields = nil
		if !reflect.DeepEqual(c, want[i]) {
			t.Errorf("client %d: got %+v, want %+v", i, c, want[i])
		}
	}
}

func TestClientsErrors(t *testing.T) {
	const head = "listen: :7000\nservices:\n  web: 127.0.0.1:80\n" // 3 lines
	tests := []struct {
		name, src string
		want      []string
	}{
		{"neither", head, []string{"1:key_file"}},
		{"both", "key_file: k\n" + head + "clients:\n  a: {key_file: a.key}\n", []string{"1:key_file"}},
		{"empty", head + "clients: {}\n", []string{"4:clients"}},
		{"bad name", head + "clients:\n  -a: {key_file: a.key}\n", []string{"5:clients.-a"}},
		{"no key", head + "clients:\n  a:\n    services: [web]\n", []string{"5:clients.a.key_file"}},
		{"key_file and key_files", head + "clients:\n  a:\n    key_file: a.key\n    key_files: [b.key]\n", []string{"7:clients.a.key_files"}},
		{"three keys", head + "clients:\n  a:\n    key_files: [a.key, b.key, c.key]\n", []string{"6:clients.a.key_files"}},
		{"same file twice", head + "clients:\n  a:\n    key_files: [a.key, a.key]\n", []string{"6:clients.a.key_files[1]"}},
		{"shared file", head + "clients:\n  a: {key_file: k}\n  b: {key_file: k}\n", []string{"6:clients.b.key_file"}},
		{"unknown service", head + "clients:\n  a:\n    key_file: a.key\n    services: [web, mail]\n", []string{"7:clients.a.services[1]"}},
		{"service twice", head + "clients:\n  a:\n    key_file: a.key\n    services: [web, web]\n", []string{"7:clients.a.services[1]"}},
		{"star and more", head + "clients:\n  a:\n    key_file: a.key\n    services: ['*', web]\n", []string{"7:clients.a.services"}},
		{"unknown field", head + "clients:\n  a:\n    key_file: a.key\n    forwards: [web]\n", []string{"7:clients.a.forwards"}},
		{"top-level socks_allow", head + "socks_allow: [127.0.0.1/32]\nclients:\n  a: {key_file: a.key}\n", []string{"4:socks_allow"}},
		{"top-level reverse_allow", head + "reverse_allow: ['127.0.0.1:8000']\nclients:\n  a: {key_file: a.key}\n", []string{"4:reverse_allow"}},
		{"bad client socks_allow", head + "clients:\n  a:\n    key_file: a.key\n    socks_allow: [999.0.0.1/8]\n", []string{"7:clients.a.socks_allow[0]"}},
		{"client reverse_allow name", head + "clients:\n  a:\n    key_file: a.key\n    reverse_allow: ['*.example.com:80']\n", []string{"7:clients.a.reverse_allow[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseServer("f.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error for\n%s", tt.src)
			}
			if got := positions(t, err); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("errors at %q, want %q:\n%v", got, tt.want, err)
			}
		})
	}

	var b strings.Builder
	b.WriteString(head + "clients:\n")
	for i := range 33 {
		b.WriteString("  c" + string(rune('a'+i/26)) + string(rune('a'+i%26)) + ":\n    key_files: [" +
			string(rune('a'+i/26)) + string(rune('a'+i%26)) + "1, " + string(rune('a'+i/26)) + string(rune('a'+i%26)) + "2]\n")
	}
	_, err := ParseServer("f.yaml", []byte(b.String()))
	if got := positions(t, err); !reflect.DeepEqual(got, []string{"4:clients"}) {
		t.Errorf("66 keys: errors at %q, want [4:clients]:\n%v", got, err)
	}
}

func TestLoadClientKeys(t *testing.T) {
	dir := t.TempDir()
	key := func(name string, k []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), EncodeKey(k), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ka, kb := testKey(), testKey()
	kb[0] ^= 0xff
	key("a.key", ka)
	key("b.key", kb)
	key("copy.key", ka)
	src := "listen: :7000\nservices: {web: 'a:1'}\nclients:\n  a: {key_file: a.key, services: [web]}\n  b:\n    key_files: [b.key, a.key]\n"
	// a.key in two clients is a config error already; the copy is found
	// only when the keys are read.
	_, err := ParseServer(filepath.Join(dir, "s.yaml"), []byte(src))
	if err == nil || !strings.Contains(err.Error(), "clients.b.key_files[1]") {
		t.Fatalf("shared key file: %v", err)
	}
	src = strings.Replace(src, "[b.key, a.key]", "[b.key, copy.key]", 1)
	s, err := ParseServer(filepath.Join(dir, "s.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.LoadClientKeys()
	var ce *Error
	if !errors.Is(err, ErrKeyReused) || !errors.As(err, &ce) || ce.Field != "clients.b.key_files[1]" || ce.Line != 6 {
		t.Fatalf("the same key in two files: got %v, want ErrKeyReused at 6:clients.b.key_files[1]", err)
	}
	src = strings.Replace(src, "[b.key, copy.key]", "[b.key]", 1)
	if s, err = ParseServer(filepath.Join(dir, "s.yaml"), []byte(src)); err != nil {
		t.Fatal(err)
	}
	keys, err := s.LoadClientKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || string(keys[0].Keys[0]) != string(ka) || string(keys[1].Keys[0]) != string(kb) || keys[1].Name != "b" {
		t.Errorf("got %+v", keys)
	}
	// A missing file is reported at its field.
	if err := os.Remove(filepath.Join(dir, "b.key")); err != nil {
		t.Fatal(err)
	}
	_, err = s.LoadClientKeys()
	if !errors.As(err, &ce) || ce.Field != "clients.b.key_files[0]" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing key file: got %v", err)
	}
}

// Every key file problem of a clients config is reported in one run: four
// clients with missing key files get four errors, each at its field, and
// a bad key and a copied one beside them get theirs.
func TestLoadClientKeysReportsEvery(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ok.key"), EncodeKey(testKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "copy.key"), EncodeKey(testKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "short.key"), []byte("c2hvcnQ=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := "listen: :7000\nservices: {web: 'a:1'}\nclients:\n" +
		"  a: {key_file: a.key}\n  b: {key_file: b.key}\n  c: {key_file: c.key}\n  d: {key_file: d.key}\n" +
		"  e: {key_file: ok.key}\n  f: {key_file: short.key}\n  g: {key_file: copy.key}\n"
	s, err := ParseServer(filepath.Join(dir, "s.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.LoadClientKeys()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("got %T %v, want Errors", err, err)
	}
	var got []string
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%d:%s", e.Line, e.Field))
	}
	want := []string{"4:clients.a.key_file", "5:clients.b.key_file", "6:clients.c.key_file", "7:clients.d.key_file",
		"9:clients.f.key_file", "10:clients.g.key_file"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors at %q, want %q:\n%v", got, want, err)
	}
	if !errors.Is(err, os.ErrNotExist) || !errors.Is(err, ErrKeyLength) || !errors.Is(err, ErrKeyReused) {
		t.Errorf("want ErrNotExist, ErrKeyLength and ErrKeyReused among:\n%v", err)
	}
}

func TestChanged(t *testing.T) {
	a, err := ParseServer("/etc/offload/s.yaml", []byte(clientsServer))
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(clientsServer, "listen: :7000", "listen: :7001\nmax_frame: 16KiB\nlog: {level: debug}\nmax_handshakes_per_source: 4", 1)
	src = strings.Replace(src, "services: [web, dns]", "services: [web, ssh]", 1)
	b, err := ParseServer("/etc/offload/s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := Changed(a, b, "services", "clients", "key_file")
	want := []string{"max_frame", "log", "listen", "max_handshakes_per_source"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Changed = %q, want %q", got, want)
	}
	if got := Changed(a, b); !reflect.DeepEqual(got, append(want, "clients")) {
		t.Errorf("Changed with nothing live = %q", got)
	}
	if got := Changed(a, a); len(got) != 0 {
		t.Errorf("Changed(a, a) = %q", got)
	}
}

// TestSnake: config names of Go fields, acronyms included, so a live list
// ("udp_services") matches the field it names.
func TestSnake(t *testing.T) {
	for in, want := range map[string]string{
		"MaxHandshakesPerSource": "max_handshakes_per_source",
		"UDPForwards":            "udp_forwards",
		"UDPServices":            "udp_services",
		"SocksUsersFile":         "socks_users_file",
		"KeyFile":                "key_file",
		"PSK":                    "psk",
	} {
		if got := snake(in); got != want {
			t.Errorf("snake(%q) = %q, want %q", in, got, want)
		}
	}
}
