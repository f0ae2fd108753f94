package record

import (
	"io"
	"testing"
	"time"

	"github.com/offload-dev/offload/engine"
)

// Traffic moves with every Write and Read, before the transfer ends, and
// adds to its parent; Rekeys tells this Conn's epochs and when the last
// began.
func TestTrafficMovesDuringTransfer(t *testing.T) {
	c1, c2 := tcpPair(t)
	var parent Traffic
	own := &Traffic{Parent: &parent}
	a, b := newPair(t, c1, c2, ctr256, Options{MaxFrame: 1024, Traffic: own, maxFrames: 4}, Options{MaxFrame: 1024})
	if a.Traffic() != own || b.Traffic() == nil {
		t.Fatal("Traffic is not the one given, or none was made")
	}
	if n, last := a.Rekeys(engine.Encrypt); n != 0 || !last.IsZero() {
		t.Fatalf("rekeys before any frame: %d at %v", n, last)
	}
	before := time.Now()
	msg := make([]byte, 10000)
	if _, err := a.Write(msg); err != nil {
		t.Fatal(err)
	}
	// Half of it read: the counts are there while more is to come.
	if _, err := io.ReadFull(b, msg[:5000]); err != nil {
		t.Fatal(err)
	}
	if got := own.Sent.Load(); got != 10000 {
		t.Errorf("sent %d, want 10000", got)
	}
	if got := parent.Sent.Load(); got != 10000 {
		t.Errorf("parent sent %d, want 10000", got)
	}
	if got := b.Traffic().Received.Load(); got != 5000 {
		t.Errorf("received %d after reading 5000", got)
	}
	if _, err := io.ReadFull(b, msg[:5000]); err != nil {
		t.Fatal(err)
	}
	if got := b.Traffic().Received.Load(); got != 10000 {
		t.Errorf("received %d after reading all", got)
	}
	// 10,000 bytes are 10 frames of at most 1 KiB, 4 frames an epoch.
	n, last := a.Rekeys(engine.Encrypt)
	if n < 2 || last.Before(before) {
		t.Errorf("rekeys sent %d, last at %v (test began %v)", n, last, before)
	}
	if rn, _ := b.Rekeys(engine.Decrypt); rn != n {
		t.Errorf("peer saw %d rekeys, want %d", rn, n)
	}
	if own.Received.Load() != 0 || parent.Received.Load() != 0 {
		t.Errorf("received counted on the sending end")
	}
}
