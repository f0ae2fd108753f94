package tunnel

import (
	"container/list"
	"net"
	"net/netip"
)

// slotList is the bookkeeping the handshake slots (limit.go) and the
// metrics endpoint's (metricsslots.go) share: the connections waiting,
// oldest first, how many each source has, and which were evicted. What
// makes a waiting connection "complete", and so safe from eviction, is
// each owner's; the owner holds its own lock around every call.
type slotList[S interface{ slot() *slotEntry }] struct {
	pending  list.List // S, oldest first
	bySource map[netip.Prefix]int
}

// slotEntry is what slotList keeps of one waiting connection; the slot
// types embed it.
type slotEntry struct {
	conn    net.Conn
	source  netip.Prefix
	elem    *list.Element // nil once out of the list
	evicted bool
}

func (e *slotEntry) slot() *slotEntry { return e }

// push adds sl, the newest.
func (l *slotList[S]) push(sl S) {
	if l.bySource == nil {
		l.bySource = map[netip.Prefix]int{}
	}
	e := sl.slot()
	e.elem = l.pending.PushBack(sl)
	l.bySource[e.source]++
}

// remove takes sl out of the list, if it is still in it.
func (l *slotList[S]) remove(sl S) {
	e := sl.slot()
	if e.elem == nil {
		return
	}
	l.pending.Remove(e.elem)
	e.elem = nil
	if l.bySource[e.source]--; l.bySource[e.source] <= 0 {
		delete(l.bySource, e.source)
	}
}

// evict takes sl out and marks it evicted; the caller resets its
// connection once its lock is released.
func (l *slotList[S]) evict(sl S) {
	l.remove(sl)
	sl.slot().evicted = true
}

// release takes sl out and reports whether it had been evicted.
func (l *slotList[S]) release(sl S) (evicted bool) {
	l.remove(sl)
	return sl.slot().evicted
}

func (l *slotList[S]) len() int { return l.pending.Len() }

// of reports how many connections src has waiting.
func (l *slotList[S]) of(src netip.Prefix) int { return l.bySource[src] }

// find returns the oldest waiting connection for which f is true, or
// the zero S (nil).
func (l *slotList[S]) find(f func(S) bool) S {
	for e := l.pending.Front(); e != nil; e = e.Next() {
		if sl := e.Value.(S); f(sl) {
			return sl
		}
	}
	var none S
	return none
}

// oldestOfBiggest returns the oldest waiting connection that is not
// complete, from the source with the most waiting, then the next most,
// ...; the zero S (nil) if every one is complete. So a flood from a few
// addresses pays for itself, and a client with one connection waiting is
// the last to go.
func (l *slotList[S]) oldestOfBiggest(complete func(S) bool) S {
	most := 0
	for _, n := range l.bySource {
		most = max(most, n)
	}
	for n := most; n > 0; n-- {
		for e := l.pending.Front(); e != nil; e = e.Next() {
			if sl := e.Value.(S); l.bySource[sl.slot().source] == n && !complete(sl) {
				return sl
			}
		}
	}
	var none S
	return none
}
