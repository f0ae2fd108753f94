package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// procStatus is what the attack reports of the server from
// /proc/PID/status, as the kernel writes it ("9876 kB", "12").
type procStatus struct {
	RSS, Threads string
}

// readStatus reads VmRSS and Threads of pid (Linux /proc).
func readStatus(pid int) (procStatus, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procStatus{}, err
	}
	return parseStatus(string(b))
}

// parseStatus finds the VmRSS and Threads lines of /proc/PID/status.
func parseStatus(s string) (procStatus, error) {
	var st procStatus
	for _, l := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(l, ":")
		switch {
		case !ok:
		case k == "VmRSS":
			st.RSS = strings.TrimSpace(v)
		case k == "Threads":
			st.Threads = strings.TrimSpace(v)
		}
	}
	if st.RSS == "" || st.Threads == "" {
		return procStatus{}, fmt.Errorf("/proc status: no VmRSS and Threads lines (a zombie?)")
	}
	return st, nil
}

// procCPU is the user plus system time pid has used, in clock ticks
// (fields 14 and 15 of /proc/PID/stat).
func procCPU(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime from the text of /proc/PID/stat. The
// command name (field 2) is in parentheses and may hold spaces and
// parentheses itself, so the fields are counted from its last ")".
func parseStatCPU(s string) (int64, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat: no command name in %.40q", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var sum int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: cpu time: %w", err)
		}
		sum += n
	}
	return sum, nil
}
