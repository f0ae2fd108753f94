package main

// The report of offload bench: its JSON document, the rows made from the
// cells' runs, and the table. The figures themselves (medians, paired
// ratios, checks) are measure/method's.

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/measure/method"
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
	CPUScope string `json:"cpu_scope"`
	// KernelEngines are the engines besides software this machine has
	// for the suite's cipher (engine.All): none means every policy runs
	// in software, which the verdict says.
	KernelEngines []string `json:"kernel_engines"`
	// Profile is the selector profile auto and hybrid read, and
	// ProfileState what they did with it: "read" (it was fresh) or
	// "measured" (missing or stale: measured for this run; bench leaves
	// Profile as it was). SavedProfile is -save-profile's file.
	Profile      string           `json:"profile,omitempty"`
	ProfileState string           `json:"profile_state,omitempty"`
	SavedProfile string           `json:"saved_profile,omitempty"`
	Runs         []benchRun       `json:"runs"`
	Skipped      []method.Skipped `json:"skipped,omitempty"`
	// Tolerance and Checks are -check's: the final result of every check.
	Tolerance float64        `json:"tolerance,omitempty"`
	Checks    []method.Check `json:"checks,omitempty"`
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
	method.Ratios
	// RoutedAs (a row's only) is the engine that carried at least
	// method.RoutedShare of the bytes when that is not the policy's
	// own: auto that sent every frame to software routed as software,
	// and its "gain" is noise between two runs of the same thing.
	RoutedAs string `json:"routed_as,omitempty"`
	// HandedToCPU (hybrid only) is how many frames the policy gave a CPU
	// engine although their band's device would have had them under auto:
	// in a run, and in a reported row over all of its rounds.
	HandedToCPU uint64            `json:"hybrid_handed_to_cpu,omitempty"`
	Verified    bool              `json:"verified"`
	Engines     []benchEngine     `json:"engines"`
	IRQ         map[string]uint64 `json:"irq_delta,omitempty"`
	Error       string            `json:"error,omitempty"`
}

// Rate and Failure make a run a method.Result.
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
var benchRoles = method.Roles{Baseline: engine.SoftwareName, Auto: selector.SpecAuto, Hybrid: selector.SpecHybrid}

// benchCell is a policy at a stream count with its runs.
type benchCell = method.Cell[benchRun]

// summarize makes the report's rows, one per cell: the median run with
// the cell's Ratios, and what hybrid handed to the CPU in all its rounds.
func summarize(cells []*benchCell) []benchRun {
	out := make([]benchRun, len(cells))
	for i, c := range cells {
		r := c.Median()
		r.Ratios = method.Compare(benchRoles, cells, c)
		if e := routedAs(r.Engines); e != r.Policy {
			r.RoutedAs = e
		}
		r.HandedToCPU = 0
		for _, run := range c.Runs {
			r.HandedToCPU += run.Result.HandedToCPU
		}
		out[i] = r
	}
	return out
}

// checkRows is what -check judges of the rows.
func checkRows(runs []benchRun) []method.CheckRow {
	out := make([]method.CheckRow, len(runs))
	for i, r := range runs {
		out[i] = method.CheckRow{Name: r.Policy, Streams: r.Streams, Ratios: r.Ratios, Failed: r.Error != "",
			RoutedAsAuto: r.HandedToCPU == 0, RoutedAs: routedAs(r.Engines)}
	}
	return out
}

// routedAs is the engine that carried at least method.RoutedShare of
// a run's bytes, or "".
func routedAs(engines []benchEngine) string {
	var total uint64
	for _, e := range engines {
		total += e.Bytes
	}
	for _, e := range engines {
		if total > 0 && float64(e.Bytes) >= method.RoutedShare*float64(total) {
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
	what := method.Size(rep.Bytes) + " per run"
	if rep.Seconds > 0 {
		what = fmt.Sprintf("%gs per run", rep.Seconds)
	}
	where := "in-process on loopback"
	if rep.Mode == "remote" {
		where = "to server " + rep.Server
	}
	fmt.Fprintf(w, "offload bench: %s, %s, %s, frames up to %s, writes of %s", rep.Suite, where, what,
		method.Size(int64(rep.MaxFrame)), method.Size(int64(rep.WriteSize)))
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
	t := method.Table{Columns: []method.Column{
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
		// A row that routed as a single-engine row did frame for frame
		// what that row did: its ratio to it is noise, not a gain.
		switch {
		case r.RoutedAs == "":
		case r.RoutedAs == benchRoles.Baseline:
			gain = "routed as " + r.RoutedAs
			if r.VsBestSinglePolicy == r.RoutedAs {
				best = "-"
			}
		case r.RoutedAs == r.VsBestSinglePolicy:
			best = "routed as " + r.RoutedAs
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
	fmt.Fprintf(w, "routed as E: %.0f%% or more of the row's bytes went to engine E, as in E's own row: no gain or loss is shown against it.\n", 100*method.RoutedShare)
	switch rep.ProfileState {
	case "measured":
		fmt.Fprintf(w, "\nprofile: %s was missing or stale: auto and hybrid measured this machine's engines for this run and left it as it was", rep.Profile)
		if rep.SavedProfile == "" {
			fmt.Fprintf(w, " (offload calibrate writes it; -save-profile FILE keeps this run's).\n")
		}
	case "read":
		fmt.Fprintf(w, "\nprofile: auto and hybrid used %s (delete it, or run offload calibrate, to measure again)", rep.Profile)
	}
	switch {
	case rep.SavedProfile != "":
		fmt.Fprintf(w, "; wrote the profile they used to %s (a config's profile: names it).\n", rep.SavedProfile)
	case rep.ProfileState == "read":
		fmt.Fprintln(w, ".")
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped (unavailable here):")
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  %-*s  %s\n", width, s.Policy, s.Reason)
		}
	}
	fmt.Fprintln(w)
	for _, l := range benchVerdict(rep) {
		fmt.Fprintln(w, l)
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

// benchVerdict says in words what the table comes to, per stream count:
// which policy is fastest and by how much over software, unless that is
// noise (within spread, or routed as software); first, when no kernel
// engine carried a frame, that every row ran in software.
func benchVerdict(rep *benchReport) []string {
	var out []string
	carried := false
	for _, r := range rep.Runs {
		for _, e := range r.Engines {
			carried = carried || e.Engine != engine.SoftwareName && e.Frames > 0
		}
	}
	switch {
	case len(rep.Runs) == 0:
		return nil
	case !carried && len(rep.KernelEngines) == 0:
		return []string{fmt.Sprintf("verdict: this machine has no kernel engine for %s (offload engines says why): every policy ran in software, "+
			"so the differences between rows are noise between runs of the same code, not gains.", rep.Suite)}
	case !carried:
		out = append(out, fmt.Sprintf("verdict: no kernel engine (%s) carried a frame: every row ran in software, so the differences between rows are noise, not gains.",
			strings.Join(rep.KernelEngines, ", ")))
		return out
	}
	var streams []int
	best := map[int]benchRun{}
	for _, r := range rep.Runs {
		if r.Error != "" {
			continue
		}
		b, ok := best[r.Streams]
		if !ok {
			streams = append(streams, r.Streams)
		}
		if !ok || r.MBps > b.MBps {
			best[r.Streams] = r
		}
	}
	sort.Ints(streams)
	for _, n := range streams {
		b := best[n]
		at := "verdict, " + plural(n, "stream") + ": "
		switch {
		case b.Policy == benchRoles.Baseline:
			out = append(out, at+"software is fastest; no engine gains here.")
		case b.RoutedAs == benchRoles.Baseline:
			out = append(out, at+b.Policy+" is fastest but routed as software: no gain.")
		case b.Gain == 0:
			out = append(out, fmt.Sprintf("%s%s is fastest at %.1f MB/s (no software row to compare with).", at, b.Policy, b.MBps))
		case b.GainPaired.Straddles():
			out = append(out, fmt.Sprintf("%s%s leads software by %s: no clear gain.", at, b.Policy, b.GainPaired))
		default:
			out = append(out, fmt.Sprintf("%s%s is fastest, %s software's MB/s.", at, b.Policy, b.GainPaired))
		}
	}
	return out
}
