package testutil

import (
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestFreePort(t *testing.T) {
	a := FreePort(t)
	ln, err := net.Listen("tcp", a)
	if err != nil {
		t.Fatalf("FreePort gave %s, which can't be bound: %v", a, err)
	}
	_ = ln.Close()
	// Outside the ephemeral range, which listen(:0) and connect draw from.
	if lo, hi := staticPorts(); hi > 0 {
		_, ps, _ := net.SplitHostPort(a)
		if p, _ := strconv.Atoi(ps); p < lo || p > hi {
			t.Errorf("FreePort gave port %d, outside %d–%d (below the ephemeral range)", p, lo, hi)
		}
	}
	if _, err := FreeAddr("192.0.2.1"); err == nil {
		t.Error("FreeAddr on an address this host does not have: no error")
	}
}

func TestProc(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh:", err)
	}
	p := StartProc(t, "exit3", sh, "-c", "echo out; echo err >&2; exit 3")
	if code := p.ExitCode(); code != 3 {
		t.Errorf("exit code %d, want 3", code)
	}
	if out := p.Out.String(); !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") {
		t.Errorf("output %q lacks stdout or stderr", out)
	}
	if p.Err() == nil {
		t.Error("Err of an exit 3: nil")
	}

	// SIGTERM ends a shell waiting on nothing; one that ignores it is
	// killed after the grace.
	p = StartProc(t, "term", sh, "-c", "exec sleep 60")
	if !p.Stop(30 * time.Second) {
		t.Error("Stop: sleep did not end on SIGTERM")
	}
	p = StartProc(t, "deaf", sh, "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done")
	for !strings.Contains(p.Out.String(), "ready") {
		select {
		case <-p.Done():
			t.Fatalf("exited early: %s", p.Out)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if p.Stop(100 * time.Millisecond) {
		t.Error("Stop: a process that ignores SIGTERM reported as stopped")
	}
	select {
	case <-p.Done():
	default:
		t.Error("Stop returned false but the process runs on")
	}
}

func TestSyncBufferLimit(t *testing.T) {
	b := &SyncBuffer{Limit: 4}
	for _, s := range []string{"ab", "cde", "fg"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if got := b.String(); got != "abcde" {
		t.Errorf("kept %q, want %q (whole writes until the limit is reached)", got, "abcde")
	}
}
