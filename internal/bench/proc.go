package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPUTime is CPU time split as getrusage reports it. System time matters
// here: AF_ALG and /dev/crypto work is done in the kernel, on behalf of
// the process, and counts there.
type CPUTime struct {
	User   time.Duration `json:"user_ns"`
	System time.Duration `json:"system_ns"`
}

// Total is user plus system time.
func (c CPUTime) Total() time.Duration { return c.User + c.System }

// ProcessCPU is the CPU time the whole process has used so far, or false
// where the platform cannot tell.
func ProcessCPU() (CPUTime, bool) { return processCPU() }

// Memory is a process's resident memory from /proc/PID/status.
type Memory struct {
	RSS  int64 `json:"rss_bytes"`  // VmRSS: resident now
	Peak int64 `json:"peak_bytes"` // VmHWM: the most it has been resident
}

// ProcMemory reads VmRSS and VmHWM of pid from /proc (Linux).
func ProcMemory(pid int) (Memory, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, fmt.Errorf("memory of pid %d: %w", pid, err)
	}
	return parseStatus(b)
}

// parseStatus reads the VmRSS and VmHWM lines ("VmRSS:	    1234 kB").
func parseStatus(b []byte) (Memory, error) {
	var m Memory
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return Memory{}, fmt.Errorf("/proc status line %q: want a size in kB", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("/proc status line %q: %w", sc.Text(), err)
		}
		if key == "VmRSS" {
			m.RSS = kb << 10
		} else {
			m.Peak = kb << 10
		}
		seen++
	}
	if seen != 2 {
		return Memory{}, fmt.Errorf("/proc status: no VmRSS and VmHWM lines (a kernel thread or a zombie?)")
	}
	return m, nil
}

// CPUModel is the CPU's model name from /proc/cpuinfo ("model name",
// "cpu model" on MIPS, "Hardware"/"Processor" on some ARM boards), or "".
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	return parseCPUModel(b)
}

func parseCPUModel(b []byte) string {
	found := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key = strings.TrimSpace(key)
		if _, dup := found[key]; !dup {
			found[key] = strings.TrimSpace(val)
		}
	}
	for _, k := range []string{"model name", "cpu model", "Hardware", "Processor"} {
		if v := found[k]; v != "" {
			return v
		}
	}
	return ""
}
