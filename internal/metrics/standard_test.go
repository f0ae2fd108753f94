package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// scrape runs the writers and returns each sample (name with labels) and
// its value.
func scrape(t *testing.T, writers ...func(*bytes.Buffer)) map[string]float64 {
	t.Helper()
	var b bytes.Buffer
	for _, w := range writers {
		w(&b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(&b)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			t.Fatalf("sample %q: no value", sc.Text())
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("sample %q: %v", sc.Text(), err)
		}
		if _, dup := out[name]; dup {
			t.Fatalf("sample %s written twice", name)
		}
		out[name] = v
	}
	return out
}

func process(b *bytes.Buffer)   { WriteProcess(b) }
func goRuntime(b *bytes.Buffer) { WriteGo(b) }

// family is the family a sample belongs to: its name without labels and,
// for a summary's _sum and _count, without the suffix.
func family(sample string) string {
	name, _, _ := strings.Cut(sample, "{")
	for _, suffix := range []string{"_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && StandardFamilies[base].Type == "summary" {
			return base
		}
	}
	return name
}

// TestStandardFamilies: every sample the writers write has its family in
// StandardFamilies, and every family there is written (the process_ ones
// on Linux); counters and only counters end in _total.
func TestStandardFamilies(t *testing.T) {
	seen := map[string]bool{}
	for sample := range scrape(t, process, goRuntime) {
		f := family(sample)
		seen[f] = true
		if _, ok := StandardFamilies[f]; !ok {
			t.Errorf("%s is written but has no entry in StandardFamilies", sample)
		}
	}
	for name, f := range StandardFamilies {
		if !seen[name] && (runtime.GOOS == "linux" || !strings.HasPrefix(name, "process_")) {
			t.Errorf("StandardFamilies has %s, which no writer emits", name)
		}
		if strings.HasSuffix(name, "_total") != (f.Type == "counter") {
			t.Errorf("%s: a %s; counters and only counters end in _total", name, f.Type)
		}
		if f.Help == "" || strings.ContainsAny(f.Help, "\n\\") {
			t.Errorf("%s: help %q must be one line without backslashes", name, f.Help)
		}
	}
}

// TestProcessFollows: each process_ series moves with what it measures.
func TestProcessFollows(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process_ series come from /proc")
	}
	before := scrape(t, process)

	// Open files: process_open_fds counts them. A descriptor an earlier
	// test's goroutine closes meanwhile would skew one try, so a try that
	// does not read exactly 5 more and then as many as before is made again.
	var tries []string
	for try := 0; try < 20; try++ {
		base := scrape(t, process)
		var files []*os.File
		for i := range 5 {
			f, err := os.Create(filepath.Join(t.TempDir(), strconv.Itoa(i)))
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		opened := scrape(t, process)
		for _, f := range files {
			_ = f.Close()
		}
		closed := scrape(t, process)
		if opened["process_open_fds"]-base["process_open_fds"] == 5 && closed["process_open_fds"] == base["process_open_fds"] {
			tries = nil
			break
		}
		tries = append(tries, fmt.Sprintf("%v -> %v with 5 files opened, %v after closing them", base["process_open_fds"], opened["process_open_fds"], closed["process_open_fds"]))
	}
	if tries != nil {
		t.Errorf("process_open_fds never followed 5 files in %d tries: %s", len(tries), strings.Join(tries, "; "))
	}

	// The soft limit on descriptors: process_max_fds follows it.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if before["process_max_fds"] != float64(lim.Cur) {
		t.Errorf("process_max_fds %v, the soft limit is %d", before["process_max_fds"], lim.Cur)
	}
	lower := lim
	lower.Cur = lim.Cur - 7
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lower); err != nil {
		t.Fatal(err)
	}
	got := scrape(t, process)["process_max_fds"]
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if got != float64(lower.Cur) {
		t.Errorf("process_max_fds %v after lowering the soft limit to %d", got, lower.Cur)
	}

	// Memory touched: resident grows by (most of) it, virtual by at least it.
	// The heap's free pages go back first, so the 32 MiB are new to the
	// process even when an earlier run of the test (-count) touched some.
	const size = 32 << 20
	debug.FreeOSMemory()
	unheld := scrape(t, process)
	big := make([]byte, size)
	for i := 0; i < size; i += 4096 {
		big[i] = 1
	}
	grown := scrape(t, process)
	runtime.KeepAlive(big)
	if d := grown["process_resident_memory_bytes"] - unheld["process_resident_memory_bytes"]; d < size/2 {
		t.Errorf("process_resident_memory_bytes grew %v bytes with %d touched", d, size)
	}
	if grown["process_virtual_memory_bytes"] < grown["process_resident_memory_bytes"] {
		t.Errorf("virtual %v < resident %v", grown["process_virtual_memory_bytes"], grown["process_resident_memory_bytes"])
	}

	// CPU spent: process_cpu_seconds_total rises (spin until it has moved
	// 20 ms; the bound only stops a broken counter from hanging the test).
	cpu0 := before["process_cpu_seconds_total"]
	x := uint64(1)
	deadline := time.Now().Add(2 * time.Minute)
	for scrape(t, process)["process_cpu_seconds_total"] < cpu0+0.02 {
		for i := range 1 << 20 {
			x = x*6364136223846793005 + uint64(i)
		}
		if time.Now().After(deadline) {
			t.Fatalf("process_cpu_seconds_total stuck at %v after 2 minutes of spinning", cpu0)
		}
	}
	_ = x

	// Start time: before this test began, and not before this binary was
	// built far in the past (an hour is generous for go test's start-up).
	start := before["process_start_time_seconds"]
	now := float64(time.Now().UnixNano()) / 1e9
	if start > now || start < now-3600 {
		t.Errorf("process_start_time_seconds %v, now %v", start, now)
	}
	if before["process_threads"] < 1 {
		t.Errorf("process_threads %v", before["process_threads"])
	}
}

// TestGoFollows: goroutines, GC cycles and the runtime's settings show
// in the go_ series.
func TestGoFollows(t *testing.T) {
	before := scrape(t, goRuntime)
	if before[`go_info{version="`+runtime.Version()+`"}`] != 1 {
		t.Errorf("no go_info for %s: %v", runtime.Version(), before)
	}

	// Goroutines left by earlier tests may end between the two scrapes and
	// pull the difference under 10, so a try that moved less is made again;
	// a series that does not follow the goroutines never moves by 10.
	var moved float64
	for try := 0; try < 50 && moved < 10; try++ {
		base := scrape(t, goRuntime)
		block := make(chan struct{})
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { <-block })
		}
		during := scrape(t, goRuntime)
		close(block)
		wg.Wait()
		moved = during["go_goroutines"] - base["go_goroutines"]
	}
	if moved < 10 {
		t.Errorf("go_goroutines moved %v with 10 more goroutines (50 tries)", moved)
	}

	runtime.GC()
	runtime.GC()
	after := scrape(t, goRuntime)
	if d := after["go_gc_duration_seconds_count"] - before["go_gc_duration_seconds_count"]; d < 2 {
		t.Errorf("go_gc_duration_seconds_count moved %v after 2 GCs", d)
	}
	if after["go_memstats_last_gc_time_seconds"] <= before["go_memstats_last_gc_time_seconds"] {
		t.Errorf("go_memstats_last_gc_time_seconds did not move: %v", after["go_memstats_last_gc_time_seconds"])
	}
	if after[`go_gc_duration_seconds{quantile="1"}`] <= 0 || after[`go_gc_duration_seconds{quantile="0"}`] > after[`go_gc_duration_seconds{quantile="1"}`] {
		t.Errorf("GC pause quantiles: min %v, max %v", after[`go_gc_duration_seconds{quantile="0"}`], after[`go_gc_duration_seconds{quantile="1"}`])
	}
	if after["go_memstats_mallocs_total"] < before["go_memstats_mallocs_total"] {
		t.Errorf("go_memstats_mallocs_total went back")
	}

	limit := debug.SetMemoryLimit(123 << 20)
	set := scrape(t, goRuntime)
	debug.SetMemoryLimit(limit)
	if set["go_gc_gomemlimit_bytes"] != 123<<20 {
		t.Errorf("memory limit %d: go_gc_gomemlimit_bytes %v", 123<<20, set["go_gc_gomemlimit_bytes"])
	}
	if set["go_sched_gomaxprocs_threads"] != float64(runtime.GOMAXPROCS(0)) {
		t.Errorf("go_sched_gomaxprocs_threads %v, GOMAXPROCS %d", set["go_sched_gomaxprocs_threads"], runtime.GOMAXPROCS(0))
	}
}
