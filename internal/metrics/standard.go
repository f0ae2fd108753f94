package metrics

import (
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
)

// Family is one metric family's Prometheus type ("counter", "gauge",
// "summary") and the one-line help /metrics writes before its samples.
type Family struct {
	Type, Help string
}

// StandardFamilies are the process_* and go_* families WriteProcess and
// WriteGo write, under the names Prometheus' own client libraries use
// (client_golang's process and Go collectors), so that dashboards and
// alerts written for any Go service read offload's too. TestStandard
// holds the writers and this table to each other.
var StandardFamilies = map[string]Family{
	"process_cpu_seconds_total":        {"counter", "Total user and system CPU time spent in seconds."},
	"process_open_fds":                 {"gauge", "Number of open file descriptors."},
	"process_max_fds":                  {"gauge", "Maximum number of open file descriptors."},
	"process_virtual_memory_bytes":     {"gauge", "Virtual memory size in bytes."},
	"process_resident_memory_bytes":    {"gauge", "Resident memory size in bytes."},
	"process_start_time_seconds":       {"gauge", "Start time of the process since unix epoch in seconds."},
	"process_threads":                  {"gauge", "Number of OS threads in the process."},
	"go_info":                          {"gauge", "Information about the Go environment."},
	"go_goroutines":                    {"gauge", "Number of goroutines that currently exist."},
	"go_gc_duration_seconds":           {"summary", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles."},
	"go_gc_gomemlimit_bytes":           {"gauge", "Go runtime memory limit configured by the user, otherwise math.MaxInt64 (GOMEMLIMIT, memory_limit)."},
	"go_sched_gomaxprocs_threads":      {"gauge", "The current runtime.GOMAXPROCS setting."},
	"go_memstats_alloc_bytes":          {"gauge", "Number of heap bytes allocated and currently in use."},
	"go_memstats_alloc_bytes_total":    {"counter", "Total number of heap bytes allocated, even if freed."},
	"go_memstats_sys_bytes":            {"gauge", "Number of bytes obtained from system."},
	"go_memstats_heap_alloc_bytes":     {"gauge", "Number of heap bytes allocated and currently in use."},
	"go_memstats_heap_sys_bytes":       {"gauge", "Number of heap bytes obtained from system."},
	"go_memstats_heap_idle_bytes":      {"gauge", "Number of heap bytes waiting to be used."},
	"go_memstats_heap_inuse_bytes":     {"gauge", "Number of heap bytes that are in use."},
	"go_memstats_heap_released_bytes":  {"gauge", "Number of heap bytes released to OS."},
	"go_memstats_heap_objects":         {"gauge", "Number of allocated objects."},
	"go_memstats_stack_inuse_bytes":    {"gauge", "Number of bytes in use by the stack allocator."},
	"go_memstats_mallocs_total":        {"counter", "Total number of mallocs."},
	"go_memstats_frees_total":          {"counter", "Total number of frees."},
	"go_memstats_next_gc_bytes":        {"gauge", "Number of heap bytes when next garbage collection will take place."},
	"go_memstats_last_gc_time_seconds": {"gauge", "Number of seconds since 1970 of last garbage collection."},
}

// WriteGaugeFloat64 writes one sample of a gauge with a fractional value.
func WriteGaugeFloat64(w io.Writer, name string, v float64) { writeFloat(w, name, v) }

// WriteCounterFloat64 writes one sample of a counter with a fractional
// value (seconds).
func WriteCounterFloat64(w io.Writer, name string, v float64) { writeFloat(w, name, v) }

func writeFloat(w io.Writer, name string, v float64) {
	writeLine(w, name, func(b []byte) []byte { return strconv.AppendFloat(b, v, 'g', -1, 64) })
}

// WriteGo writes the go_* families: goroutines, the heap, GC pauses and
// the runtime's settings. runtime.ReadMemStats stops the world for a few
// microseconds, once a scrape.
func WriteGo(w io.Writer) {
	WriteGaugeUint64(w, "go_info{version="+strconv.Quote(runtime.Version())+"}", 1)
	WriteGaugeUint64(w, "go_goroutines", uint64(runtime.NumGoroutine()))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	for _, s := range []struct {
		name string
		v    uint64
	}{
		{"go_memstats_alloc_bytes", ms.Alloc},
		{"go_memstats_sys_bytes", ms.Sys},
		{"go_memstats_heap_alloc_bytes", ms.HeapAlloc},
		{"go_memstats_heap_sys_bytes", ms.HeapSys},
		{"go_memstats_heap_idle_bytes", ms.HeapIdle},
		{"go_memstats_heap_inuse_bytes", ms.HeapInuse},
		{"go_memstats_heap_released_bytes", ms.HeapReleased},
		{"go_memstats_heap_objects", ms.HeapObjects},
		{"go_memstats_stack_inuse_bytes", ms.StackInuse},
		{"go_memstats_next_gc_bytes", ms.NextGC},
	} {
		WriteGaugeUint64(w, s.name, s.v)
	}
	WriteCounterUint64(w, "go_memstats_alloc_bytes_total", ms.TotalAlloc)
	WriteCounterUint64(w, "go_memstats_mallocs_total", ms.Mallocs)
	WriteCounterUint64(w, "go_memstats_frees_total", ms.Frees)
	WriteGaugeFloat64(w, "go_memstats_last_gc_time_seconds", float64(ms.LastGC)/1e9)
	writeGCPauses(w, &ms)

	// Queries, not changes: a negative limit and GOMAXPROCS(0) only read.
	// (GOGC has no such query outside runtime/metrics, whose reader costs
	// the router binary 12 KiB; it is left out.)
	WriteGaugeUint64(w, "go_gc_gomemlimit_bytes", uint64(debug.SetMemoryLimit(-1)))
	WriteGaugeUint64(w, "go_sched_gomaxprocs_threads", uint64(runtime.GOMAXPROCS(0)))
}

// writeGCPauses writes go_gc_duration_seconds as client_golang does: the
// quantiles 0, 0.25, 0.5, 0.75 and 1 of the recent pauses (the runtime
// keeps the last 256), the sum of all pauses and their count.
func writeGCPauses(w io.Writer, ms *runtime.MemStats) {
	n := min(int(ms.NumGC), len(ms.PauseNs))
	pauses := make([]uint64, n)
	for i := range n {
		pauses[i] = ms.PauseNs[(int(ms.NumGC)-1-i+len(ms.PauseNs))%len(ms.PauseNs)]
	}
	slices.Sort(pauses)
	for _, q := range []struct {
		label string
		at    float64
	}{{"0", 0}, {"0.25", 0.25}, {"0.5", 0.5}, {"0.75", 0.75}, {"1", 1}} {
		v := 0.0
		if n > 0 {
			v = float64(pauses[int(q.at*float64(n-1)+0.5)]) / 1e9
		}
		WriteGaugeFloat64(w, `go_gc_duration_seconds{quantile="`+q.label+`"}`, v)
	}
	WriteCounterFloat64(w, "go_gc_duration_seconds_sum", float64(ms.PauseTotalNs)/1e9)
	WriteCounterUint64(w, "go_gc_duration_seconds_count", uint64(ms.NumGC))
}
