package qemucpu

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStatCPU(t *testing.T) {
	// comm with a space and a ')' inside, as the kernel prints it.
	line := "4242 (qemu (x) sys) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 3 4 20 0 5 0 100 0 0"
	got, err := ParseStat(line)
	if err != nil || got != 3250*time.Millisecond {
		t.Fatalf("ParseStat = %v, %v; want 3.25s (250+75 ticks)", got, err)
	}
	for _, bad := range []string{"no paren", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u s"} {
		if _, err := ParseStat(bad); err == nil {
			t.Errorf("ParseStat(%q): no error", bad)
		}
	}
}

func TestProcessOwn(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := Process(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestIsVCPUThread(t *testing.T) {
	for stat, want := range map[string]bool{
		"4177 (CPU 0/TCG) R 1 4177 0 0 -1 4194560 0 0 0 0 1200 30 0 0 20 0 4 0": true,
		"4177 (qemu-system-mip) S 1 4177":                                       false,
		"4177 (worker) S 1 4177":                                                false,
		"4177 CPU 0/TCG S":                                                      false,
	} {
		if got := IsVCPUThread(stat); got != want {
			t.Errorf("IsVCPUThread(%q) = %v, want %v", stat, got, want)
		}
	}
}
