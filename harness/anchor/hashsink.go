package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/offload-dev/offload/harness/wgcompare"
)

// hashSink is the two-router rig's sink, on the host behind router B: it
// takes harness/wgcompare's stream (its wire format) and answers as that
// sink does, "ok N N" (every byte checked) when the sha256 of all N payload
// bytes is the sha256 of the stream the sender sends, "bad REASON" when
// not. The host has CPU to spare for a whole hash; the guests' one-guest
// sink samples instead.
type hashSink struct {
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
}

// serveHashSink serves streams on l until Close.
func serveHashSink(l net.Listener) *hashSink {
	s := &hashSink{l: l, conns: map[net.Conn]bool{}}
	go s.serve()
	return s
}

func (s *hashSink) serve() {
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		if !s.track(c, true) {
			c.Close()
			return
		}
		go func() {
			defer s.track(c, false)
			defer c.Close()
			_, _ = io.WriteString(c, hashStream(c)+"\n")
		}()
	}
}

// track adds or removes c; false once the sink is closed.
func (s *hashSink) track(c net.Conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, c)
		return true
	}
	if s.done {
		return false
	}
	s.conns[c] = true
	return true
}

// Close stops the sink and ends the streams it still reads: one whose
// sender or router B is gone would otherwise wait for good.
func (s *hashSink) Close() {
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.l.Close()
}

// hashStream reads one stream and gives the answer line.
func hashStream(r io.Reader) string {
	var hdr [wgcompare.HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "bad header: " + err.Error()
	}
	if string(hdr[:8]) != wgcompare.Magic {
		return fmt.Sprintf("bad magic %q", hdr[:8])
	}
	n := int64(binary.BigEndian.Uint64(hdr[8:]))
	h := sha256.New()
	got, err := io.Copy(h, bufio.NewReaderSize(io.LimitReader(r, n), 1<<20))
	if err != nil || got != n {
		return fmt.Sprintf("bad length: %d of %d bytes (%v)", got, n, err)
	}
	if want := patternSHA(n); !bytes.Equal(h.Sum(nil), want) {
		return fmt.Sprintf("bad sha256 %x of %d bytes, want %x", h.Sum(nil), n, want)
	}
	return fmt.Sprintf("ok %d %d", n, n)
}

var (
	shaMu   sync.Mutex
	shaMemo = map[int64][]byte{}
)

// patternSHA is the sha256 of the first n bytes of the repeated pattern
// (what wgcompare.Send sends), memoised per length.
func patternSHA(n int64) []byte {
	shaMu.Lock()
	defer shaMu.Unlock()
	if s, ok := shaMemo[n]; ok {
		return s
	}
	p := wgcompare.Pattern()
	h := sha256.New()
	for left := n; left > 0; {
		k := min(left, int64(len(p)))
		h.Write(p[:k])
		left -= k
	}
	shaMemo[n] = h.Sum(nil)
	return shaMemo[n]
}
