package allow

import (
	"errors"
	"net/netip"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in     string
		names  bool
		prefix string
		name   string
		ports  Ports
	}{
		{"127.0.0.2/32", false, "127.0.0.2/32", "", Ports{0, 65535}},
		{"127.0.0.5/8", false, "127.0.0.0/8", "", Ports{0, 65535}},
		{"::1", false, "::1/128", "", Ports{0, 65535}},
		{"::ffff:127.0.0.1", false, "127.0.0.1/32", "", Ports{0, 65535}},
		{"10.1.0.0/16:22", false, "10.1.0.0/16", "", Ports{22, 22}},
		{"[fd00::/8]:8000-8100", false, "fd00::/8", "", Ports{8000, 8100}},
		{"[::1]:*", false, "::1/128", "", Ports{0, 65535}},
		{"Example.COM.:443", true, "", "example.com", Ports{443, 443}},
		{"*.example.com:1-2", true, "", "*.example.com", Ports{1, 2}},
	} {
		r, err := Parse(tc.in, tc.names)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if (tc.prefix != "" && r.Prefix.String() != tc.prefix) || r.Name != tc.name || r.Ports != tc.ports || r.String() != tc.in {
			t.Errorf("%s: got %+v", tc.in, r)
		}
	}
	for _, bad := range []struct {
		in    string
		names bool
	}{
		{"", true}, {"example.com", true}, {"example.com:443", false}, {"*.com:443", true}, {"*:443", true},
		{"127.0.0.1:0", false}, {"127.0.0.1:2-1", false}, {"127.0.0.1:65536", false}, {"127.0.0.1:x", false},
		{"1.2.3.4/33", false}, {"[fe80::1%eth0]:1", false}, {"a b:1", true}, {"[::1]/128:1", false},
	} {
		if _, err := Parse(bad.in, bad.names); !errors.Is(err, ErrRule) {
			t.Errorf("%q (names %v): %v", bad.in, bad.names, err)
		}
	}
}

func TestAllows(t *testing.T) {
	l, err := ParseList([]string{"127.0.0.2/32", "[::1]:8080", "example.com:443", "*.example.org:*"}, true)
	if err != nil {
		t.Fatal(err)
	}
	pub := netip.MustParseAddr("203.0.113.7") // RFC 5737 documentation address: only compared, never dialled
	for _, tc := range []struct {
		name string
		addr string
		port uint16
		want bool
	}{
		{"", "127.0.0.2", 1, true},
		{"", "::ffff:127.0.0.2", 1, true},
		{"", "127.0.0.3", 1, false},
		{"", "::1", 8080, true},
		{"", "::1", 8081, false},
		{"example.com", pub.String(), 443, true},
		{"EXAMPLE.com.", pub.String(), 443, true},
		{"example.com", pub.String(), 80, false},
		{"example.com", "127.0.0.1", 443, false},  // rebinding into loopback
		{"example.com", "10.0.0.1", 443, false},   // private
		{"example.com", "100.64.0.1", 443, false}, // shared (CGN)
		{"example.com", "fe80::1", 443, false},    // link-local
		{"example.com", "::", 443, false},
		{"", pub.String(), 443, false}, // an address needs an address rule
		{"a.example.org", pub.String(), 9, true},
		{"example.org", pub.String(), 9, false},
		{"badexample.org", pub.String(), 9, false},
		{"localhost", "127.0.0.2", 5, true}, // an address rule holds for any name
	} {
		if _, got := l.Allows(tc.name, netip.MustParseAddr(tc.addr), tc.port); got != tc.want {
			t.Errorf("Allows(%q, %s, %d) = %v", tc.name, tc.addr, tc.port, got)
		}
	}
	if _, ok := List(nil).Allows("", netip.MustParseAddr("127.0.0.1"), 1); ok {
		t.Error("the empty list allows")
	}
}
