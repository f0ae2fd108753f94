package sysinfo

import (
	"crypto/sha256"
	"runtime"
	"strings"
	"testing"
)

func TestKernel(t *testing.T) {
	k := Kernel()
	if !strings.HasPrefix(k, runtime.GOOS) {
		t.Fatalf("Kernel() = %q", k)
	}
	if runtime.GOOS == "linux" && k == "linux" {
		t.Fatalf("no kernel release on linux")
	}
}

func TestUserCPUAdvances(t *testing.T) {
	before, ok := UserCPU()
	if !ok {
		t.Skip("no user CPU time on " + runtime.GOOS)
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < 200; i++ {
		sha256.Sum256(buf)
	}
	after, _ := UserCPU()
	if after <= before {
		t.Fatalf("user CPU did not advance: %v -> %v", before, after)
	}
}
