package main

// The report of offload bench: its JSON document, the rows made from the
// cells' runs, and the table. The figures themselves (medians, paired
// ratios, checks) are internal/benchmethod's.

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/benchmethod"
	"github.com/offload-dev/offload/selector"
)

// benchReport is the -json document.
type benchReport struct {
	Offload   string  `json:"offload"`
	Go        string  `json:"go"`
	Platform  string  `json:"platform"`
	Kernel    string  `json:"kernel"`
	CPU       string  `json:"cpu,omitempty"`
	CPUAES    bool    `json:"cpu_aes"`
	LoadAvg   string  `json:"loadavg,omitempty"`
	Suite     string  `json:"suite"`
	Mode      string  `json:"mode"` // "in-process" or "remote"
	Server    string  `json:"server,omitempty"`
	Bytes     int64   `json:"bytes,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	MaxFrame  int     `json:"max_frame"`
	WriteSize int     `json:"write_size"`
	Repeat    int     `json:"repeat"`
	// CPUScope says whose CPU time CPU s/GB counts.
	CPUScope string                `json:"cpu_scope"`
	Runs     []benchRun            `json:"runs"`
	Skipped  []benchmethod.Skipped `json:"skipped,omitempty"`
	// Tolerance and Checks are -check's: the final result of every check.
	Tolerance float64             `json:"tolerance,omitempty"`
	Checks    []benchmethod.Check `json:"checks,omitempty"`
}

// benchRun is one run of a policy at a stream count and, in the report,
// the row of that cell: its median run with the Ratios of all its runs.
type benchRun struct {
	Policy   string  `json:"policy"`
	Streams  int     `json:"streams"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"mb_per_s"`
	CPUPerGB float64 `json:"cpu_s_per_gb,omitempty"`
	// Ratios (a row's only): every round's MB/s and the medians of
	// per-round ratios against software, the best single engine and auto.
	benchmethod.Ratios
	// HandedToCPU (hybrid only) is how many frames the policy gave a CPU
	// engine although their band's device would have had them under auto:
	// in a run, and in a reported row over all of its rounds.
	HandedToCPU uint64            `json:"hybrid_handed_to_cpu,omitempty"`
	Verified    bool              `json:"verified"`
	Engines     []benchEngine     `json:"engines"`
	IRQ         map[string]uint64 `json:"irq_delta,omitempty"`
	Error       string            `json:"error,omitempty"`
}

// Rate and Failure make a run a benchmethod.Result.
func (r benchRun) Rate() float64   { return r.MBps }
func (r benchRun) Failure() string { return r.Error }

// benchEngine is what one engine did in a run: frames and ciphertext bytes
// summed over the ends measured here and both directions, and the split.
type benchEngine struct {
	Engine    string                `json:"engine"`
	Driver    string                `json:"driver,omitempty"`
	Frames    uint64                `json:"frames"`
	Bytes     uint64                `json:"bytes"`
	Fallbacks uint64                `json:"fallbacks,omitempty"`
	By        map[string]frameCount `json:"by_end_direction"` // "client/encrypt", ...
}

type frameCount struct {
	Frames uint64 `json:"frames"`
	Bytes  uint64 `json:"bytes"`
}

// benchRoles are the policies bench compares the others with.
var benchRoles = benchmethod.Roles{Baseline: engine.SoftwareName, Auto: selector.SpecAuto, Hybrid: selector.SpecHybrid}

// benchCell is a policy at a stream count with its runs.
type benchCell = benchmethod.Cell[benchRun]

// summarize makes the report's rows, one per cell: the median run with
// the cell's Ratios, and what hybrid handed to the CPU in all its rounds.
func summarize(cells []*benchCell) []benchRun {
	out := make([]benchRun, len(cells))
	for i, c := range cells {
		r := c.Median()
		r.Ratios = benchmethod.Compare(benchRoles, cells, c)
		r.HandedToCPU = 0
		for _, run := range c.Runs {
			r.HandedToCPU += run.Result.HandedToCPU
		}
		out[i] = r
	}
	return out
}

// checkRows is what -check judges of the rows.
func checkRows(runs []benchRun) []benchmethod.CheckRow {
	out := make([]benchmethod.CheckRow, len(runs))
	for i, r := range runs {
		out[i] = benchmethod.CheckRow{Name: r.Policy, Streams: r.Streams, Ratios: r.Ratios, Failed: r.Error != "",
			RoutedAsAuto: r.HandedToCPU == 0, RoutedAs: routedAs(r.Engines)}
	}
	return out
}

// routedAs is the engine that carried at least benchmethod.RoutedShare of
// a run's bytes, or "".
func routedAs(engines []benchEngine) string {
	var total uint64
	for _, e := range engines {
		total += e.Bytes
	}
	for _, e := range engines {
		if total > 0 && float64(e.Bytes) >= benchmethod.RoutedShare*float64(total) {
			return e.Engine
		}
	}
	return ""
}

// rangeString prints the lowest and highest MB/s of the successful runs
// (repeats holds 0 for a failed one), "-" for fewer than two.
func rangeString(repeats []float64) string {
	ok := slices.DeleteFunc(slices.Clone(repeats), func(x float64) bool { return x <= 0 })
	if len(ok) < 2 {
		return "-"
	}
	return fmt.Sprintf("%.1f–%.1f", slices.Min(ok), slices.Max(ok))
}

// countString prints a frame count short: 950, 1.2k, 3.4M.
func countString(n uint64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return strconv.FormatUint(n, 10)
}

func printBenchTable(w io.Writer, rep *benchReport) {
	what := benchmethod.Size(rep.Bytes) + " per run"
	if rep.Seconds > 0 {
		what = fmt.Sprintf("%gs per run", rep.Seconds)
	}
	where := "in-process on loopback"
	if rep.Mode == "remote" {
		where = "to server " + rep.Server
	}
	fmt.Fprintf(w, "offload bench: %s, %s, %s, frames up to %s, writes of %s", rep.Suite, where, what,
		benchmethod.Size(int64(rep.MaxFrame)), benchmethod.Size(int64(rep.WriteSize)))
	if rep.Repeat > 1 {
		fmt.Fprintf(w, ", median of %d rounds in rotated order", rep.Repeat)
		rounds := 0
		for _, r := range rep.Runs {
			rounds = max(rounds, len(r.Repeats))
		}
		if rounds > rep.Repeat {
			fmt.Fprintf(w, " (%d for the cells -check measured again)", rounds)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "offload %s %s %s, kernel %s, CPU %q (AES instructions: %s), load average %s\n\n",
		rep.Offload, rep.Go, rep.Platform, rep.Kernel, rep.CPU, yesNo(rep.CPUAES), rep.LoadAvg)
	// The skipped policies line up with the table's.
	width := len("policy")
	for _, r := range rep.Runs {
		width = max(width, len(r.Policy))
	}
	for _, s := range rep.Skipped {
		width = max(width, len(s.Policy))
	}
	t := benchmethod.Table{Columns: []benchmethod.Column{
		{Title: "policy", Min: width}, {Title: "streams", Right: true}, {Title: "MB/s", Right: true, Min: 9},
		{Title: "range", Right: true}, {Title: "CPU s/GB", Right: true}, {Title: "gain"}, {Title: "vs best"}, {Title: "frames per engine"},
	}}
	for _, r := range rep.Runs {
		if r.Error != "" {
			t.Add(r.Policy, strconv.Itoa(r.Streams), "failed: "+r.Error)
			continue
		}
		gain, best, cpu := "-", "-", "-"
		if r.Gain > 0 {
			gain = r.GainPaired.String()
		}
		if r.VsBestSingle > 0 {
			best = r.VsBestSinglePaired.String() + " " + r.VsBestSinglePolicy
		}
		if r.CPUPerGB > 0 {
			cpu = fmt.Sprintf("%.2f", r.CPUPerGB)
		}
		var frames []string
		for _, e := range r.Engines {
			if e.Frames > 0 || len(r.Engines) == 1 {
				s := e.Engine + " " + countString(e.Frames)
				if e.Fallbacks > 0 {
					s += fmt.Sprintf(" (%d redone in software)", e.Fallbacks)
				}
				frames = append(frames, s)
			}
		}
		note := ""
		if r.Policy == selector.SpecHybrid {
			note = fmt.Sprintf(" (%s handed to the CPU)", countString(r.HandedToCPU))
		}
		if !r.Verified {
			note += "  [unverified]"
		}
		t.Add(r.Policy, strconv.Itoa(r.Streams), fmt.Sprintf("%.1f", r.MBps), rangeString(r.Repeats), cpu, gain, best,
			strings.Join(frames, ", ")+note)
	}
	_ = t.Write(w)
	fmt.Fprintln(w, "\nMB/s: 10^6 payload bytes per second of wall time, of the median run; range: the lowest and highest over the rounds.")
	fmt.Fprintf(w, "CPU s/GB: CPU seconds (user+system) per 10^9 payload bytes, of %s.\n", rep.CPUScope)
	fmt.Fprintln(w, "gain: MB/s over software's; vs best (auto, hybrid): MB/s over that of the policy with the highest median MB/s")
	fmt.Fprintln(w, "among those that are not auto or hybrid (software included); both at the same stream count, and both medians")
	fmt.Fprintln(w, "of per-round ratios (a round runs every row once; a ratio pairs two runs of the same round). \"within spread\":")
	fmt.Fprintln(w, "the rounds fall on both sides of 1.00x (lowest–highest shown), so the median is noise, not a gain or a loss.")
	fmt.Fprintln(w, "frames per engine: frames each engine sealed or opened, both directions, every end measured here;")
	fmt.Fprintln(w, "handed to the CPU (hybrid): frames of a device's band that hybrid gave a CPU engine because the device was loaded, in all rounds.")
	if len(rep.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped (unavailable here):")
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  %-*s  %s\n", width, s.Policy, s.Reason)
		}
	}
	drivers := map[string]string{}
	var names []string
	for _, r := range rep.Runs {
		for _, e := range r.Engines {
			if _, ok := drivers[e.Engine]; !ok && e.Driver != "" {
				drivers[e.Engine] = e.Driver
				names = append(names, e.Engine)
			}
		}
	}
	if len(names) > 0 {
		fmt.Fprintln(w, "\nengine drivers:")
		for _, n := range names {
			fmt.Fprintf(w, "  %-*s  %s\n", width, n, drivers[n])
		}
	}
	for _, r := range rep.Runs {
		if r.IRQ == nil {
			continue
		}
		fmt.Fprintf(w, "\ninterrupts during %s, %s:", r.Policy, plural(r.Streams, "stream"))
		if len(r.IRQ) == 0 {
			fmt.Fprintln(w, " none moved")
			continue
		}
		fmt.Fprintln(w)
		keys := make([]string, 0, len(r.IRQ))
		for k := range r.IRQ {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return r.IRQ[keys[i]] > r.IRQ[keys[j]] })
		for i, k := range keys {
			if i == 6 {
				fmt.Fprintf(w, "  (%d more lines moved less)\n", len(keys)-i)
				break
			}
			fmt.Fprintf(w, "  %10d  %s\n", r.IRQ[k], k)
		}
	}
}
