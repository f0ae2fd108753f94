package handshake

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	ctr256 = suite.Suite{Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 256}, MAC: suite.HMACSHA256}
	ctr128 = suite.Suite{Cipher: engine.Cipher{Mode: engine.CTR, KeyBits: 128}, MAC: suite.HMACSHA256}
	cbc128 = suite.Suite{Cipher: engine.Cipher{Mode: engine.CBC, KeyBits: 128}, MAC: suite.HMACSHA256}
)

func newPSK(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, PSKSize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

type result struct {
	keys record.Keys
	err  error
}

// tcpPipe returns the two ends of a loopback TCP connection.
func tcpPipe(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		ch <- c
	}()
	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c2 := <-ch
	if c2 == nil {
		t.FailNow()
	}
	return c1, c2
}

// both runs Client on c1 and Server on c2 concurrently.
func both(c1, c2 net.Conn, ccfg, scfg Config) (cli, srv result) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.keys, srv.err = Server(context.Background(), c2, scfg)
		if srv.err != nil {
			c2.Close() // as the tunnel would; unblocks the client
		}
	}()
	cli.keys, cli.err = Client(context.Background(), c1, ccfg)
	if cli.err != nil {
		c1.Close()
	}
	wg.Wait()
	return cli, srv
}

func pipes(t *testing.T) map[string]func() (net.Conn, net.Conn) {
	return map[string]func() (net.Conn, net.Conn){
		"pipe": func() (net.Conn, net.Conn) { return net.Pipe() },
		"tcp":  func() (net.Conn, net.Conn) { return tcpPipe(t) },
	}
}

func TestHandshakeMirroredKeys(t *testing.T) {
	for name, mk := range pipes(t) {
		for _, s := range []suite.Suite{ctr256, ctr128, cbc128} {
			t.Run(name+"/"+s.String(), func(t *testing.T) {
				psk := newPSK(t)
				c1, c2 := mk()
				defer c1.Close()
				defer c2.Close()
				cfg := Config{Suite: s, PSK: psk, Timeout: 5 * time.Second}
				cli, srv := both(c1, c2, cfg, cfg)
				if cli.err != nil || srv.err != nil {
					t.Fatalf("client: %v, server: %v", cli.err, srv.err)
				}
				if !cli.keys.Send.Equal(&srv.keys.Recv) || !cli.keys.Recv.Equal(&srv.keys.Send) {
					t.Fatal("keys not mirrored")
				}
				if cli.keys.Send.Equal(&cli.keys.Recv) {
					t.Fatal("both directions got the same keys")
				}
				for _, k := range []record.DirKeys{cli.keys.Send, cli.keys.Recv} {
					if err := k.Check(s); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}
}

func TestHandshakeFreshKeysEachTime(t *testing.T) {
	psk := newPSK(t)
	cfg := Config{Suite: ctr256, PSK: psk}
	var prev record.Keys
	for i := range 2 {
		c1, c2 := net.Pipe()
		cli, srv := both(c1, c2, cfg, cfg)
		c1.Close()
		c2.Close()
		if cli.err != nil || srv.err != nil {
			t.Fatalf("client: %v, server: %v", cli.err, srv.err)
		}
		if i > 0 && cli.keys.Send.Equal(&prev.Send) {
			t.Fatal("two handshakes with the same PSK gave the same keys (no ephemeral DH?)")
		}
		prev = cli.keys
	}
}

// TestHandshakeDeadlineCleared: the deadline that bounds the handshake
// does not outlive it, or the link would die that long after it started.
// The test watches the deadlines the handshake sets rather than waiting
// past a short one: a handshake under -race on a busy machine can take
// longer than any timeout short enough to wait out.
func TestHandshakeDeadlineCleared(t *testing.T) {
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	defer c2.Close()
	d1, d2 := &deadlineConn{Conn: c1}, &deadlineConn{Conn: c2}
	cfg := Config{Suite: ctr256, PSK: newPSK(t)}
	cli, srv := both(d1, d2, cfg, cfg)
	if cli.err != nil || srv.err != nil {
		t.Fatalf("client: %v, server: %v", cli.err, srv.err)
	}
	for name, d := range map[string]*deadlineConn{"client": d1, "server": d2} {
		set := d.deadlines()
		if len(set) < 2 || set[0].IsZero() {
			t.Errorf("%s: deadlines set %v, want the handshake's bound first", name, set)
		} else if last := set[len(set)-1]; !last.IsZero() {
			t.Errorf("%s: the handshake left the deadline %v set", name, last)
		}
	}
	go c1.Write([]byte{1})
	var b [1]byte
	if _, err := c2.Read(b[:]); err != nil {
		t.Fatalf("read after the handshake: %v", err)
	}
}

// deadlineConn records the deadlines set on it (read, write or both).
type deadlineConn struct {
	net.Conn
	mu  sync.Mutex
	set []time.Time
}

func (d *deadlineConn) record(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.set = append(d.set, t)
}

func (d *deadlineConn) deadlines() []time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Time(nil), d.set...)
}

func (d *deadlineConn) SetDeadline(t time.Time) error { d.record(t); return d.Conn.SetDeadline(t) }

func (d *deadlineConn) SetReadDeadline(t time.Time) error {
	d.record(t)
	return d.Conn.SetReadDeadline(t)
}

func (d *deadlineConn) SetWriteDeadline(t time.Time) error {
	d.record(t)
	return d.Conn.SetWriteDeadline(t)
}

func TestHandshakeWrongPSK(t *testing.T) {
	for name, mk := range pipes(t) {
		t.Run(name, func(t *testing.T) {
			c1, c2 := mk()
			defer c1.Close()
			defer c2.Close()
			cli, srv := both(c1, c2, Config{Suite: ctr256, PSK: newPSK(t)}, Config{Suite: ctr256, PSK: newPSK(t)})
			for side, err := range map[string]error{"client": cli.err, "server": srv.err} {
				if !errors.Is(err, ErrAuth) {
					t.Errorf("%s: got %v, want ErrAuth", side, err)
				} else if !strings.Contains(err.Error(), "authentication failed") {
					t.Errorf("%s: message %q does not say authentication failed", side, err)
				}
			}
		})
	}
}

func TestHandshakeSuiteMismatch(t *testing.T) {
	for name, mk := range pipes(t) {
		t.Run(name, func(t *testing.T) {
			c1, c2 := mk()
			defer c1.Close()
			defer c2.Close()
			psk := newPSK(t)
			cli, srv := both(c1, c2, Config{Suite: ctr256, PSK: psk}, Config{Suite: cbc128, PSK: psk})
			if cli.err == nil || srv.err == nil {
				t.Fatalf("client: %v, server: %v", cli.err, srv.err)
			}
			if want := "handshake failed: server uses aes-128-cbc-hmac-sha256"; !strings.Contains(cli.err.Error(), want) {
				t.Errorf("client error %q does not contain %q", cli.err, want)
			}
			if want := "client uses aes-256-ctr-hmac-sha256"; !strings.Contains(srv.err.Error(), want) {
				t.Errorf("server error %q does not contain %q", srv.err, want)
			}
			var me *SuiteMismatchError
			if !errors.As(cli.err, &me) || me.PeerSuite != cbc128.String() || me.PeerRole != "server" {
				t.Errorf("client: %#v", me)
			}
			if !errors.Is(srv.err, ErrSuiteMismatch) || !errors.Is(cli.err, ErrSuiteMismatch) {
				t.Error("not ErrSuiteMismatch")
			}
		})
	}
}

// tamper forwards a→b and b→a, passing the a→b stream through f once.
func tamper(t *testing.T, a, b net.Conn, f func([]byte) []byte) {
	t.Helper()
	go func() {
		buf := make([]byte, 4096)
		n, err := a.Read(buf)
		if err != nil {
			return
		}
		// The client writes its first flight in one Write.
		if _, err := b.Write(f(buf[:n])); err != nil {
			return
		}
		io.Copy(b, a)
		b.Close()
	}()
	go func() { io.Copy(a, b); a.Close() }()
}

// A man in the middle that rewrites the client's suite to the server's gets
// an authentication failure, not a session with mismatched suites.
func TestHandshakeTamperedHello(t *testing.T) {
	psk := newPSK(t)
	c1, m1 := net.Pipe()
	m2, c2 := net.Pipe()
	defer func() { c1.Close(); m1.Close(); m2.Close(); c2.Close() }()
	if len(ctr256.String()) != len(ctr128.String()) {
		t.Fatal("test wants suite names of equal length")
	}
	tamper(t, m1, m2, func(b []byte) []byte {
		return bytes.Replace(b, []byte(ctr256.String()), []byte(ctr128.String()), 1)
	})
	cli, srv := both(c1, c2, Config{Suite: ctr256, PSK: psk}, Config{Suite: ctr128, PSK: psk})
	if !errors.Is(srv.err, ErrAuth) {
		t.Errorf("server: got %v, want ErrAuth", srv.err)
	}
	if !errors.Is(cli.err, ErrAuth) {
		t.Errorf("client: got %v, want ErrAuth", cli.err)
	}
}

// flight is a valid first flight for cfg.
func flight(t testing.TB, cfg Config) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c2.Close()
	ch := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 4096)
		var got []byte
		v := cfg.Version
		if v == 0 {
			v = Version
		}
		for len(got) < helloFixed+len(cfg.Suite.String())+msgHeader+noiseLen(v) {
			n, err := c2.Read(buf)
			if err != nil {
				break
			}
			got = append(got, buf[:n]...)
		}
		ch <- got
		c2.Close()
	}()
	_, err := Client(context.Background(), c1, cfg)
	c1.Close()
	if err == nil {
		t.Fatal("client succeeded without a server")
	}
	return <-ch
}

func TestServerRejects(t *testing.T) {
	psk := newPSK(t)
	cfg := Config{Suite: ctr256, PSK: psk, Timeout: 5 * time.Second}
	good := flight(t, cfg)
	hello := good[:helloFixed+len(ctr256.String())]

	newer := bytes.Clone(good)
	newer[len(magic)] = Version + 1
	v1 := bytes.Clone(good) // a version 1 client: same first flight framing
	v1[len(magic)] = 1

	oversized := append(bytes.Clone(hello), msgNoise, 0xff, 0xff)
	wrongType := bytes.Clone(good)
	wrongType[len(hello)] = 7
	shortNoise := append(bytes.Clone(hello), msgNoise, 0, 10)
	shortNoise = append(shortNoise, make([]byte, 10)...)
	// A version 2 hello with a version 3 message: the server reads the
	// length its version has, nothing else.
	v2Long := bytes.Clone(good)
	v2Long[len(magic)] = 2
	longName := append([]byte(magic), Version, 200)
	badName := append([]byte(magic), Version, 3, 'A', 0, '\n')

	cases := []struct {
		name  string
		in    []byte
		want  error
		alert byte // 0: no alert
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrProtocol, 0},
		{"newer version", newer, ErrVersion, alertVersion},
		{"version 1", v1, ErrVersion, alertVersion},
		{"version 2 hello, version 3 message", v2Long, ErrProtocol, alertProtocol},
		{"oversized length", oversized, ErrProtocol, 0},
		{"wrong message type", wrongType, ErrProtocol, alertProtocol},
		{"short noise message", shortNoise, ErrProtocol, alertProtocol},
		{"suite name too long", longName, ErrProtocol, 0},
		{"suite name bytes", badName, ErrProtocol, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			// The client stays open: the server must decide from what it
			// has, not wait for more (e.g. the body of an oversized message).
			reply, err := serverOnOpen(t, tc.in, cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("took %v: server waited for more input", d)
			}
			if tc.alert == 0 {
				if len(reply) != 0 {
					t.Fatalf("unexpected reply %x", reply)
				}
				return
			}
			if len(reply) < msgHeader+1 || reply[0] != msgAlert || reply[msgHeader] != tc.alert {
				t.Fatalf("reply %x, want alert %d", reply, tc.alert)
			}
		})
	}
}

// serverOnOpen is serverOn with a client that never closes its side.
func serverOnOpen(t *testing.T, in []byte, cfg Config) ([]byte, error) {
	t.Helper()
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	done := make(chan error, 1)
	go func() {
		_, err := Server(context.Background(), c2, cfg)
		c2.Close()
		done <- err
	}()
	if _, err := c1.Write(in); err != nil {
		t.Fatal(err)
	}
	reply, _ := io.ReadAll(c1)
	return reply, <-done
}

func TestServerTruncated(t *testing.T) {
	cfg := Config{Suite: ctr256, PSK: newPSK(t), Timeout: 5 * time.Second}
	good := flight(t, cfg)
	for n := 0; n < len(good); n++ {
		c1, c2 := tcpPipe(t)
		done := make(chan error, 1)
		go func() {
			_, err := Server(context.Background(), c2, cfg)
			c2.Close()
			done <- err
		}()
		c1.Write(good[:n])
		c1.(*net.TCPConn).CloseWrite()
		err := <-done
		c1.Close()
		if !errors.Is(err, ErrProtocol) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("prefix %d/%d: got %v, want ErrProtocol wrapping io.ErrUnexpectedEOF", n, len(good), err)
		}
	}
}

// fakeServer accepts one connection's first flight and answers with reply.
func fakeServer(t *testing.T, reply []byte) error {
	t.Helper()
	c1, c2 := tcpPipe(t)
	defer c1.Close()
	go func() {
		defer c2.Close()
		var r msgReader
		if _, _, err := readHello(c2); err != nil {
			return
		}
		if _, _, err := r.read(c2); err != nil {
			return
		}
		c2.Write(reply)
	}()
	_, err := Client(context.Background(), c1, Config{Suite: ctr256, PSK: newPSK(t), Timeout: 5 * time.Second})
	return err
}

func TestClientRejects(t *testing.T) {
	noiseHdr := []byte{msgNoise, 0, byte(noiseLen(Version))}
	cases := []struct {
		name  string
		reply []byte
		want  error
		text  string
	}{
		{"version alert", appendAlert(nil, alertVersion, "\x02"), ErrVersion, "server speaks protocol version 2"},
		{"suite alert", appendAlert(nil, alertSuite, "aes-128-cbc-hmac-sha256"), ErrSuiteMismatch, "server uses aes-128-cbc-hmac-sha256"},
		{"suite alert garbage", appendAlert(nil, alertSuite, "\x1b[31mred"), ErrProtocol, ""},
		{"auth alert", appendAlert(nil, alertAuth, ""), ErrAuth, "authentication failed"},
		{"unknown alert", appendAlert(nil, 99, ""), ErrProtocol, "unknown alert"},
		{"garbage noise", append(noiseHdr, make([]byte, noiseLen(Version))...), ErrAuth, "authentication failed"},
		{"truncated noise", append(noiseHdr, make([]byte, 20)...), ErrProtocol, ""},
		{"oversized", []byte{msgNoise, 0xff, 0xff}, ErrProtocol, "exceeds the cap"},
		{"nothing", nil, ErrProtocol, ""},
		{"http", []byte("HTTP/1.1 400 Bad Request\r\n\r\n"), ErrProtocol, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := fakeServer(t, tc.reply)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %q does not contain %q", err, tc.text)
			}
		})
	}
}

func TestHandshakeTimeout(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	start := time.Now()
	// The client connects and never says anything.
	_, err := Server(context.Background(), c2, Config{Suite: ctr256, PSK: newPSK(t), Timeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %v, want about 100ms", d)
	}
}

func TestHandshakeContextCancel(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	// A server that reads the first flight and never answers.
	go io.Copy(io.Discard, c2)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := Client(ctx, c1, Config{Suite: ctr256, PSK: newPSK(t), Timeout: time.Minute})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrTimeout and context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancel took %v", d)
	}
}

func TestHandshakeBadPSK(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	_, err := Client(context.Background(), c1, Config{Suite: ctr256, PSK: make([]byte, 16)})
	if !errors.Is(err, ErrPSK) {
		t.Fatalf("got %v, want ErrPSK", err)
	}
}

// scriptConn is a net.Conn whose peer sent in and then closed; it counts
// what the server consumed and discards what it writes.
type scriptConn struct {
	r    *bytes.Reader
	read int
}

func (c *scriptConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}
func (c *scriptConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *scriptConn) Close() error                     { return nil }
func (c *scriptConn) LocalAddr() net.Addr              { return nil }
func (c *scriptConn) RemoteAddr() net.Addr             { return nil }
func (c *scriptConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error { return nil }

// maxFlight is the most a server reads before deciding.
const maxFlight = helloMax + msgHeader + msgMax

// An unauthenticated client makes the server allocate a bounded amount,
// whatever it sends.
func TestServerAllocationBound(t *testing.T) {
	cfg := Config{Suite: ctr256, PSK: newPSK(t)}
	good := flight(t, cfg)
	wrongKey := flight(t, Config{Suite: ctr256, PSK: newPSK(t)})
	huge := append(append([]byte(nil), good[:helloFixed+len(ctr256.String())]...), msgNoise, 0xff, 0xff)
	huge = append(huge, make([]byte, 1<<20)...)
	const limit = 12 << 10
	for name, in := range map[string][]byte{"wrong key": wrongKey, "oversized": huge, "garbage": bytes.Repeat([]byte{0xAA}, 1<<20)} {
		var ms0, ms1 runtime.MemStats
		const runs = 20
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		for range runs {
			c := &scriptConn{r: bytes.NewReader(in)}
			if _, err := Server(context.Background(), c, cfg); err == nil {
				t.Fatalf("%s: server accepted", name)
			}
			if c.read > maxFlight {
				t.Fatalf("%s: server read %d bytes, cap %d", name, c.read, maxFlight)
			}
		}
		runtime.ReadMemStats(&ms1)
		per := (ms1.TotalAlloc - ms0.TotalAlloc) / runs
		t.Logf("%s: %d bytes allocated per handshake", name, per)
		if per > limit {
			t.Errorf("%s: %d bytes allocated per handshake, want <= %d", name, per, limit)
		}
	}
}

func FuzzServerHandshake(f *testing.F) {
	psk := bytes.Repeat([]byte{0x5a}, PSKSize)
	cfg := Config{Suite: ctr256, PSK: psk}
	// Seeds: valid flights under other keys and suites, and their pieces.
	other := Config{Suite: ctr256, PSK: bytes.Repeat([]byte{0xa5}, PSKSize)}
	good := flight(f, other)
	f.Add(good)
	f.Add(flight(f, Config{Suite: cbc128, PSK: other.PSK}))
	f.Add(good[:10])
	v2 := bytes.Clone(good)
	v2[len(magic)] = 9
	f.Add(v2)
	f.Add(binary.BigEndian.AppendUint16(append([]byte(nil), good[:helloFixed+len(ctr256.String())+1]...), 0xffff))
	f.Add([]byte("OFLD"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &scriptConn{r: bytes.NewReader(in)}
		keys, err := Server(context.Background(), c, cfg)
		if err == nil {
			t.Fatalf("server accepted a client without the PSK: %+v", keys)
		}
		if c.read > maxFlight {
			t.Fatalf("server read %d bytes, cap %d", c.read, maxFlight)
		}
		for _, e := range []error{ErrAuth, ErrProtocol, ErrVersion, ErrSuiteMismatch} {
			if errors.Is(err, e) {
				return
			}
		}
		t.Fatalf("error wraps no sentinel: %v", err)
	})
}
