package tunnel

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/stream"
	"github.com/offload-dev/offload/tunnel/suite"
)

// CheckPeer runs the real handshake: another suite and another key fail
// with the handshake's own errors; a key of the server's names its client,
// whose grants are the server's (the same checks its streams pass).
func TestCheckPeer(t *testing.T) {
	rules, err := NewRules([]string{"192.0.2.0/24"}, map[string]string{"dns": "127.0.0.1:53"}, []string{"127.0.0.1:9000"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := ServerConfig{Options: DefaultOptions(), Services: map[string]string{"web": "127.0.0.1:80", "ssh": "127.0.0.1:22"}, Rules: rules,
		Clients: []ServerClient{
			{Name: "alice", Keys: [][]byte{testPSK(1)}, Access: Access{Services: []string{"web", "dns"}, Rules: rules}},
			{Name: "bob", Keys: [][]byte{testPSK(2)}, Access: Access{Services: []string{"ssh"}}},
		}}
	other, err := suite.Parse("aes-256-cbc-hmac-sha256")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		p    Peer
		want error
	}{
		{"other suite", Peer{Suite: other, PSK: testPSK(1)}, handshake.ErrSuiteMismatch},
		{"other key", Peer{Suite: suite.Default, PSK: testPSK(9)}, handshake.ErrAuth},
	} {
		v, err := cfg.CheckPeer(ctx, tc.p)
		var he *handshake.PairError
		if err != nil || !errors.As(v.Handshake, &he) || !errors.Is(he.Client, tc.want) || !errors.Is(he.Server, tc.want) || v.Client != "" {
			t.Errorf("%s: %+v, %v; want both ends' handshakes failing with %v", tc.name, v, err, tc.want)
		}
	}
	rev := netip.MustParseAddrPort("127.0.0.1:9000")
	v, err := cfg.CheckPeer(ctx, Peer{Suite: suite.Default, PSK: testPSK(1), Services: []string{"web", "ssh", "ftp"}, Socks: true, UDP: []string{"dns"}, Reverse: []netip.AddrPort{rev}})
	if err != nil || v.Handshake != nil || v.Client != "alice" || v.Key != handshake.Fingerprint(testPSK(1)) {
		t.Fatalf("alice: %+v, %v", v, err)
	}
	if v.Services[0] != nil || !errors.Is(v.Services[1], errNotAllowed) || !errors.Is(v.Services[2], stream.ErrUnknownService) ||
		v.Socks != nil || v.UDP[0] != nil || v.Reverse[0] != nil {
		t.Errorf("alice's grants: %+v", v)
	}
	v, err = cfg.CheckPeer(ctx, Peer{Suite: suite.Default, PSK: testPSK(2), Socks: true, UDP: []string{"dns"}, Reverse: []netip.AddrPort{rev}})
	if err != nil || v.Client != "bob" || !errors.Is(v.Socks, stream.ErrDenied) || !errors.Is(v.UDP[0], errNotAllowed) || !errors.Is(v.Reverse[0], stream.ErrDenied) {
		t.Errorf("bob: %+v, %v; want SOCKS, UDP and reverse refused", v, err)
	}
}
