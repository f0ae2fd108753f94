package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/offload-dev/offload/measure/method"
	"github.com/offload-dev/offload/measure/ratio"
)

// overhead is an offload tool's CPU s/GB beyond its crypto floor at one
// stream count, beside socat's CPU s/GB there.
type overhead struct {
	Tool     string  `json:"tool"`
	Streams  int     `json:"streams"`
	ToolCPU  float64 `json:"tool_cpu_s_per_gb"`
	Floor    float64 `json:"floor_cpu_s_per_gb"`
	Overhead float64 `json:"overhead_cpu_s_per_gb"` // ToolCPU - Floor
	Socat    float64 `json:"socat_cpu_s_per_gb"`
}

// overheads subtracts each offload tool's floor from its CPU s/GB at
// every stream count measured.
func overheads(rep *report) []overhead {
	var out []overhead
	for _, f := range rep.Floors {
		for _, r := range rep.Results {
			if r.Tool != f.Tool {
				continue
			}
			o := overhead{Tool: r.Tool, Streams: r.Streams, ToolCPU: r.CPU.Total(), Floor: f.CPU.Total()}
			o.Overhead = o.ToolCPU - o.Floor
			if s, ok := rep.result(toolSocat, r.Streams); ok {
				o.Socat = s.CPU.Total()
			}
			out = append(out, o)
		}
	}
	return out
}

// result is the result of tool at streams, if measured.
func (rep *report) result(tool string, streams int) (result, bool) {
	for _, r := range rep.Results {
		if r.Tool == tool && r.Streams == streams {
			return r, true
		}
	}
	return result{}, false
}

// goalStreams are the stream counts the goals name.
var goalStreams = []int{1, 8}

// goalRSS is the bound on each offload end's resident memory with
// 100 streams on the default config.
const goalRSS = 24 << 20

// goals evaluates the data path's goals (issue 11) on the report: one
// line per goal and stream count, not measured where the run lacks it.
func goals(rep *report) []goal {
	var g []goal
	notMeasured := func(what, want string) goal {
		return goal{What: what, Want: want, Got: "not measured in this run"}
	}
	// ratio goals: offload's MB/s at least min times the other tool's.
	faster := func(off, other string, min float64) {
		for _, n := range goalStreams {
			what, want := fmt.Sprintf("%s vs %s MB/s, %d stream(s)", off, other, n), fmt.Sprintf(">= %.1fx", min)
			a, ok1 := rep.result(off, n)
			b, ok2 := rep.result(other, n)
			if !ok1 || !ok2 || b.MBps <= 0 {
				g = append(g, notMeasured(what, want))
				continue
			}
			x := pairedMBps(a, b)
			g = append(g, goal{What: what, Want: want, Got: fmt.Sprintf("%s (%.0f vs %.0f MB/s)", x, a.MBps, b.MBps), Met: x.Median >= min, Measured: true})
		}
	}
	// 1. aes-256-ctr-hmac-sha256 against ssh -L aes256-ctr/hmac-sha2-256:
	// faster, and cheaper per byte (both ends against sshd and ssh).
	faster(toolOffload, toolSSH, 1.5)
	for _, n := range goalStreams {
		what, want := fmt.Sprintf("%s vs %s CPU s/GB, %d stream(s)", toolOffload, toolSSH, n), "<= 0.60x"
		a, ok1 := rep.result(toolOffload, n)
		b, ok2 := rep.result(toolSSH, n)
		if !ok1 || !ok2 || b.CPU.Total() <= 0 {
			g = append(g, notMeasured(what, want))
			continue
		}
		x := ratio.Of(ratio.Pairs(cpuTotals(a.RunsCPU), cpuTotals(b.RunsCPU)))
		g = append(g, goal{What: what, Want: want, Got: fmt.Sprintf("%s (%.2f vs %.2f s/GB)", x, a.CPU.Total(), b.CPU.Total()), Met: x.Rounds > 0 && x.Median <= 0.6, Measured: true})
	}
	// 2. aes-256-ctr-gmac against ssh -L aes128-gcm@openssh.com.
	faster(toolOffloadGMAC, toolSSHGCM, 1.2)
	// 3. The tunnel's CPU beyond its crypto no more than a plaintext
	// relay's.
	for _, ot := range offloadTools {
		for _, n := range goalStreams {
			what, want := fmt.Sprintf("%s CPU beyond crypto, %d stream(s)", ot.name, n), "<= socat"
			i := slices.IndexFunc(rep.Overheads, func(o overhead) bool { return o.Tool == ot.name && o.Streams == n })
			if i < 0 || rep.Overheads[i].Socat <= 0 {
				g = append(g, notMeasured(what, want))
				continue
			}
			o := rep.Overheads[i]
			g = append(g, goal{What: what, Want: want, Met: o.Overhead <= o.Socat, Measured: true,
				Got: fmt.Sprintf("%.2f vs %.2f s/GB (%.2f - floor %.2f)", o.Overhead, o.Socat, o.ToolCPU, o.Floor)})
		}
	}
	// Issue 28's x86 goals: at least ssh's MB/s on one stream and 1.5x on
	// eight, at no more CPU per byte.
	for _, n := range goalStreams {
		want := 1.0
		if n > 1 {
			want = 1.5
		}
		what := fmt.Sprintf("x86 (issue 28): %s vs %s MB/s, %d stream(s)", toolOffload, toolSSH, n)
		a, ok1 := rep.result(toolOffload, n)
		b, ok2 := rep.result(toolSSH, n)
		if !ok1 || !ok2 || b.MBps <= 0 {
			g = append(g, notMeasured(what, fmt.Sprintf(">= %.1fx", want)))
		} else {
			x := pairedMBps(a, b)
			g = append(g, goal{What: what, Want: fmt.Sprintf(">= %.1fx", want), Got: fmt.Sprintf("%s (%.0f vs %.0f MB/s)", x, a.MBps, b.MBps), Met: x.Median >= want, Measured: true})
		}
		what = fmt.Sprintf("x86 (issue 28): %s vs %s CPU s/GB, %d stream(s)", toolOffload, toolSSH, n)
		if !ok1 || !ok2 || b.CPU.Total() <= 0 {
			g = append(g, notMeasured(what, "<= 1.00x"))
			continue
		}
		x := ratio.Of(ratio.Pairs(cpuTotals(a.RunsCPU), cpuTotals(b.RunsCPU)))
		g = append(g, goal{What: what, Want: "<= 1.00x", Got: fmt.Sprintf("%s (%.2f vs %.2f s/GB)", x, a.CPU.Total(), b.CPU.Total()), Met: x.Rounds > 0 && x.Median <= 1, Measured: true})
	}
	// The harness's earlier goal against spiped, on one stream.
	if a, ok := rep.result(toolOffload, 1); ok {
		if b, ok := rep.result(toolSpiped, 1); ok && b.MBps > 0 {
			x := pairedMBps(a, b)
			g = append(g, goal{What: "offload vs spiped MB/s, 1 stream(s)", Want: ">= 4.0x", Measured: true,
				Got: fmt.Sprintf("%s (%.0f vs %.0f MB/s)", x, a.MBps, b.MBps), Met: x.Median >= 4})
		}
	}
	// 5. Memory: each end under load, the most of sampled VmRSS and VmHWM.
	for _, m := range rep.Memory {
		peak := max(m.Load.Peak, m.Load.RSS)
		g = append(g, goal{What: fmt.Sprintf("offload %s RSS, %d streams under load", m.End, m.Streams), Want: "<= " + method.Size(goalRSS),
			Got: method.Size(peak) + " (VmHWM)", Met: peak <= goalRSS, Measured: true})
	}
	return g
}

// pairedMBps is a's MB/s over b's round by round (a result's Runs are in
// round order, and every tool runs once per round): the ratio goals judge
// its median and print it through ratio.Paired, which shows the spread
// where the rounds disagree on which tool is ahead.
func pairedMBps(a, b result) ratio.Paired { return ratio.Of(ratio.Pairs(a.Runs, b.Runs)) }

func cpuTotals(cs []cpuPerGB) []float64 {
	out := make([]float64, len(cs))
	for i, c := range cs {
		out[i] = c.Total()
	}
	return out
}

// status is a goal's word in the table.
func (g goal) status() string {
	switch {
	case !g.Measured:
		return "n/a"
	case g.Met:
		return "met"
	}
	return "MISSED"
}

// nameWidth fits the longest tool name ("offload gmac").
const nameWidth = 12

func printReport(w io.Writer, rep *report) {
	fmt.Fprintf(w, "harness/compare, %s on %s: CPU %q x%d, load average %s before, %s after\n",
		rep.Date, rep.Host, rep.CPU, rep.CPUs, rep.LoadAvg, rep.LoadEnd)
	mode := fmt.Sprintf("median of %d round(s); each round runs every tool once, in an order that turns from round to round", rep.Repeat)
	if rep.Quick {
		mode = "quick smoke run: speeds mean nothing"
	}
	check := "checked with " + rep.Digest + " at the sink"
	if rep.Load == loadIperf {
		check = "iperf3's client to iperf3's server, unchecked"
	}
	fmt.Fprintf(w, "%s per run, %s, %s\n\n", method.Size(rep.Bytes), check, mode)
	for _, t := range rep.Tools {
		fmt.Fprintf(w, "  %-*s %s\n  %-*s %s\n", nameWidth, t.Name, t.How, nameWidth, "", t.Version)
	}
	var streams []int
	for _, r := range rep.Results {
		if !slices.Contains(streams, r.Streams) {
			streams = append(streams, r.Streams)
		}
	}
	if len(streams) > 0 {
		printTables(w, rep, streams)
	}
	if len(rep.Floors) > 0 {
		fmt.Fprintf(w, "\ncrypto floor, CPU s/GB of sealing and opening each byte once, %d-byte frames:\n", rep.Floors[0].FrameBytes)
		for _, l := range wrap(floorIncludes, 100) {
			fmt.Fprintf(w, "  %s\n", l)
		}
		t := method.Table{Sep: " ", Columns: []method.Column{{Title: "floor", Min: nameWidth}, {Title: "suite", Min: 26},
			{Title: "total", Right: true, Min: 7}, {Title: "user", Right: true, Min: 6}, {Title: "sys", Right: true, Min: 6},
			{Title: "cipher", Right: true, Min: 7}, {Title: "MAC", Right: true, Min: 6}, {Title: "copies (not in total)", Sep: "   "}}}
		for _, f := range rep.Floors {
			t.Add(f.Tool, f.Suite, fmt.Sprintf("%.2f", f.CPU.Total()), fmt.Sprintf("%.2f", f.CPU.User), fmt.Sprintf("%.2f", f.CPU.Sys),
				fmt.Sprintf("%.2f", f.Cipher), fmt.Sprintf("%.2f", f.MAC), fmt.Sprintf("%.2f", f.Copies))
		}
		if f := rep.SSLFloor; f != nil {
			t.Add("openssl", "aes-256-ctr + hmac(sha256)", fmt.Sprintf("%.2f", f.Total()), fmt.Sprintf("%.2f", f.Total()), "",
				fmt.Sprintf("%.2f", f.Cipher), fmt.Sprintf("%.2f", f.MAC), "(ssh's libcrypto: "+f.How+")")
		}
		_ = t.Write(w)
	}
	if len(rep.Overheads) > 0 && len(streams) > 0 {
		fmt.Fprintln(w)
		t := gridTable("beyond crypto", streams)
		t.Columns = append(t.Columns, method.Column{Title: "(CPU s/GB: the tool's minus its floor; socat's whole)", Sep: "   "})
		for _, ot := range offloadTools {
			row := []string{ot.name}
			for _, n := range streams {
				cell := "-"
				for _, o := range rep.Overheads {
					if o.Tool == ot.name && o.Streams == n {
						cell = fmt.Sprintf("%.2f", o.Overhead)
					}
				}
				row = append(row, cell)
			}
			t.Add(append(row, "")...)
		}
		row := []string{toolSocat}
		for _, n := range streams {
			cell := "-"
			if r, ok := rep.result(toolSocat, n); ok {
				cell = fmt.Sprintf("%.2f", r.CPU.Total())
			}
			row = append(row, cell)
		}
		t.Add(append(row, "")...)
		_ = t.Write(w)
	}
	if len(rep.Memory) > 0 {
		fmt.Fprintf(w, "\noffload memory   idle VmRSS   %d streams: max VmRSS   VmHWM   VmHWM after the speed runs\n", rep.Memory[0].Streams)
		for _, m := range rep.Memory {
			fmt.Fprintf(w, "  %-14s %10s   %21s   %8s   %s\n", m.End, method.Size(m.Idle.RSS), method.Size(m.Load.RSS), method.Size(m.Load.Peak), method.Size(m.PeakAll))
		}
	}
	if len(rep.Goals) > 0 {
		fmt.Fprintln(w, "\ngoals (issue 11, and issue 28's for x86; MISSED does not fail the run):")
		for _, g := range rep.Goals {
			fmt.Fprintf(w, "  %-6s %-50s want %-11s got %s\n", g.status(), g.What, g.Want, g.Got)
		}
	}
	// Like the goals, left out of a -quick run: 4 MiB runs at the CPU
	// clock's 10 ms ticks say nothing about speed or cost per byte.
	if ls := limits(rep); len(ls) > 0 && !rep.Quick {
		fmt.Fprintln(w, "\nwhat this host allows (the relay floor: two bare relays, no crypto; paired per round):")
		for _, l := range ls {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
	if len(rep.Profiles) > 0 {
		fmt.Fprintln(w, "\nCPU profiles of the offload ends, start to exit (setup, memory run, speed runs):")
		for _, p := range rep.Profiles {
			fmt.Fprintf(w, "  go tool pprof -top %s\n", p.File)
		}
		for _, p := range rep.Profiles {
			if p.Top == "" {
				continue
			}
			fmt.Fprintf(w, "\n%s %s (%s): go tool pprof -top -nodecount=15 %s\n", p.Tool, p.End, p.Suite, p.File)
			for _, l := range strings.Split(p.Top, "\n") {
				fmt.Fprintf(w, "  %s\n", l)
			}
		}
	}
}

// gridTable is a table of a figure per tool (rows) and stream count
// (columns), titled by what it shows.
func gridTable(what string, streams []int) method.Table {
	t := method.Table{Sep: " ", Columns: []method.Column{{Title: what, Min: nameWidth}}}
	for _, n := range streams {
		t.Columns = append(t.Columns, method.Column{Title: fmt.Sprintf("%d stream(s)", n), Right: true, Min: 12})
	}
	return t
}

// printTables prints MB/s and CPU s/GB (total, user, sys) per tool and
// stream count.
func printTables(w io.Writer, rep *report, streams []int) {
	fmt.Fprintln(w)
	mbps := gridTable("MB/s", streams)
	for _, t := range rep.Tools {
		row := []string{t.Name}
		for _, n := range streams {
			cell := "-"
			if r, ok := rep.result(t.Name, n); ok {
				cell = fmt.Sprintf("%.1f", r.MBps)
			}
			row = append(row, cell)
		}
		mbps.Add(row...)
	}
	_ = mbps.Write(w)

	// Three columns per stream count under one heading: the heading line
	// is printed here, the table's titles are total, user and sys.
	fmt.Fprintf(w, "\n%-*s", nameWidth, "CPU s/GB")
	for _, n := range streams {
		fmt.Fprintf(w, "   %-20s", fmt.Sprintf("%d stream(s)", n))
	}
	fmt.Fprintln(w, "   (the tool's processes and children, per 10^9 bytes)")
	cpu := method.Table{Sep: " ", Columns: []method.Column{{Min: nameWidth}}}
	for range streams {
		cpu.Columns = append(cpu.Columns, method.Column{Title: "total", Right: true, Min: 6, Sep: "   "},
			method.Column{Title: "user", Right: true, Min: 6}, method.Column{Title: "sys", Right: true, Min: 6})
	}
	for _, t := range rep.Tools {
		row := []string{t.Name}
		for _, n := range streams {
			r, ok := rep.result(t.Name, n)
			if !ok || r.CPU.Total() <= 0 {
				row = append(row, "-", "", "")
				continue
			}
			row = append(row, fmt.Sprintf("%.2f", r.CPU.Total()), fmt.Sprintf("%.2f", r.CPU.User), fmt.Sprintf("%.2f", r.CPU.Sys))
		}
		cpu.Add(row...)
	}
	_ = cpu.Write(w)
}

// wrap breaks text into lines of at most width bytes, at spaces (a longer
// word gets a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// limits says what the relay floor allows against ssh -L at each stream
// count measured: the most any two-process user-space tunnel gets on
// this host with the same load generator and sink, set beside what the
// issue asks of offload; and offload's crypto floor beside OpenSSL's.
func limits(rep *report) []string {
	var out []string
	for _, n := range goalStreams {
		fl, ok1 := rep.result(toolRelay, n)
		ssh, ok2 := rep.result(toolSSH, n)
		if !ok1 || !ok2 || ssh.MBps <= 0 || fl.MBps <= 0 {
			continue
		}
		want := 1.0
		if n > 1 {
			want = 1.5
		}
		x := pairedMBps(fl, ssh)
		verdict := "reaches it"
		if x.Median < want {
			verdict = fmt.Sprintf("does NOT reach it: %.1fx ssh is past what any two-process user-space tunnel gets here", want)
		}
		out = append(out, fmt.Sprintf("%d stream(s): relay floor %s ssh -L's MB/s (%.0f vs %.0f), %.2f CPU s/GB; %.1fx ssh is %.0f MB/s: the floor %s",
			n, x, fl.MBps, ssh.MBps, fl.CPU.Total(), want, want*ssh.MBps, verdict))
		off, ok := rep.result(toolOffload, n)
		if sl, ok2 := rep.result(toolSealed, n); ok2 && sl.MBps > 0 {
			// The simplest tunnel with offload's crypto: what Go's crypto
			// and sockets cost against OpenSSH's, and what offload's
			// design costs beyond them.
			line := fmt.Sprintf("%d stream(s): the simplest tunnel with offload's crypto (relay sealed) %s ssh -L's MB/s, %s its CPU s/GB (%.2f vs %.2f)",
				n, pairedMBps(sl, ssh), ratio.Of(ratio.Pairs(cpuTotals(sl.RunsCPU), cpuTotals(ssh.RunsCPU))), sl.CPU.Total(), ssh.CPU.Total())
			if ok {
				line += fmt.Sprintf("; offload %s its MB/s, %s its CPU s/GB",
					pairedMBps(off, sl), ratio.Of(ratio.Pairs(cpuTotals(off.RunsCPU), cpuTotals(sl.RunsCPU))))
			}
			out = append(out, line)
		}
		if !ok {
			continue
		}
		c := ratio.Of(ratio.Pairs(cpuTotals(off.RunsCPU), cpuTotals(fl.RunsCPU)))
		out = append(out, fmt.Sprintf("%d stream(s): offload %s the relay floor's MB/s, %s its CPU s/GB (%.2f vs %.2f)",
			n, pairedMBps(off, fl), c, off.CPU.Total(), fl.CPU.Total()))
		load := ssh.LoadCPU.Total()
		if load <= 0 || rep.CPUs <= 0 {
			continue
		}
		// Where the host's CPU is what limits, MB/s goes as one over the
		// CPU per byte of the tool and the load together.
		busy := func(r result) float64 { return (r.CPU.Total() + r.LoadCPU.Total()) * r.MBps / 1e3 / float64(rep.CPUs) }
		need := (ssh.CPU.Total()+load)/want - load
		if need < 0 {
			need = 0 // the load alone costs more than the ratio leaves
		}
		line := fmt.Sprintf("%d stream(s): the host's CPU busy with the tool and the load: ssh -L %.0f%%, offload %.0f%%, relay floor %.0f%%; "+
			"where the CPU limits, %.1fx ssh needs offload at <= %.2f CPU s/GB ((ssh %.2f + load %.2f) / %.1f - load)",
			n, 100*busy(ssh), 100*busy(off), 100*busy(fl), want, need, ssh.CPU.Total(), load, want)
		if len(rep.Floors) > 0 {
			// The least a tunnel with offload's crypto can cost per byte
			// here, and so the most MB/s it gets with all of the host's
			// CPUs on it and the load.
			least := fl.CPU.Total() + rep.Floors[0].CPU.Total()
			most := float64(rep.CPUs) * 1e3 / (least + load)
			line += fmt.Sprintf("; the relay floor plus offload's crypto floor is %.2f, so with every CPU busy a tunnel with offload's crypto gets at most %.0f MB/s (%.2fx ssh)",
				least, most, most/ssh.MBps)
		}
		out = append(out, line)
	}
	if f := rep.SSLFloor; f != nil && len(rep.Floors) > 0 && f.Total() > 0 {
		of := rep.Floors[0]
		out = append(out, fmt.Sprintf("crypto per byte (seal and open): %s %.2f s/GB (cipher %.2f, MAC %.2f) against OpenSSL's %.2f (%.2f, %.2f): %.2fx",
			of.Suite, of.CPU.Total(), of.Cipher, of.MAC, f.Total(), f.Cipher, f.MAC, of.CPU.Total()/f.Total()))
	}
	return out
}
