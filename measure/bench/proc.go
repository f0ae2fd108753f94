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

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture offload runs on.
const clockTick = 10 * time.Millisecond

// statCPU is one process's line of /proc/PID/stat: its parent and its
// CPU time including that of the children it has waited for.
type statCPU struct {
	ppid int
	cpu  CPUTime
}

// parseStat reads ppid, utime+cutime and stime+cstime from a
// /proc/PID/stat line; comm (field 2) may hold spaces and parentheses,
// so the fields are counted from the last ')'.
func parseStat(b []byte) (statCPU, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return statCPU{}, fmt.Errorf("/proc stat %q: no ')'", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	if len(f) < 15 {
		return statCPU{}, fmt.Errorf("/proc stat: %d fields after comm, want 15 or more", len(f))
	}
	var n [5]int64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.ParseInt(f[idx], 10, 64)
		if err != nil {
			return statCPU{}, fmt.Errorf("/proc stat field %d: %w", idx+3, err)
		}
		n[k] = v
	}
	return statCPU{
		ppid: int(n[0]),
		cpu:  CPUTime{User: time.Duration(n[1]+n[3]) * clockTick, System: time.Duration(n[2]+n[4]) * clockTick},
	}, nil
}

// TreeCPU is the CPU time of the processes roots and all their
// descendants (Linux /proc), including children that have exited and
// were waited for. The difference of two calls is what a set of tool
// processes (sshd and its per-connection children, say) used in between.
func TreeCPU(roots []int) (CPUTime, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return CPUTime{}, fmt.Errorf("process CPU: %w", err)
	}
	procs := map[int]statCPU{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since ReadDir
		}
		st, err := parseStat(b)
		if err != nil {
			return CPUTime{}, fmt.Errorf("pid %d: %w", pid, err)
		}
		procs[pid] = st
	}
	in := map[int]bool{}
	for _, r := range roots {
		if _, ok := procs[r]; !ok {
			return CPUTime{}, fmt.Errorf("process CPU: pid %d is not running", r)
		}
		in[r] = true
	}
	// Walk up from every process; the tree is shallow.
	var sum CPUTime
	for pid, st := range procs {
		for p, hops := pid, 0; p > 1 && hops < 64; p, hops = procs[p].ppid, hops+1 {
			if in[p] {
				sum.User += st.cpu.User
				sum.System += st.cpu.System
				break
			}
		}
	}
	return sum, nil
}
