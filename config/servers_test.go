package config

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

const clientTail = "key_file: k\nforwards:\n  - listen: 127.0.0.1:8080\n    service: web\n"

func TestParseServers(t *testing.T) {
	c, err := ParseClient("c.yaml", []byte("servers:\n  - 127.0.0.1:7000\n  - '[::1]:7000'\n  - b.example:7001\n"+clientTail))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1:7000", "[::1]:7000", "b.example:7001"}; !reflect.DeepEqual(c.Servers, want) {
		t.Errorf("Servers = %q, want %q", c.Servers, want)
	}
	c, err = ParseClient("c.yaml", []byte("servers: [127.0.0.2:7000, '[::1]:7001']\n"+clientTail))
	if err != nil || !reflect.DeepEqual(c.Servers, []string{"127.0.0.2:7000", "[::1]:7001"}) {
		t.Errorf("flow list: %v, %v", c, err)
	}
	c, err = ParseClient("c.yaml", []byte("server: '[::1]:7000'\n"+clientTail))
	if err != nil || !reflect.DeepEqual(c.Servers, []string{"[::1]:7000"}) {
		t.Errorf("server: [::1]:7000: %v, %v", c, err)
	}
	// A file with only servers is a client file.
	if v, err := Parse("c.yaml", []byte("servers: [127.0.0.1:7000]\n"+clientTail)); err != nil {
		t.Errorf("Parse: %v", err)
	} else if _, ok := v.(*Client); !ok {
		t.Errorf("Parse: %T", v)
	}
}

func TestServersErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
		msg       string
	}{
		{"both", "server: 127.0.0.1:7000\nservers: [127.0.0.2:7000]\n" + clientTail, []string{"2:servers"}, "server (line 1) and servers (line 2) are both set"},
		{"both, list first", "servers:\n  - 127.0.0.2:7000\nserver: 127.0.0.1:7000\n" + clientTail, []string{"3:server"}, "server (line 3) and servers (line 1)"},
		{"neither", clientTail, []string{"1:server"}, "servers: [host:port"},
		{"empty list", "servers: []\n" + clientTail, []string{"1:servers"}, "no servers"},
		{"bad item", "servers:\n  - 127.0.0.1:7000\n  - localhost\n  - ':7000'\n" + clientTail, []string{"3:servers[1]", "4:servers[2]"}, "has no port"},
		{"twice", "servers:\n  - '[::1]:7000'\n  - '[0::1]:7000'\n" + clientTail, []string{"3:servers[1]"}, "listed twice (first on line 2)"},
		{"not a list", "servers: 127.0.0.1:7000\n" + clientTail, []string{"1:servers"}, "want a list"},
		{"ipv6 without brackets", "server: ::1:7000\n" + clientTail, []string{"1:server"}, "address"},
	} {
		_, err := ParseClient("c.yaml", []byte(tc.src))
		if got := positions(t, err); !reflect.DeepEqual(got, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: errors at %v, want %v with %q: %v", tc.name, got, tc.want, tc.msg, err)
		}
	}
}

const serverHead = "listen: '[::1]:7000'\nkey_file: k\nservices:\n  web: '[::1]:8080'\n"

func TestParseProxyProtocol(t *testing.T) {
	s, err := ParseServer("s.yaml", []byte(serverHead+"proxy_protocol: true\nproxy_protocol_from:\n  - 127.0.0.1\n  - 10.1.0.0/16\n  - ::1\n  - fd00:1::/64\n  - ::ffff:192.0.2.0/120\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("::1/128"), netip.MustParsePrefix("fd00:1::/64"), netip.MustParsePrefix("192.0.2.0/24"),
	}
	if !s.ProxyProtocol || !reflect.DeepEqual(s.ProxyProtocolFrom, want) {
		t.Errorf("proxy_protocol %v from %v, want %v", s.ProxyProtocol, s.ProxyProtocolFrom, want)
	}
	if s.Listen != "[::1]:7000" || s.Services["web"] != "[::1]:8080" {
		t.Errorf("IPv6 listen/target: %q %q", s.Listen, s.Services["web"])
	}
	s, err = ParseServer("s.yaml", []byte(serverHead))
	if err != nil || s.ProxyProtocol || s.ProxyProtocolFrom != nil {
		t.Errorf("default: %v %v, %v", s.ProxyProtocol, s.ProxyProtocolFrom, err)
	}
}

func TestProxyProtocolErrors(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
		msg       string
	}{
		{"without from", "proxy_protocol: true\n", []string{"5:proxy_protocol"}, "needs proxy_protocol_from"},
		{"from without it", "proxy_protocol_from: [127.0.0.1]\n", []string{"5:proxy_protocol_from"}, "proxy_protocol is not true"},
		{"from with false", "proxy_protocol: false\nproxy_protocol_from: [127.0.0.1]\n", []string{"6:proxy_protocol_from"}, "is not true"},
		{"not a bool", "proxy_protocol: yes\nproxy_protocol_from: [127.0.0.1]\n", []string{"5:proxy_protocol"}, "want true or false"},
		{"everyone", "proxy_protocol: true\nproxy_protocol_from:\n  - 0.0.0.0/0\n  - ::/0\n", []string{"7:proxy_protocol_from[0]", "8:proxy_protocol_from[1]"}, "holds every address"},
		{"host bits", "proxy_protocol: true\nproxy_protocol_from: [10.0.0.5/8]\n", []string{"6:proxy_protocol_from[0]"}, "write 10.0.0.0/8"},
		{"not an address", "proxy_protocol: true\nproxy_protocol_from: [lb.example]\n", []string{"6:proxy_protocol_from[0]"}, "not an IP address or CIDR"},
		{"zone", "proxy_protocol: true\nproxy_protocol_from: ['fe80::1%eth0']\n", []string{"6:proxy_protocol_from[0]"}, "zone"},
		{"empty", "proxy_protocol: true\nproxy_protocol_from: []\n", []string{"6:proxy_protocol_from"}, "empty"},
	} {
		_, err := ParseServer("s.yaml", []byte(serverHead+tc.src))
		if got := positions(t, err); !reflect.DeepEqual(got, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: errors at %v, want %v with %q: %v", tc.name, got, tc.want, tc.msg, err)
		}
	}
}

// Every address a config takes accepts an IPv6 literal in brackets:
// listen, services, metrics (loopback ::1 needs no token), forwards,
// server and servers; proxy_protocol_from above.
func TestIPv6Addresses(t *testing.T) {
	s, err := ParseServer("s.yaml", []byte(serverHead+"metrics: '[::1]:9100'\n"))
	if err != nil || s.Metrics != "[::1]:9100" {
		t.Errorf("server metrics [::1]: %q, %v", s.Metrics, err)
	}
	if _, err := ParseServer("s.yaml", []byte(serverHead+"metrics: '[::]:9100'\n")); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("metrics [::] without a token: %v", err)
	}
	c, err := ParseClient("c.yaml", []byte("servers: ['[::1]:7000', '[fd00::2]:7000']\nkey_file: k\nmetrics: '[::1]:9101'\nforwards:\n  - listen: '[::1]:8080'\n    service: web\n  - listen: '[::]:8081'\n    service: ssh\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Forwards[0].Listen != "[::1]:8080" || c.Forwards[1].Listen != "[::]:8081" || c.Metrics != "[::1]:9101" {
		t.Errorf("client: %+v", c)
	}
	// [::]:8080 covers [::1]:8080: the two can't both bind.
	_, err = ParseClient("c.yaml", []byte("server: '[::1]:7000'\nkey_file: k\nforwards:\n  - listen: '[::]:8080'\n    service: web\n  - listen: '[::1]:8080'\n    service: ssh\n"))
	if got := positions(t, err); !reflect.DeepEqual(got, []string{"6:forwards[1].listen"}) {
		t.Errorf("[::]:8080 and [::1]:8080: %v: %v", got, err)
	}
}
