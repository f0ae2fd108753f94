package mux

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// FuzzFrames feeds a server session arbitrary bytes as its peer's frames
// (seeded with well-formed ones): it must never panic, never hold more than
// its budget, and end cleanly when the input does, on a connection that
// copies what it reads and on one that lends it (fuzzSession). decodeHeader must give
// back the header encode wrote.
func FuzzFrames(f *testing.F) {
	var seed []byte
	add := func(h header, body []byte) {
		var b [HeaderSize]byte
		h.encode(b[:])
		seed = append(seed, b[:]...)
		seed = append(seed, body...)
	}
	add(header{typ: typeWindowUpdate, flags: flagSYN, stream: 1}, nil)
	add(header{typ: typeData, stream: 1, length: 5}, []byte("hello"))
	add(header{typ: typePing, flags: flagSYN, length: 7}, nil)
	add(header{typ: typeWindowUpdate, stream: 1, length: 1 << 20}, nil)
	add(header{typ: typeData, flags: flagFIN, stream: 1}, nil)
	add(header{typ: typeData, flags: flagSYN | flagRST, stream: 3, length: 2}, []byte("xy"))
	add(header{typ: typeGoAway}, nil)
	f.Add(seed)
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) >= HeaderSize {
			h, err := decodeHeader(in)
			if err == nil {
				var b [HeaderSize]byte
				h.encode(b[:])
				if !bytes.Equal(b[:], in[:HeaderSize]) {
					t.Fatalf("header %v encodes as %x, decoded from %x", h, b, in[:HeaderSize])
				}
			}
		}
		for _, lend := range []bool{false, true} {
			fuzzSession(t, in, lend)
		}
	})
}

// fuzzSession feeds in to a server session, on a connection that lends
// what it reads (testutil.LendConn, in frames of 16 KiB + 64, so that
// bodies are lent and copied both) if lend, and checks its bounds: the
// budget (held), a quarter of it more for lent buffers (Buffered), and
// every lease back once the session is closed.
func fuzzSession(t *testing.T, in []byte, lend bool) {
	a, b := net.Pipe()
	var conn net.Conn = b
	lc := &testutil.LendConn{Conn: b, Size: 16<<10 + 64}
	if lend {
		conn = lc
	}
	const budget = 64 << 10
	s, err := Server(conn, &Config{ReceiveBudget: budget, AcceptBacklog: 4, MaxStreams: 8})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, a) }()
	go func() {
		for {
			st, err := s.AcceptStream()
			if err != nil {
				return
			}
			_ = st.SetReadDeadline(time.Now().Add(time.Second))
			_, _ = io.Copy(io.Discard, st)
		}
	}()
	_, _ = a.Write(in)
	if got := s.held.Load(); got > budget {
		t.Fatalf("%d bytes held, budget %d", got, budget)
	}
	if got := s.Buffered(); got > budget+budget/4 {
		t.Fatalf("%d bytes buffered, budget %d (and a quarter more lent)", got, budget)
	}
	_ = a.Close()
	<-s.CloseChan()
	_ = s.Close()
	if n := lc.Outstanding(); n != 0 {
		t.Fatalf("%d leases kept after the session closed", n)
	}
}
