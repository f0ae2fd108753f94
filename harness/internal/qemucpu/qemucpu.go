// Package qemucpu reads a qemu process's CPU time from /proc: all its
// threads (utime+stime), and its vCPU threads alone, which -name
// debug-threads=on names "CPU N/TCG"; the rest is device emulation and I/O.
// harness/vm samples it at span markers, harness/anchor -routers 2 around
// every run of each router.
package qemucpu

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Process reads utime+stime of process pid from /proc (all threads).
func Process(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseStat(string(b))
}

// VCPU sums utime+stime of qemu's vCPU threads, which -name
// debug-threads=on names "CPU N/TCG" (or "CPU N/KVM").
func VCPU(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	found := false
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/stat")
		if err != nil {
			continue // the thread exited
		}
		if !IsVCPUThread(string(b)) {
			continue
		}
		c, err := ParseStat(string(b))
		if err != nil {
			return 0, err
		}
		sum += c
		found = true
	}
	if !found {
		return 0, fmt.Errorf("%s: no vCPU thread (qemu without debug-threads=on?)", dir)
	}
	return sum, nil
}

// IsVCPUThread reports whether a /proc/PID/task/TID/stat line is a qemu
// vCPU thread's.
func IsVCPUThread(stat string) bool {
	i, j := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	return i >= 0 && j > i && strings.HasPrefix(stat[i+1:j], "CPU ")
}

// UserHZ is the unit of /proc/PID/stat's times; Linux fixes it at 100 for
// user space whatever the kernel's own HZ.
const UserHZ = 100

// ParseStat returns utime+stime from a /proc/PID/stat line. The
// command name may hold spaces and parentheses, so fields are counted from
// the last ')'.
func ParseStat(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no ')' in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the name, want at least 13", len(f))
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc stat: bad utime/stime %q %q", f[11], f[12])
	}
	return time.Duration(u+s) * time.Second / UserHZ, nil
}
