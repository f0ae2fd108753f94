package handshake

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/tunnel/suite"
)

// TestHandshakeEveryMAC: every suite MAC handshakes, and the keys fit it.
func TestHandshakeEveryMAC(t *testing.T) {
	for _, m := range suite.MACs {
		s := suite.Suite{Cipher: ctr256.Cipher, MAC: m}
		t.Run(s.String(), func(t *testing.T) {
			c1, c2 := tcpPipe(t)
			defer c1.Close()
			defer c2.Close()
			cfg := Config{Suite: s, PSK: newPSK(t), Timeout: 5 * time.Second}
			cli, srv := both(c1, c2, cfg, cfg)
			if cli.err != nil || srv.err != nil {
				t.Fatalf("client: %v, server: %v", cli.err, srv.err)
			}
			if !cli.keys.Send.Equal(&srv.keys.Recv) {
				t.Fatal("keys not mirrored")
			}
			if err := cli.keys.Send.Check(s); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHandshakeMACMismatch: the same cipher with another MAC is a suite
// mismatch that names the peer's suite, in both directions of blame.
func TestHandshakeMACMismatch(t *testing.T) {
	cs := suite.Suite{Cipher: ctr256.Cipher, MAC: suite.Poly1305}
	ss := suite.Suite{Cipher: ctr256.Cipher, MAC: suite.GMAC}
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	defer c2.Close()
	psk := newPSK(t)
	cli, srv := both(c1, c2, Config{Suite: cs, PSK: psk}, Config{Suite: ss, PSK: psk})
	if want := "handshake failed: server uses aes-256-ctr-gmac, we use aes-256-ctr-poly1305"; cli.err == nil || !strings.Contains(cli.err.Error(), want) {
		t.Errorf("client error %v, want %q", cli.err, want)
	}
	if want := "client uses aes-256-ctr-poly1305"; srv.err == nil || !strings.Contains(srv.err.Error(), want) {
		t.Errorf("server error %v, want %q", srv.err, want)
	}
	if !errors.Is(cli.err, ErrSuiteMismatch) || !errors.Is(srv.err, ErrSuiteMismatch) {
		t.Error("not ErrSuiteMismatch")
	}
}
