package handshake

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/flynn/noise"

	"github.com/offload-dev/offload/tunnel/record"
)

// Version 3 tells each end the other's max_frame; a version 2 client
// (Config.Version) still gets keys, and each end takes the other's
// max_frame to be the default, 64 KiB.
func TestHandshakeMaxFrame(t *testing.T) {
	psk := newPSK(t)
	ks, err := NewKeySet(ctr256, newPSK(t), psk)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name             string
		client, server   int
		version          byte
		keys             bool // the server holds a KeySet
		wantCli, wantSrv int  // PeerMaxFrame each end learns
	}{
		{"defaults", 0, 0, 0, false, record.DefaultMaxFrame, record.DefaultMaxFrame},
		{"client larger", 256 << 10, 64 << 10, 0, false, 64 << 10, 256 << 10},
		{"server larger", 16 << 10, 1 << 20, 0, true, 1 << 20, 16 << 10},
		{"version 2 client", 256 << 10, 16 << 10, 2, false, record.DefaultMaxFrame, record.DefaultMaxFrame},
		{"version 2 client, key set", 256 << 10, 16 << 10, 2, true, record.DefaultMaxFrame, record.DefaultMaxFrame},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ccfg := Config{Suite: ctr256, PSK: psk, Timeout: 5 * time.Second, MaxFrame: tc.client, Version: tc.version}
			scfg := Config{Suite: ctr256, PSK: psk, Timeout: 5 * time.Second, MaxFrame: tc.server}
			if tc.keys {
				scfg.PSK, scfg.Keys = nil, ks
			}
			c1, c2 := tcpPipe(t)
			defer c1.Close()
			defer c2.Close()
			cli, srv := both(c1, c2, ccfg, scfg)
			if cli.err != nil || srv.err != nil {
				t.Fatalf("client %v, server %v", cli.err, srv.err)
			}
			if cli.keys.PeerMaxFrame != tc.wantCli || srv.keys.PeerMaxFrame != tc.wantSrv {
				t.Errorf("PeerMaxFrame: client learnt %d, server %d; want %d, %d",
					cli.keys.PeerMaxFrame, srv.keys.PeerMaxFrame, tc.wantCli, tc.wantSrv)
			}
			if !cli.keys.Send.Equal(&srv.keys.Recv) || !cli.keys.Recv.Equal(&srv.keys.Send) {
				t.Error("keys not mirrored")
			}
		})
	}
}

// A client speaking a version this end does not is refused before any
// I/O, and a bad MaxFrame too.
func TestHandshakeConfigRefused(t *testing.T) {
	for _, cfg := range []Config{
		{Suite: ctr256, PSK: newPSK(t), Version: MinVersion - 1},
		{Suite: ctr256, PSK: newPSK(t), Version: Version + 1},
		{Suite: ctr256, PSK: newPSK(t), MaxFrame: 1000},
	} {
		c1, c2 := tcpPipe(t)
		_, err := Client(context.Background(), c1, cfg)
		c1.Close()
		c2.Close()
		if err == nil || errors.Is(err, ErrProtocol) || errors.Is(err, ErrTimeout) {
			t.Errorf("version %d, max frame %d: %v, want a configuration error", cfg.Version, cfg.MaxFrame, err)
		}
	}
}

// firstFlight is a version 3 client's first flight with payload p in its
// Noise message, made with the Noise library.
func firstFlight(t *testing.T, cfg Config, p []byte) []byte {
	t.Helper()
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite: cipherSuite, Pattern: noise.HandshakeNN, Initiator: true,
		Prologue: prologue(Version, cfg.Suite), PresharedKey: cfg.PSK, PresharedKeyPlacement: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	b := appendHello(nil, Version, cfg.Suite.String())
	b = append(b, msgNoise, 0, byte(noiseMsgLen+len(p)))
	b, _, _, err = hs.WriteMessage(b, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A max_frame the record layer would refuse, or a payload of another
// length, from a client that holds the key: the server refuses it with a
// protocol alert (it authenticated, so the client is told why).
func TestServerRefusesBadMaxFrame(t *testing.T) {
	cfg := Config{Suite: ctr256, PSK: newPSK(t), Timeout: 5 * time.Second}
	u32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32(nil, n) }
	for name, p := range map[string][]byte{
		"not a multiple of 16": u32(64<<10 + 8),
		"below the minimum":    u32(record.MinMaxFrame - 16),
		"over the hard cap":    u32(record.HardMaxFrame + 16),
		"zero":                 u32(0),
		"payload of 3 bytes":   {0, 1, 0},
	} {
		t.Run(name, func(t *testing.T) {
			in := firstFlight(t, cfg, p)
			if len(p) != payloadLen {
				// The server reads a message of the length its version
				// has: this one is refused by its length.
				in[len(in)-(noiseMsgLen+len(p))-1] = byte(noiseMsgLen + len(p))
			}
			reply, err := serverOnOpen(t, in, cfg)
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %v, want ErrProtocol", err)
			}
			if len(reply) < msgHeader+1 || reply[0] != msgAlert || reply[msgHeader] != alertProtocol {
				t.Fatalf("reply %x, want a protocol alert", reply)
			}
		})
	}
	// The same flight with a good max_frame passes the server's checks
	// (it then waits for the confirmation the flight does not carry).
	in := firstFlight(t, cfg, u32(128<<10))
	cfg.Timeout = 300 * time.Millisecond
	reply, err := serverOnOpen(t, in, cfg)
	if !errors.Is(err, ErrTimeout) || len(reply) != msgHeader+noiseLen(Version) || reply[0] != msgNoise {
		t.Fatalf("a good flight: reply %x, %v; want the server's Noise message, then a missing confirmation", reply, err)
	}
}

// A server's reply whose max_frame is bad fails the client with
// ErrProtocol, after it authenticated.
func TestClientRefusesBadMaxFrame(t *testing.T) {
	psk := newPSK(t)
	cfg := Config{Suite: ctr256, PSK: psk, Timeout: 5 * time.Second}
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	done := make(chan error, 1)
	go func() {
		defer c2.Close()
		hs, err := noise.NewHandshakeState(noise.Config{
			CipherSuite: cipherSuite, Pattern: noise.HandshakeNN, Initiator: false,
			Prologue: prologue(Version, ctr256), PresharedKey: psk, PresharedKeyPlacement: 0,
		})
		if err != nil {
			done <- err
			return
		}
		var r msgReader
		if _, _, err := readHello(c2); err != nil {
			done <- err
			return
		}
		_, body, err := r.read(c2)
		if err != nil {
			done <- err
			return
		}
		if _, _, _, err := hs.ReadMessage(nil, body); err != nil {
			done <- err
			return
		}
		b, _, _, err := hs.WriteMessage([]byte{msgNoise, 0, byte(noiseLen(Version))}, []byte{0, 0, 0, 17})
		if err == nil {
			_, err = c2.Write(b)
		}
		done <- err
	}()
	_, err := Client(context.Background(), c1, cfg)
	if serr := <-done; serr != nil {
		t.Fatal(serr)
	}
	if !errors.Is(err, ErrProtocol) || !bytes.Contains([]byte(err.Error()), []byte("max_frame")) {
		t.Fatalf("got %v, want ErrProtocol naming max_frame", err)
	}
}

// A server of an older version answers a version alert that the client
// returns as a *VersionError naming both versions: what the tunnel's
// client redials on.
func TestClientVersionError(t *testing.T) {
	err := fakeServer(t, appendAlert(nil, alertVersion, "\x02"))
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Peer != 2 || ve.Ours != Version || ve.PeerRole != "server" || !errors.Is(err, ErrVersion) {
		t.Fatalf("got %#v, want a *VersionError from a version 2 server", err)
	}
}
