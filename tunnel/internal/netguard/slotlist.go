package netguard

import (
	"container/list"
	"net"
	"net/netip"
)

// SlotList is the bookkeeping the handshake slots (tunnel/slots) and
// the metrics endpoint's (tunnel/metricsserver) share: the connections
// waiting, oldest first, how many each source has (SourceOf), and which
// were evicted. What makes a waiting connection "complete", and so safe
// from eviction, is each owner's; the owner holds its own lock around
// every call. The zero SlotList is empty and ready.
type SlotList[S interface{ Entry() *SlotEntry }] struct {
	pending  list.List // S, oldest first
	bySource map[netip.Prefix]int
}

// SlotEntry is what SlotList keeps of one waiting connection; the slot
// types embed it. Conn and Source are set before Push; Evicted is set by
// Evict (or by an owner that drops a connection it never pushed).
type SlotEntry struct {
	Conn    net.Conn
	Source  netip.Prefix
	elem    *list.Element // nil once out of the list
	Evicted bool
}

// Entry makes a type that embeds SlotEntry a slot of a SlotList.
func (e *SlotEntry) Entry() *SlotEntry { return e }

// Push adds sl, the newest.
func (l *SlotList[S]) Push(sl S) {
	if l.bySource == nil {
		l.bySource = map[netip.Prefix]int{}
	}
	e := sl.Entry()
	e.elem = l.pending.PushBack(sl)
	l.bySource[e.Source]++
}

// Remove takes sl out of the list, if it is still in it.
func (l *SlotList[S]) Remove(sl S) {
	e := sl.Entry()
	if e.elem == nil {
		return
	}
	l.pending.Remove(e.elem)
	e.elem = nil
	if l.bySource[e.Source]--; l.bySource[e.Source] <= 0 {
		delete(l.bySource, e.Source)
	}
}

// Evict takes sl out and marks it evicted; the caller resets its
// connection once its lock is released.
func (l *SlotList[S]) Evict(sl S) {
	l.Remove(sl)
	sl.Entry().Evicted = true
}

// Release takes sl out and reports whether it had been evicted.
func (l *SlotList[S]) Release(sl S) (evicted bool) {
	l.Remove(sl)
	return sl.Entry().Evicted
}

// Len is how many connections wait.
func (l *SlotList[S]) Len() int { return l.pending.Len() }

// Sources is how many sources have connections waiting.
func (l *SlotList[S]) Sources() int { return len(l.bySource) }

// Of reports how many connections src has waiting.
func (l *SlotList[S]) Of(src netip.Prefix) int { return l.bySource[src] }

// Find returns the oldest waiting connection for which f is true, or
// the zero S (nil).
func (l *SlotList[S]) Find(f func(S) bool) S {
	for e := l.pending.Front(); e != nil; e = e.Next() {
		if sl := e.Value.(S); f(sl) {
			return sl
		}
	}
	var none S
	return none
}

// OldestOfBiggest returns the oldest waiting connection that is not
// complete, from the source with the most waiting, then the next most,
// ...; the zero S (nil) if every one is complete. So a flood from a few
// addresses pays for itself, and a client with one connection waiting is
// the last to go.
func (l *SlotList[S]) OldestOfBiggest(complete func(S) bool) S {
	most := 0
	for _, n := range l.bySource {
		most = max(most, n)
	}
	for n := most; n > 0; n-- {
		for e := l.pending.Front(); e != nil; e = e.Next() {
			if sl := e.Value.(S); l.bySource[sl.Entry().Source] == n && !complete(sl) {
				return sl
			}
		}
	}
	var none S
	return none
}
