package wgcompare

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// mangler is a relay that hands each connection's bytes to f on the way,
// in pieces of 3000 bytes from connection offset 0.
func mangler(t *testing.T, target string, f func(off int64, b []byte) []byte) string {
	t.Helper()
	l := listen(t)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { buf := make([]byte, 4096); n, _ := u.Read(buf); c.Write(buf[:n]) }()
				buf := make([]byte, 3000)
				var off int64
				for {
					n, err := io.ReadFull(c, buf)
					if n > 0 {
						if _, err := u.Write(f(off, buf[:n])); err != nil {
							return
						}
						off += int64(n)
					}
					if err != nil {
						u.(*net.TCPConn).CloseWrite()
						time.Sleep(time.Second) // let the answer through
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func setup(t *testing.T) (sink, pattern string) {
	t.Helper()
	pattern = filepath.Join(t.TempDir(), "pattern")
	if err := WritePatternFile(pattern); err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	go Sink(l, t.Logf)
	return l.Addr().String(), pattern
}

var dialer net.Dialer

// TestStreamIntact sends more than one pattern period straight and through
// the bare relay: the sink counts every byte and checks one in 509.
func TestStreamIntact(t *testing.T) {
	sink, pattern := setup(t)
	rl := listen(t)
	go Relay(rl, sink, dialer.DialContext)
	const n = 3*PatternSize + 12345
	for _, addr := range []string{sink, rl.Addr().String()} {
		res, err := Send(context.Background(), dialer.DialContext, addr, pattern, n)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if res.Bytes != n || res.Samples != (n+SampleStride-1)/SampleStride {
			t.Errorf("%s: %+v, want %d bytes and %d samples", addr, res, n, (n+SampleStride-1)/SampleStride)
		}
	}
}

// TestStreamDamaged: a flipped sampled byte, a lost piece, a repeated piece
// and a short stream each fail the send with the sink's reason.
func TestStreamDamaged(t *testing.T) {
	sink, pattern := setup(t)
	const n = 2 << 20
	cases := map[string]func(off int64, b []byte) []byte{
		// Connection offsets count the 16-byte header.
		"bad byte at offset 1018": func(off int64, b []byte) []byte {
			if off == 0 {
				b[headerSize+1018] ^= 1
			}
			return b
		},
		// 3000 bytes are lost and as many repeated later: the count holds.
		"bad byte": func(off int64, b []byte) []byte {
			switch off {
			case 30000:
				return nil
			case 90000:
				return append(append([]byte{}, b...), b...)
			}
			return b
		},
		"bad short stream": func(off int64, b []byte) []byte {
			if off == 60000 {
				return nil
			}
			return b
		},
	}
	for want, f := range cases {
		_, err := Send(context.Background(), dialer.DialContext, mangler(t, sink, f), pattern, n)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want an error with %q, got %v", want, err)
		}
	}
}

// TestStallWatch: a run that moves stalls only after stallQuiet with under
// stallBytes, and a trickle (TCP's retransmissions through a stall) does
// not count as moving.
func TestStallWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newStallWatch(t0, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at      time.Duration
		counter int64
		want    bool
	}{
		{time.Second, stallBytes, false},                          // moved
		{3 * time.Second, stallBytes + 1500, false},               // a trickle, 2 s since it moved
		{4 * time.Second, stallBytes + 3000, true},                // still a trickle, 3 s: stalled
		{5 * time.Second, stallBytes + 4500, true},                // kicks go on
		{5*time.Second + time.Millisecond, 2 * stallBytes, false}, // moved again
		{8*time.Second + time.Millisecond, 2 * stallBytes, true},
	}
	for _, s := range steps {
		if got := w.stalled(at(s.at), s.counter); got != s.want {
			t.Errorf("at %v with %d bytes: stalled %v, want %v", s.at, s.counter, got, s.want)
		}
	}
}
