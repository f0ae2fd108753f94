package metricsserver

import (
	"bytes"
	"net"
	"sync"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
)

// slots caps the metrics endpoint's connections waiting for their
// request head, as the tunnel's handshake slots cap handshakes: when all max slots are taken,
// a new connection takes the slot of the oldest connection whose head has
// not arrived, of the source with the most pending, and that one is reset.
// A connection whose whole head has arrived (read, or waiting in its
// socket buffer) is never taken: it needs only CPU time to be answered,
// and it is likely the scraper. A flood of connections that send nothing
// or half a head therefore can't keep a scraper out; if every slot holds
// a whole head, the new connection is refused instead.
type slots struct {
	mu      sync.Mutex
	max     int
	pending netguard.SlotList[*slot]
}

type slot struct {
	netguard.SlotEntry
	complete bool    // a whole request head has been read
	tail     [3]byte // the last bytes read, for a head end split across reads
	ntail    int
}

// peekMax is how much of a socket buffer complete looks at: a
// scraper's request head (Prometheus sends about 250 bytes with a token)
// fits; a longer one is not protected while it waits in the buffer.
const peekMax = 1024

func newSlots(max int) *slots {
	return &slots{max: max}
}

// acquire takes a slot for conn, resetting another pending connection if
// all are taken. It returns nil if none could be freed: close conn.
func (s *slots) acquire(conn net.Conn) *slot {
	sl := &slot{SlotEntry: netguard.SlotEntry{Conn: conn, Source: netguard.SourceOf(conn)}}
	s.mu.Lock()
	var victim *slot
	if s.pending.Len() >= s.max {
		if victim = s.pending.OldestOfBiggest(s.complete); victim == nil {
			s.mu.Unlock()
			return nil
		}
		s.pending.Evict(victim)
	}
	s.pending.Push(sl)
	s.mu.Unlock()
	if victim != nil {
		netguard.Reset(victim.Conn)
	}
	return sl
}

// complete reports whether sl's whole request head has arrived: read, or
// read in part with the rest (the blank line that ends it) in the socket
// buffer. s.mu is held.
func (s *slots) complete(sl *slot) bool {
	if sl.complete {
		return true
	}
	var buf [3 + peekMax]byte
	n := copy(buf[:], sl.tail[:sl.ntail])
	n += netguard.Peek(sl.Conn, buf[n:])
	sl.complete = headEnds(buf[:n])
	return sl.complete
}

// headEnds reports whether b holds the blank line that ends a request
// head (CRLF CRLF, or bare LFs, which the reader takes too).
func headEnds(b []byte) bool {
	return bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\n\n")) || bytes.Contains(b, []byte("\n\r\n"))
}

// Record records what the request reader took from sl's connection
// (netguard.SlotWatch).
func (s *slots) Record(sl *slot, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.complete || len(p) == 0 {
		return
	}
	// A head end is at most 4 bytes: it lies in p, or across the last
	// bytes read before and the first of p.
	var buf [6]byte
	b := append(append(buf[:0], sl.tail[:sl.ntail]...), p[:min(len(p), 3)]...)
	if headEnds(b) || headEnds(p) {
		sl.complete = true
		return
	}
	if len(p) >= 3 {
		b = p
	}
	sl.ntail = copy(sl.tail[:], b[max(0, len(b)-3):])
}

// Pending reports whether sl's request head has not all been seen
// (netguard.SlotWatch).
func (s *slots) Pending(sl *slot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !sl.complete
}

// Settle records what waits unread in sl's socket buffer: if it ends the
// head, sl is complete (netguard.SlotWatch).
func (s *slots) Settle(sl *slot) {
	var peek [peekMax]byte
	p := peek[:netguard.Peek(sl.Conn, peek[:])]
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.complete || len(p) == 0 {
		return
	}
	var buf [3 + peekMax]byte
	n := copy(buf[:], sl.tail[:sl.ntail])
	n += copy(buf[n:], p)
	sl.complete = headEnds(buf[:n])
}

// release frees sl's slot and reports whether it was evicted.
func (s *slots) release(sl *slot) (evicted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Release(sl)
}

func (s *slots) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Len()
}
