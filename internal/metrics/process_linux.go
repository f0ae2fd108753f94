package metrics

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"
	"time"
)

// userHZ is the unit of /proc's clock-tick fields: USER_HZ, 100 on every
// Linux architecture's user ABI (client_golang's procfs assumes it too).
const userHZ = 100

// WriteProcess writes the process_* families from /proc/self and the
// kernel's accounting: CPU time, resident and virtual memory, threads,
// open and maximum file descriptors, start time. A source that cannot be
// read leaves its series out rather than writing a wrong value.
func WriteProcess(w io.Writer) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		WriteCounterFloat64(w, "process_cpu_seconds_total", cpu.Seconds())
	}
	if st, err := readStat("/proc/self/stat"); err == nil {
		WriteGaugeUint64(w, "process_virtual_memory_bytes", st.vsize)
		WriteGaugeUint64(w, "process_resident_memory_bytes", st.rssPages*uint64(os.Getpagesize()))
		WriteGaugeUint64(w, "process_threads", st.threads)
		if boot, err := bootTime("/proc/stat"); err == nil {
			WriteGaugeFloat64(w, "process_start_time_seconds", float64(boot)+float64(st.startTicks)/userHZ)
		}
	}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		// ReadDir's own descriptor is closed before it returns.
		WriteGaugeUint64(w, "process_open_fds", uint64(len(fds)))
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		WriteGaugeUint64(w, "process_max_fds", lim.Cur)
	}
}

// procStat is what WriteProcess needs of /proc/self/stat.
type procStat struct {
	threads, startTicks, vsize, rssPages uint64
}

// readStat parses proc(5)'s stat line. The command name (field 2) may hold
// spaces and parentheses, so the fields are counted after its last ')'.
func readStat(path string) (procStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, errors.New(path + ": no ')' after the command name")
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3, state
	if len(f) < 22 {
		return procStat{}, errors.New(path + ": too few fields")
	}
	var st procStat
	for _, x := range []struct {
		field int
		dst   *uint64
	}{{20, &st.threads}, {22, &st.startTicks}, {23, &st.vsize}, {24, &st.rssPages}} {
		v, err := strconv.ParseUint(string(f[x.field-3]), 10, 64)
		if err != nil {
			return procStat{}, errors.New(path + ": field " + strconv.Itoa(x.field) + ": " + err.Error())
		}
		*x.dst = v
	}
	return st, nil
}

// bootTime reads btime, the boot time in Unix seconds, from /proc/stat.
func bootTime(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			return strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, errors.New(path + ": no btime line")
}
