package netguard

import (
	"net/netip"
	"testing"
)

type testSlot struct {
	SlotEntry
	name     string
	complete bool
}

// The victim is the oldest incomplete connection of the source with the
// most waiting; a complete one is never chosen; counts follow removal.
func TestSlotList(t *testing.T) {
	a, b := netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("10.0.0.2/32")
	var l SlotList[*testSlot]
	add := func(name string, src netip.Prefix, complete bool) *testSlot {
		sl := &testSlot{SlotEntry: SlotEntry{Source: src}, name: name, complete: complete}
		l.Push(sl)
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
	if v := l.OldestOfBiggest(complete); v != a2 {
		t.Fatalf("victim %s, want a2 (a has 3 waiting, a1 is complete)", name(v))
	}
	l.Evict(a2)
	if !a2.Evicted || l.Of(a) != 2 || l.Len() != 3 {
		t.Fatalf("after evicting a2: evicted %v, a has %d, %d waiting", a2.Evicted, l.Of(a), l.Len())
	}
	if l.Release(a2) != true || l.Len() != 3 {
		t.Fatal("releasing an evicted slot must report it and change nothing")
	}
	if v := l.OldestOfBiggest(complete); v != a3 {
		t.Fatalf("victim %s, want a3", name(v))
	}
	if l.Release(a3) {
		t.Fatal("a3 was not evicted")
	}
	// a has only a1 left, complete: b1 goes.
	if v := l.OldestOfBiggest(complete); v != b1 {
		t.Fatalf("victim %s, want b1", name(v))
	}
	l.Release(b1)
	if v := l.OldestOfBiggest(complete); v != nil {
		t.Fatalf("victim %s, want none: only a complete slot waits", name(v))
	}
	if got := l.Find(func(sl *testSlot) bool { return sl.Source == a }); got != a1 {
		t.Fatalf("find: %s, want a1", name(got))
	}
	l.Release(a1)
	if l.Len() != 0 || l.Sources() != 0 {
		t.Fatalf("after releasing all: %d waiting, %d sources", l.Len(), l.Sources())
	}
}
