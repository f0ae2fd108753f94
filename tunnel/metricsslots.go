package tunnel

import (
	"bytes"
	"net"
	"sync"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
)

// metricsSlots caps the metrics endpoint's connections waiting for their
// request head, as hsSlots caps handshakes: when all max slots are taken,
// a new connection takes the slot of the oldest connection whose head has
// not arrived, of the source with the most pending, and that one is reset.
// A connection whose whole head has arrived (read, or waiting in its
// socket buffer) is never taken: it needs only CPU time to be answered,
// and it is likely the scraper. A flood of connections that send nothing
// or half a head therefore can't keep a scraper out; if every slot holds
// a whole head, the new connection is refused instead.
type metricsSlots struct {
	mu      sync.Mutex
	max     int
	pending netguard.SlotList[*metricsSlot]
}

type metricsSlot struct {
	netguard.SlotEntry
	complete bool    // a whole request head has been read
	tail     [3]byte // the last bytes read, for a head end split across reads
	ntail    int
}

// metricsPeek is how much of a socket buffer complete looks at: a
// scraper's request head (Prometheus sends about 250 bytes with a token)
// fits; a longer one is not protected while it waits in the buffer.
const metricsPeek = 1024

func newMetricsSlots(max int) *metricsSlots {
	return &metricsSlots{max: max}
}

// acquire takes a slot for conn, resetting another pending connection if
// all are taken. It returns nil if none could be freed: close conn.
func (s *metricsSlots) acquire(conn net.Conn) *metricsSlot {
	sl := &metricsSlot{SlotEntry: netguard.SlotEntry{Conn: conn, Source: netguard.SourceOf(conn)}}
	s.mu.Lock()
	var victim *metricsSlot
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
		resetConn(victim.Conn)
	}
	return sl
}

// complete reports whether sl's whole request head has arrived: read, or
// read in part with the rest (the blank line that ends it) in the socket
// buffer. s.mu is held.
func (s *metricsSlots) complete(sl *metricsSlot) bool {
	if sl.complete {
		return true
	}
	var buf [3 + metricsPeek]byte
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

// read records what the request reader took from sl's connection.
func (s *metricsSlots) read(sl *metricsSlot, p []byte) {
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

// peeked records what waits unread in sl's socket buffer: if it ends the
// head, sl is complete.
func (s *metricsSlots) peeked(sl *metricsSlot, p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl.complete || len(p) == 0 {
		return
	}
	var buf [3 + metricsPeek]byte
	n := copy(buf[:], sl.tail[:sl.ntail])
	n += copy(buf[n:], p)
	sl.complete = headEnds(buf[:n])
}

// release frees sl's slot and reports whether it was evicted.
func (s *metricsSlots) release(sl *metricsSlot) (evicted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Release(sl)
}

func (s *metricsSlots) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Len()
}

// slotReader is a connection waiting for its request head: it tells the
// slots what was read.
type slotReader struct {
	net.Conn
	slots *metricsSlots
	sl    *metricsSlot
}

func (c slotReader) Read(p []byte) (int, error) {
	// Wait for bytes and look at them before taking them: were the head
	// end taken first and recorded after, a connection would look empty
	// to complete in between and could be evicted with its head read.
	if ok, err := netguard.WaitData(c.Conn); err == nil && ok {
		var buf [metricsPeek]byte
		c.slots.peeked(c.sl, buf[:netguard.Peek(c.Conn, buf[:])])
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.slots.read(c.sl, p[:n])
	}
	return n, err
}
