package wgcompare

import "testing"

// TestFrameBytes: the frame-count check of a run divides by it, so every
// offload path must name a frame it can read, and the others read 0.
func TestFrameBytes(t *testing.T) {
	for _, c := range []struct {
		frame string
		want  int64
	}{{"64KiB", 64 << 10}, {"256KiB", 256 << 10}, {"", 0}, {"1MiB", 1 << 20}, {"xKiB", 0}} {
		if got := (Path{Frame: c.frame}).FrameBytes(); got != c.want {
			t.Errorf("FrameBytes(%q) = %d, want %d", c.frame, got, c.want)
		}
	}
	for _, p := range Paths {
		if p.Kind == "offload" && p.FrameBytes() < 1<<10 {
			t.Errorf("path %s: frame %q reads as %d bytes", p.Name, p.Frame, p.FrameBytes())
		}
	}
	if p, ok := PathByName("afalg-256k"); !ok || p.FrameBytes() != 256<<10 || !p.Extra {
		t.Errorf("afalg-256k: %+v, %v", p, ok)
	}
}
