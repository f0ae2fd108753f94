package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
)

func goals(rep *report) []goal {
	get := func(tool string, streams int) float64 {
		for _, r := range rep.Results {
			if r.Tool == tool && r.Streams == streams {
				return r.MBps
			}
		}
		return 0
	}
	var g []goal
	off := get("offload", 1)
	for _, c := range []struct {
		tool string
		want float64
	}{{"ssh -L", 1.5}, {"spiped", 4}} {
		if other := get(c.tool, 1); other > 0 && off > 0 {
			g = append(g, goal{What: "offload vs " + c.tool + ", 1 stream", Want: fmt.Sprintf(">= %.1fx", c.want),
				Got: fmt.Sprintf("%.2fx (%.0f vs %.0f MB/s)", off/other, off, other), Met: off/other >= c.want})
		}
	}
	for _, m := range rep.Memory {
		peak := max(m.Load.Peak, m.Load.RSS)
		g = append(g, goal{What: fmt.Sprintf("offload %s RSS, %d streams under load", m.End, m.Streams), Want: "< 32 MiB",
			Got: sizeString(peak) + " (VmHWM)", Met: peak < 32<<20})
	}
	return g
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

func sizeString(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func printReport(w io.Writer, rep *report) {
	fmt.Fprintf(w, "harness/compare, %s on %s: CPU %q x%d, load average %s before, %s after\n",
		rep.Date, rep.Host, rep.CPU, rep.CPUs, rep.LoadAvg, rep.LoadEnd)
	mode := fmt.Sprintf("median of %d", rep.Repeat)
	if rep.Quick {
		mode = "quick smoke run: speeds mean nothing"
	}
	fmt.Fprintf(w, "%s per run, checked with %s at the sink, %s\n\n", sizeString(rep.Bytes), rep.Digest, mode)
	for _, t := range rep.Tools {
		fmt.Fprintf(w, "  %-8s %s\n  %-8s %s\n", t.Name, t.How, "", t.Version)
	}
	var streams []int
	for _, r := range rep.Results {
		if !slices.Contains(streams, r.Streams) {
			streams = append(streams, r.Streams)
		}
	}
	if len(streams) > 0 {
		fmt.Fprintf(w, "\n%-8s", "MB/s")
		for _, n := range streams {
			fmt.Fprintf(w, " %12s", fmt.Sprintf("%d stream(s)", n))
		}
		fmt.Fprintln(w)
		for _, t := range rep.Tools {
			fmt.Fprintf(w, "%-8s", t.Name)
			for _, n := range streams {
				for _, r := range rep.Results {
					if r.Tool == t.Name && r.Streams == n {
						fmt.Fprintf(w, " %12.1f", r.MBps)
					}
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "\n%-8s", "CPU s/GB")
		for _, n := range streams {
			fmt.Fprintf(w, " %12s", fmt.Sprintf("%d stream(s)", n))
		}
		fmt.Fprintln(w, "   (the tool's processes, user+system, per 10^9 bytes)")
		for _, t := range rep.Tools {
			fmt.Fprintf(w, "%-8s", t.Name)
			for _, n := range streams {
				for _, r := range rep.Results {
					if r.Tool == t.Name && r.Streams == n {
						if r.CPUPerGB > 0 {
							fmt.Fprintf(w, " %12.2f", r.CPUPerGB)
						} else {
							fmt.Fprintf(w, " %12s", "-")
						}
					}
				}
			}
			fmt.Fprintln(w)
		}
	}
	if len(rep.Memory) > 0 {
		fmt.Fprintf(w, "\noffload memory   idle VmRSS   %d streams: max VmRSS   VmHWM   VmHWM after the speed runs\n", rep.Memory[0].Streams)
		for _, m := range rep.Memory {
			fmt.Fprintf(w, "  %-14s %10s   %21s   %8s   %s\n", m.End, sizeString(m.Idle.RSS), sizeString(m.Load.RSS), sizeString(m.Load.Peak), sizeString(m.PeakAll))
		}
	}
	if len(rep.Goals) > 0 {
		fmt.Fprintln(w, "\ngoals:")
		for _, g := range rep.Goals {
			met := "MISSED"
			if g.Met {
				met = "met"
			}
			fmt.Fprintf(w, "  %-6s %-44s want %-9s got %s\n", met, g.What, g.Want, g.Got)
		}
	}
}
