package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// memStatus is what /proc/PID/status says of a process's resident memory.
type memStatus struct {
	RSS int64 // VmRSS: resident now
	HWM int64 // VmHWM: the most it has been resident ("high water mark")
}

// parseStatus reads VmRSS and VmHWM ("VmRSS:\t  12345 kB") from the text
// of /proc/PID/status.
func parseStatus(r io.Reader) (memStatus, error) {
	var m memStatus
	var got int
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return memStatus{}, fmt.Errorf("/proc status: %s: want \"N kB\", got %q", k, strings.TrimSpace(v))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return memStatus{}, fmt.Errorf("/proc status: %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.RSS = n << 10
		} else {
			m.HWM = n << 10
		}
		got++
	}
	if err := sc.Err(); err != nil {
		return memStatus{}, err
	}
	if got != 2 {
		return memStatus{}, fmt.Errorf("/proc status: no VmRSS and VmHWM lines (not Linux, or a zombie process?)")
	}
	return m, nil
}

// readStatus reads /proc/PID/status.
func readStatus(pid int) (memStatus, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	defer f.Close()
	m, err := parseStatus(f)
	if err != nil {
		return memStatus{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return m, nil
}
