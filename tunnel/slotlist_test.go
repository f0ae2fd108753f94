package tunnel

import (
	"net/netip"
	"testing"
)

type testSlot struct {
	slotEntry
	name     string
	complete bool
}

// The victim is the oldest incomplete connection of the source with the
// most waiting; a complete one is never chosen; counts follow removal.
func TestSlotList(t *testing.T) {
	a, b := netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("10.0.0.2/32")
	var l slotList[*testSlot]
	add := func(name string, src netip.Prefix, complete bool) *testSlot {
		sl := &testSlot{slotEntry: slotEntry{source: src}, name: name, complete: complete}
		l.push(sl)
		return sl
	}
	b1 := add("b1", b, false)
	a1 := add("a1", a, true)
	a2 := add("a2", a, false)
	a3 := add("a3", a, false)
	complete := func(sl *testSlot) bool { return sl.complete }
	name := func(sl *testSlot) string {
		if sl == nil {
			return "none"
		}
		return sl.name
	}
	if v := l.oldestOfBiggest(complete); v != a2 {
		t.Fatalf("victim %s, want a2 (a has 3 waiting, a1 is complete)", name(v))
	}
	l.evict(a2)
	if !a2.evicted || l.of(a) != 2 || l.len() != 3 {
		t.Fatalf("after evicting a2: evicted %v, a has %d, %d waiting", a2.evicted, l.of(a), l.len())
	}
	if l.release(a2) != true || l.len() != 3 {
		t.Fatal("releasing an evicted slot must report it and change nothing")
	}
	if v := l.oldestOfBiggest(complete); v != a3 {
		t.Fatalf("victim %s, want a3", name(v))
	}
	if l.release(a3) {
		t.Fatal("a3 was not evicted")
	}
	// a has only a1 left, complete: b1 goes.
	if v := l.oldestOfBiggest(complete); v != b1 {
		t.Fatalf("victim %s, want b1", name(v))
	}
	l.release(b1)
	if v := l.oldestOfBiggest(complete); v != nil {
		t.Fatalf("victim %s, want none: only a complete slot waits", name(v))
	}
	if got := l.find(func(sl *testSlot) bool { return sl.source == a }); got != a1 {
		t.Fatalf("find: %s, want a1", name(got))
	}
	l.release(a1)
	if l.len() != 0 || len(l.bySource) != 0 {
		t.Fatalf("after releasing all: %d waiting, %d sources", l.len(), len(l.bySource))
	}
}
