// Package slots is the server's handshake slot table: it caps the
// unauthenticated connections in progress, in all and per source, and
// chooses which one gives way when a new one arrives (Table). It knows
// connections and first flights, never a Server or a link.
package slots

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Table caps the handshakes in progress on the server, in all and per
// source address (the server's MaxHandshakes and MaxHandshakesPerSource). An unauthenticated connection holds a slot from accept
// until its handshake ends. When a new connection finds its source at
// MaxHandshakesPerSource, it takes the slot of that source's oldest
// incomplete connection (below); when it finds all MaxHandshakes slots
// taken, the oldest incomplete one of the source with the most pending
// connections, so that a flood from a few addresses pays first. The
// connection whose slot is taken is reset.
//
// A connection whose complete first flight has arrived (read by the
// handshake, or waiting in its socket buffer: see complete) is never
// taken: it needs only CPU time to finish, or one round trip for the
// client's key confirmation, and it may be a genuine client. A flood of
// connections that send nothing, or part of a flight, therefore can't evict
// real clients, however fast it comes; if every slot a new connection could
// take holds a complete flight, the new connection is refused instead.
// Memory stays bounded: at most max pending connections at any time. The
// handshake's reads look at the bytes before they take them
// (netguard.SlotConn), so a flight is never in neither place.
//
// Complete flights can still outrun the server's CPU: with many keys each
// costs up to handshake.MaxKeys trials. So the slots remember the last
// FailedSources sources whose flight failed the trial (or was a replay);
// when a new connection from any other source finds no incomplete slot to
// take, it takes the oldest complete one of such a source that the
// handshake has not begun to read (it waits in the socket buffer: giving
// it up costs nothing). If every slot holds a flight the handshake is
// already trying (a CPU busy with trials starts them all), the new
// connection waits for the next slot that frees, ahead of every later
// connection: at most max wait, each for at most the handshake timeout.
// A flood of bogus flights then delays genuine clients from other sources
// but does not refuse them, unless it comes from more fresh sources than
// FailedSources remembers.
type Table struct {
	mu        sync.Mutex
	max       int
	perSource int
	flights   []handshake.Flight // genuine first flights, one per version the server answers
	flightLen int                // the longest's whole length
	pending   netguard.SlotList[*Slot]
	failed    failedRing // sources whose first flight failed the key trial
	waiting   []*Slot    // fresh sources' connections waiting for a slot, oldest first
}

// FailedSources is how many recent failures Table remembers: a ring of
// sources and a count per source, about 60 KiB.
const FailedSources = 1024

// failedRing remembers the sources of the last FailedSources failures,
// allocated at the first.
type failedRing struct {
	ring  []netip.Prefix
	next  int
	count map[netip.Prefix]int
}

func (f *failedRing) add(p netip.Prefix) {
	if f.ring == nil {
		f.ring, f.count = make([]netip.Prefix, FailedSources), map[netip.Prefix]int{}
	}
	if old := f.ring[f.next]; old.IsValid() {
		if f.count[old]--; f.count[old] <= 0 {
			delete(f.count, old)
		}
	}
	f.ring[f.next] = p
	f.count[p]++
	f.next = (f.next + 1) % len(f.ring)
}

func (f *failedRing) has(p netip.Prefix) bool { return f.count[p] > 0 }

// Slot is one connection's place in a Table, from Acquire to Release.
type Slot struct {
	netguard.SlotEntry
	complete bool   // the whole first flight has arrived
	read     bool   // the handshake has read it (and is trying it)
	head     []byte // what the handshake read, up to a first flight
	// ready is set when Acquire queued the slot in waiting, and closed
	// when a released slot passed to it (it is then pending) or when a
	// newer connection took its place in the queue (evicted).
	ready chan struct{}
}

// New returns a table of slots, at most perSource per source address,
// for first flights of suite s (of every version the server answers).
func New(slots, perSource int, s suite.Suite) *Table {
	t := &Table{max: slots, perSource: perSource, flights: handshake.Flights(s)}
	for _, f := range t.flights {
		t.flightLen = max(t.flightLen, f.Size)
	}
	return t
}

// Max is the cap on connections holding a slot; PerSource, the cap per
// source address.
func (s *Table) Max() int       { return s.max }
func (s *Table) PerSource() int { return s.perSource }

// Acquire takes a slot for conn, evicting (closing) another pending
// connection if conn's source or the server is at its cap. It returns nil
// if no slot could be freed: the caller refuses conn. A returned slot
// with ready set is queued instead: the caller waits for ready (see
// Await) before the handshake.
func (s *Table) Acquire(conn net.Conn) *Slot {
	sl := &Slot{SlotEntry: netguard.SlotEntry{Conn: conn, Source: netguard.SourceOf(conn)}}
	s.mu.Lock()
	var victim *Slot
	switch {
	case s.pending.Of(sl.Source) >= s.perSource:
		victim = s.oldestIncomplete(sl.Source)
		if victim == nil {
			s.mu.Unlock()
			return nil
		}
	case s.pending.Len() >= s.max:
		victim = s.pending.OldestOfBiggest(s.complete)
		fresh := sl.Source.IsValid() && !s.failed.has(sl.Source)
		if victim == nil && fresh {
			victim = s.unreadFromFailed()
		}
		if victim == nil && fresh && len(s.waiting) >= s.max {
			// A full queue gives up its oldest connection from a source
			// that has failed since it queued: unread, it costs nothing.
			if i := s.waiterFrom(true); i >= 0 {
				w := s.waiting[i]
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				w.Evicted = true
				close(w.ready)
			}
		}
		if victim == nil && fresh && len(s.waiting) < s.max {
			sl.ready = make(chan struct{})
			s.waiting = append(s.waiting, sl)
			s.mu.Unlock()
			return sl
		}
		if victim == nil {
			s.mu.Unlock()
			return nil
		}
	}
	if victim != nil {
		s.pending.Evict(victim)
	}
	s.pending.Push(sl)
	s.mu.Unlock()
	if victim != nil {
		netguard.Reset(victim.Conn)
	}
	return sl
}

// unreadFromFailed returns the oldest connection from a source in
// s.failed whose flight the handshake has not begun to read, or nil.
func (s *Table) unreadFromFailed() *Slot {
	return s.pending.Find(func(sl *Slot) bool { return !sl.read && len(sl.head) == 0 && s.failed.has(sl.Source) })
}

// FailedTrial remembers sl's source as one whose first flight failed.
func (s *Table) FailedTrial(sl *Slot) {
	if sl == nil || !sl.Source.IsValid() {
		return
	}
	s.mu.Lock()
	s.failed.add(sl.Source)
	s.mu.Unlock()
}

// oldestIncomplete returns the oldest incomplete connection from src.
func (s *Table) oldestIncomplete(src netip.Prefix) *Slot {
	return s.pending.Find(func(sl *Slot) bool { return sl.Source == src && !s.complete(sl) })
}

// complete reports whether sl's whole first flight has arrived: the
// handshake said it read it, or what it has read and what waits in the
// socket buffer make up a genuine first flight. s.mu is held.
func (s *Table) complete(sl *Slot) bool {
	if sl.complete {
		return true
	}
	var buf [256]byte
	got := append(buf[:0], sl.head...)
	if need := s.flightLen - len(got); need > 0 && need <= len(buf)-len(got) {
		got = got[:len(got)+netguard.Peek(sl.Conn, buf[len(got):len(got)+need])]
	}
	for _, f := range s.flights {
		if len(got) >= f.Size && bytes.HasPrefix(got, f.Prefix) {
			sl.complete = true
			break
		}
	}
	return sl.complete
}

// Record records what the handshake read from sl's connection, up to a
// first flight's length, for complete (netguard.SlotWatch).
func (s *Table) Record(sl *Slot, p []byte) {
	s.mu.Lock()
	if n := s.flightLen - len(sl.head); n > 0 {
		sl.head = append(sl.head, p[:min(n, len(p))]...)
	}
	s.mu.Unlock()
}

// Pending reports whether sl's first flight has not all been seen
// (netguard.SlotWatch).
func (s *Table) Pending(sl *Slot) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !sl.complete
}

// Settle marks sl complete if what the handshake read and what waits in
// its socket buffer make a whole first flight (complete, under the lock;
// netguard.SlotWatch).
func (s *Table) Settle(sl *Slot) {
	s.mu.Lock()
	s.complete(sl)
	s.mu.Unlock()
}

// FlightRead marks sl complete: the handshake has read the whole flight.
func (s *Table) FlightRead(sl *Slot) {
	s.mu.Lock()
	sl.complete, sl.read = true, true
	s.mu.Unlock()
}

// Release frees sl's slot and reports whether it was evicted.
func (s *Table) Release(sl *Slot) (evicted bool) {
	if sl == nil {
		return false // Acquire refused it: it never held a slot
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	evicted = s.pending.Release(sl)
	// The freed slot goes to the oldest waiting connection, if any (there
	// are waiting ones only while every slot is taken).
	// A source that failed since it queued comes last.
	if len(s.waiting) > 0 && s.pending.Len() < s.max {
		i := s.waiterFrom(false)
		if i < 0 {
			i = 0
		}
		w := s.waiting[i]
		s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
		s.pending.Push(w)
		close(w.ready)
	}
	return evicted
}

// waiterFrom returns the index of the oldest waiting connection whose
// source is (failed) or is not (!failed) among the failed ones, or -1.
// s.mu is held.
func (s *Table) waiterFrom(failed bool) int {
	for i, w := range s.waiting {
		if s.failed.has(w.Source) == failed {
			return i
		}
	}
	return -1
}

// Await waits until sl, queued by Acquire, holds a slot, for at most
// timeout or until ctx ends, and reports whether it does. Giving up takes
// it out of the queue; a slot passed to it meanwhile is kept.
func (s *Table) Await(ctx context.Context, sl *Slot, timeout time.Duration) bool {
	if sl.ready == nil {
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-sl.ready:
		s.mu.Lock()
		defer s.mu.Unlock()
		return !sl.Evicted
	case <-t.C:
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiting {
		if w == sl {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return false
		}
	}
	return !sl.Evicted // passed a slot, or evicted, just now
}

// Waiters reports how many connections wait for a slot.
func (s *Table) Waiters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// Len reports how many connections hold a slot.
func (s *Table) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending.Len()
}
