package handshake

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// recordConn keeps a copy of the first Write: the client's first flight.
type recordConn struct {
	net.Conn
	mu    sync.Mutex
	first []byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.first == nil {
		c.first = bytes.Clone(p)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// recordedFlight runs one genuine handshake against a server with cache
// and returns the client's first flight as an eavesdropper saw it.
func recordedFlight(t *testing.T, cfg Config, cache *ReplayCache) []byte {
	t.Helper()
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	defer c2.Close()
	rc := &recordConn{Conn: c1}
	scfg := cfg
	scfg.Replay = cache
	cli, srv := both(rc, c2, cfg, scfg)
	if cli.err != nil || srv.err != nil {
		t.Fatalf("genuine handshake: client %v, server %v", cli.err, srv.err)
	}
	return rc.first
}

// replay sends flight, then confirm (if not nil), to a server with scfg and
// returns what the server wrote and its error.
func replay(t *testing.T, flight, confirm []byte, scfg Config) ([]byte, error) {
	t.Helper()
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	done := make(chan error, 1)
	go func() {
		keys, err := Server(context.Background(), c2, scfg)
		if err == nil {
			keys.Wipe()
		}
		c2.Close()
		done <- err
	}()
	if _, err := c1.Write(flight); err != nil {
		t.Fatal(err)
	}
	if confirm != nil {
		_, _ = c1.Write(confirm)
	}
	reply, _ := io.ReadAll(c1)
	return reply, <-done
}

// A recorded first flight sent again is refused at once, with no answer,
// when the server's cache remembers it.
func TestReplayRefusedByCache(t *testing.T) {
	cfg := Config{Suite: ctr256, PSK: newPSK(t), Timeout: 5 * time.Second}
	cache := NewReplayCache(16)
	flight := recordedFlight(t, cfg, cache)
	for i := range 3 {
		scfg := cfg
		scfg.Replay = cache
		start := time.Now()
		reply, err := replay(t, flight, nil, scfg)
		if !errors.Is(err, ErrReplay) {
			t.Fatalf("replay %d: got %v, want ErrReplay", i, err)
		}
		if len(reply) != 0 {
			t.Fatalf("replay %d: server answered %x", i, reply)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("replay %d refused after %v: the server waited", i, d)
		}
	}
	if n := cache.Len(); n != 1 {
		t.Fatalf("cache holds %d keys, want 1 (replays add nothing)", n)
	}
}

// Without the cache (or after it forgot the flight) a replay gets the
// server's reply but can never confirm: whatever it sends as the
// confirmation, or nothing, the server returns no keys.
func TestReplayCannotConfirm(t *testing.T) {
	cfg := Config{Suite: ctr256, PSK: newPSK(t), Timeout: 5 * time.Second}
	flight := recordedFlight(t, cfg, nil)
	guesses := map[string][]byte{
		"zeros":     append([]byte{msgConfirm, 0, confirmLen}, make([]byte, confirmLen)...),
		"garbage":   append([]byte{msgConfirm, 0, confirmLen}, bytes.Repeat([]byte{0xa5}, confirmLen)...),
		"wrong len": append([]byte{msgConfirm, 0, 16}, make([]byte, 16)...),
		"frames":    bytes.Repeat([]byte{0, 0, 0x40, 0}, 40),
	}
	for name, confirm := range guesses {
		t.Run(name, func(t *testing.T) {
			reply, err := replay(t, flight, confirm, cfg)
			if err == nil {
				t.Fatal("server accepted a replayed first flight")
			}
			if !errors.Is(err, ErrAuth) && !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %v, want ErrAuth or ErrProtocol", err)
			}
			if len(reply) != msgHeader+noiseLen(Version) || reply[0] != msgNoise {
				t.Fatalf("server reply %x, want its Noise message", reply)
			}
		})
	}
	t.Run("silent", func(t *testing.T) {
		scfg := cfg
		scfg.Timeout = 200 * time.Millisecond
		_, err := replay(t, flight, nil, scfg)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("got %v, want ErrTimeout", err)
		}
	})
}

// A confirmation altered in transit fails the server's check.
func TestHandshakeTamperedConfirmation(t *testing.T) {
	psk := newPSK(t)
	c1, m1 := net.Pipe()
	m2, c2 := net.Pipe()
	defer func() { c1.Close(); m1.Close(); m2.Close(); c2.Close() }()
	go func() { io.Copy(m1, m2); m1.Close() }()
	go func() {
		// First flight through, then flip the confirmation's last byte.
		_, flightLen := FlightHeader(ctr256)
		if _, err := io.CopyN(m2, m1, int64(flightLen)); err != nil {
			return
		}
		confirm := make([]byte, msgHeader+confirmLen)
		if _, err := io.ReadFull(m1, confirm); err != nil {
			return
		}
		confirm[len(confirm)-1] ^= 1
		m2.Write(confirm)
		io.Copy(m2, m1)
		m2.Close()
	}()
	cfg := Config{Suite: ctr256, PSK: psk, Timeout: 5 * time.Second}
	_, srv := both(c1, c2, cfg, cfg)
	if !errors.Is(srv.err, ErrAuth) {
		t.Fatalf("server: got %v, want ErrAuth", srv.err)
	}
}

// Admit refuses a client with the PSK: both ends say the server is busy.
func TestHandshakeAdmitBusy(t *testing.T) {
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	defer c2.Close()
	cfg := Config{Suite: ctr256, PSK: newPSK(t), Timeout: 5 * time.Second}
	scfg := cfg
	full := errors.New("4 links")
	scfg.Admit = func(int) error { return full }
	cli, srv := both(c1, c2, cfg, scfg)
	if !errors.Is(srv.err, ErrBusy) || !errors.Is(srv.err, full) {
		t.Errorf("server: got %v, want ErrBusy wrapping the Admit error", srv.err)
	}
	if !errors.Is(cli.err, ErrBusy) {
		t.Errorf("client: got %v, want ErrBusy", cli.err)
	}
}

// The cache holds what it was made for and forgets the oldest first.
func TestReplayCacheBounded(t *testing.T) {
	c := NewReplayCache(4)
	key := func(i byte) []byte { return bytes.Repeat([]byte{i}, 32) }
	for i := range byte(6) {
		if !c.add(key(i)) {
			t.Fatalf("key %d not fresh", i)
		}
	}
	if c.Len() != 4 {
		t.Fatalf("len %d, want 4", c.Len())
	}
	if c.add(key(5)) || c.add(key(2)) {
		t.Fatal("a remembered key was taken as fresh")
	}
	if !c.add(key(0)) {
		t.Fatal("the oldest key was not forgotten")
	}
}

// FlightHeader describes exactly what the client sends first.
func TestFlightHeader(t *testing.T) {
	cfg := Config{Suite: ctr256, PSK: newPSK(t)}
	got := flight(t, cfg)
	prefix, size := FlightHeader(ctr256)
	if len(got) != size || !bytes.HasPrefix(got, prefix) {
		t.Fatalf("flight %x (%d bytes), want prefix %x and %d bytes", got, len(got), prefix, size)
	}
}
