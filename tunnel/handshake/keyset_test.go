package handshake

import (
	"bytes"
	"context"
	"errors"
	"net"
	"runtime"
	"testing"

	"github.com/flynn/noise"
)

func pskList(t testing.TB, n int) [][]byte {
	t.Helper()
	out := make([][]byte, n)
	for i := range out {
		out[i] = newPSK(t)
	}
	return out
}

// The server finds which of its keys the client holds, and the keys both
// ends derive match; a key not in the set is refused with the auth alert.
func TestKeySetIdentifiesClient(t *testing.T) {
	psks := pskList(t, 5)
	ks, err := NewKeySet(ctr256, psks...)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{0, 3, 4} {
		c1, c2 := net.Pipe()
		var srvKey int
		var srvErr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, srvKey, srvErr = ServerKey(context.Background(), c2, Config{Suite: ctr256, Keys: ks})
			if srvErr != nil {
				c2.Close()
			}
		}()
		_, cliErr := Client(context.Background(), c1, Config{Suite: ctr256, PSK: psks[want]})
		<-done
		c1.Close()
		c2.Close()
		if cliErr != nil || srvErr != nil {
			t.Fatalf("key %d: client %v, server %v", want, cliErr, srvErr)
		}
		if srvKey != want {
			t.Errorf("server says key %d, the client holds key %d", srvKey, want)
		}
	}

	c1, c2 := net.Pipe()
	cli, srv := both(c1, c2, Config{Suite: ctr256, PSK: newPSK(t)}, Config{Suite: ctr256, Keys: ks})
	c1.Close()
	c2.Close()
	if !errors.Is(srv.err, ErrAuth) || !errors.Is(cli.err, ErrAuth) {
		t.Errorf("a key not in the set: server %v, client %v; want ErrAuth on both", srv.err, cli.err)
	}
}

// find agrees with the Noise library on every key: the precomputed state
// is NNpsk0's, so a message made with key i opens under key i and no
// other, and a tampered tag or ephemeral under none.
func TestKeySetFindMatchesNoise(t *testing.T) {
	psks := pskList(t, 8)
	ks, err := NewKeySet(ctr256, psks...)
	if err != nil {
		t.Fatal(err)
	}
	for v := byte(MinVersion); v <= Version; v++ {
		var payload []byte // version 3's: a max_frame
		if v >= payloadVersion {
			payload = []byte{0, 1, 0, 0}
		}
		for i, psk := range psks {
			hs, err := noise.NewHandshakeState(noise.Config{
				CipherSuite: cipherSuite, Pattern: noise.HandshakeNN, Initiator: true,
				Prologue: prologue(v, ctr256), PresharedKey: psk, PresharedKeyPlacement: 0,
			})
			if err != nil {
				t.Fatal(err)
			}
			msg, _, _, err := hs.WriteMessage(nil, payload)
			if err != nil {
				t.Fatal(err)
			}
			if got := ks.find(msg, v); got != i {
				t.Errorf("version %d message under key %d: find says %d", v, i, got)
			}
			for _, other := range []byte{MinVersion - 1, MinVersion, Version, Version + 1} {
				if other != v {
					if got := ks.find(msg, other); got != -1 {
						t.Errorf("version %d message under key %d, found as version %d: find says %d, want -1", v, i, other, got)
					}
				}
			}
			for _, at := range []int{0, 31, 32, len(msg) - 1} {
				bad := bytes.Clone(msg)
				bad[at] ^= 1
				if got := ks.find(bad, v); got != -1 {
					t.Errorf("version %d message under key %d with byte %d flipped: find says %d, want -1", v, i, at, got)
				}
			}
		}
	}
	// Another suite's prologue: no key fits.
	other, err := NewKeySet(cbc128, psks...)
	if err != nil {
		t.Fatal(err)
	}
	fl := flight(t, Config{Suite: ctr256, PSK: psks[0]})
	if got := other.find(fl[len(fl)-noiseLen(Version):], Version); got != -1 {
		t.Errorf("a ctr256 message under a cbc128 key set: find says %d, want -1", got)
	}
}

func TestNewKeySetRefuses(t *testing.T) {
	k := newPSK(t)
	for name, psks := range map[string][][]byte{
		"none":      nil,
		"short":     {k[:16]},
		"duplicate": {k, newPSK(t), bytes.Clone(k)},
		"too many":  pskList(t, MaxKeys+1),
	} {
		if _, err := NewKeySet(ctr256, psks...); !errors.Is(err, ErrKeySet) {
			t.Errorf("%s: got %v, want ErrKeySet", name, err)
		}
	}
	if _, err := NewKeySet(ctr256, pskList(t, MaxKeys)...); err != nil {
		t.Errorf("MaxKeys keys: %v", err)
	}
	// A key set made for another suite is a configuration error, not a
	// failed client.
	ks, _ := NewKeySet(cbc128, k)
	if _, err := Server(context.Background(), &scriptConn{r: bytes.NewReader(nil)}, Config{Suite: ctr256, Keys: ks}); !errors.Is(err, ErrKeySet) {
		t.Errorf("key set of another suite: got %v, want ErrKeySet", err)
	}
}

// With a full key set, a first flight under a key the server does not
// hold still costs it a bounded, small amount: the trials allocate only
// the AEAD (x/crypto's New returns it boxed; two small objects per key),
// no Noise state, and the server reads no more than one flight.
func TestKeySetAllocationBound(t *testing.T) {
	ks, err := NewKeySet(ctr256, pskList(t, MaxKeys)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Suite: ctr256, Keys: ks}
	wrongKey := flight(t, Config{Suite: ctr256, PSK: newPSK(t)})
	msg := wrongKey[len(wrongKey)-noiseLen(Version):]
	if n := testing.AllocsPerRun(20, func() { ks.find(msg, Version) }); n > 2*MaxKeys+1 {
		t.Errorf("find over %d keys: %.0f allocations, want at most %d", MaxKeys, n, 2*MaxKeys+1)
	}
	const limit = 12 << 10 // TestServerAllocationBound's, for one key
	var ms0, ms1 runtime.MemStats
	const runs = 20
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for range runs {
		c := &scriptConn{r: bytes.NewReader(wrongKey)}
		if _, err := Server(context.Background(), c, cfg); !errors.Is(err, ErrAuth) {
			t.Fatalf("server: got %v, want ErrAuth", err)
		}
		if c.read > maxFlight {
			t.Fatalf("server read %d bytes, cap %d", c.read, maxFlight)
		}
	}
	runtime.ReadMemStats(&ms1)
	per := (ms1.TotalAlloc - ms0.TotalAlloc) / runs
	t.Logf("%d keys: %d bytes allocated per failed handshake", MaxKeys, per)
	if per > limit {
		t.Errorf("%d bytes allocated per handshake, want <= %d", per, limit)
	}
}

// BenchmarkKeySetFind is the CPU a first flight under no key costs the
// server: MaxKeys trials.
func BenchmarkKeySetFind(b *testing.B) {
	ks, err := NewKeySet(ctr256, pskList(b, MaxKeys)...)
	if err != nil {
		b.Fatal(err)
	}
	fl := flight(b, Config{Suite: ctr256, PSK: newPSK(b)})
	msg := fl[len(fl)-noiseLen(Version):]
	b.ReportAllocs()
	for b.Loop() {
		if ks.find(msg, Version) != -1 {
			b.Fatal("found a key")
		}
	}
}
