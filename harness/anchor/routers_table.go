package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/offload-dev/offload/harness/wgcompare"
)

// regimeTolerance is how far a run's guest timer rate may sit from the
// median of all runs (per router) and still count as the same regime: the
// one-guest rig saw boots at ~0.42 and at ~1.0, whose figures differ 1.4–2.6x.
const regimeTolerance = 0.15

// markRegimes marks every run whose guest timer rate, on either router,
// is off the median of all runs' (that router's) by over regimeTolerance,
// and gives the two medians. A run without a rate (no clock readings) is
// marked: its regime is unknown.
func markRegimes(runs []routerRun) [2]float64 {
	var med [2]float64
	for i := range med {
		var v []float64
		for _, r := range runs {
			if x := r.Router[i].rate(); x > 0 {
				v = append(v, x)
			}
		}
		med[i] = median(v)
	}
	for k := range runs {
		runs[k].Off = false
		for i := range med {
			x := runs[k].Router[i].rate()
			if x <= 0 || med[i] <= 0 || math.Abs(x/med[i]-1) > regimeTolerance {
				runs[k].Off = true
			}
		}
	}
	return med
}

// routerRow is one path's pooled per-router figures (in-regime runs only).
type routerRow struct {
	name, label string
	kind        string
	runs, off   int
	per         [2]float64 // median MB per qemu CPU second, A and B
	vcpu        [2]float64 // median MB per vCPU second
	busier      float64    // median MB per CPU second of the busier router
	byBoot      map[int]float64
	rate        [2]float64 // median timer rate
	kicked      int
}

// poolRouters groups in-regime runs by path, in the paths' table order.
func poolRouters(runs []routerRun) []*routerRow {
	by := map[string]*routerRow{}
	type acc struct {
		per, vcpu, rate [2][]float64
		busier          []float64
		boot            map[int][]float64
	}
	accs := map[string]*acc{}
	for _, r := range runs {
		w := by[r.Name]
		if w == nil {
			label, kind := r.Name, ""
			if p, ok := wgcompare.PathByName(r.Name); ok {
				label, kind = p.Label, p.Kind
			}
			if kind == "plain" {
				label = "plain routing through both routers"
			}
			w = &routerRow{name: r.Name, label: label, kind: kind, byBoot: map[int]float64{}}
			by[r.Name] = w
			accs[r.Name] = &acc{boot: map[int][]float64{}}
		}
		if r.Off {
			w.off++
			continue
		}
		a := accs[r.Name]
		mb := float64(r.Bytes) / 1e6
		busy := 0.0
		for i, c := range r.Router {
			if c.QemuS > 0 {
				a.per[i] = append(a.per[i], mb/c.QemuS)
			}
			if c.VCPUS > 0 {
				a.vcpu[i] = append(a.vcpu[i], mb/c.VCPUS)
			}
			a.rate[i] = append(a.rate[i], c.rate())
			busy = max(busy, c.QemuS)
			if c.Kicks > 0 {
				w.kicked++
			}
		}
		if busy > 0 {
			a.busier = append(a.busier, mb/busy)
			a.boot[r.Boot] = append(a.boot[r.Boot], mb/busy)
		}
		w.runs++
	}
	for name, w := range by {
		a := accs[name]
		for i := range 2 {
			w.per[i], w.vcpu[i], w.rate[i] = median(a.per[i]), median(a.vcpu[i]), median(a.rate[i])
		}
		w.busier = median(a.busier)
		for b, v := range a.boot {
			w.byBoot[b] = median(v)
		}
	}
	return inPathOrder(by)
}

// goal is one of issue 28's per-router goals: path's busier-router
// figure over anchor's, at least min.
type goal struct {
	what   string
	paths  []string // the best of these
	anchor string
	min    float64
}

var routerGoals = []goal{
	{"offload with the device ≥ 1.0x kernel WireGuard", []string{"afalg-64k", "cryptodev-64k"}, wgcompare.WireGuard, 1.0},
	{"offload with the device's cost ≤ 1.1x the two-relay floor's", []string{"afalg-64k", "cryptodev-64k"}, wgcompare.Relay2, 1 / 1.1},
	{"offload with the device ≥ 2x ssh -L", []string{"afalg-64k", "cryptodev-64k"}, wgcompare.SSH, 2.0},
	{"offload with the device ≥ 1.5x IPsec on the device", []string{"afalg-64k", "cryptodev-64k"}, wgcompare.IPsec, 1.5},
	{"offload in software ≥ 0.35x kernel WireGuard", []string{"ctr-sw-64k", "cbc-sw-64k"}, wgcompare.WireGuard, 0.35},
}

// writeRouterTable prints the per-router table in Markdown: the timer
// regime first, then each path's cost on A, on B and on the busier of the
// two (the figure every ratio is taken on), then the goals.
func writeRouterTable(w io.Writer, runs []routerRun, boots int) {
	var ok []routerRun
	for _, r := range runs {
		if r.Err != "" {
			fmt.Fprintf(w, "- FAILED, out of the figures: boot %d round %d %s: %s\n", r.Boot+1, r.Round+1, r.Name, firstLine(r.Err))
			continue
		}
		ok = append(ok, r)
	}
	runs = ok
	med := markRegimes(runs)
	off := 0
	var rates [2][]float64
	for _, r := range runs {
		if r.Off {
			off++
			fmt.Fprintf(w, "- marked, another regime: boot %d round %d %s (timer A %.2f, B %.2f)\n", r.Boot+1, r.Round+1, r.Name, r.Router[0].rate(), r.Router[1].rate())
			continue
		}
		for i := range rates {
			rates[i] = append(rates[i], r.Router[i].rate())
		}
	}
	fmt.Fprintf(w, "Regime: guest timer rate (guest clock / host clock over each run) A median %.3f (%s), B median %.3f (%s); %d of %d runs in another regime (over ±%.0f %% off), kept out of the figures\n\n",
		med[0], span(rates[0]), med[1], span(rates[1]), off, len(runs), 100*regimeTolerance)
	rows := poolRouters(runs)
	by := map[string]*routerRow{}
	for _, r := range rows {
		by[r.name] = r
	}
	vs := func(r *routerRow, a string) string {
		if x := by[a]; x != nil && x.busier > 0 && r.busier > 0 {
			return fmt.Sprintf("%.2f", r.busier/x.busier)
		}
		return "–"
	}
	fmt.Fprintln(w, "| path | runs | A (encrypt) MB per qemu CPU s | B (decrypt) | busier router | × WireGuard | per boot | × relay floor | × ssh -L | × IPsec (device) | A / B MB per vCPU s |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|")
	for _, r := range rows {
		perBoot := "–"
		if wg := by[wgcompare.WireGuard]; wg != nil {
			perBoot = perBootCell(boots, r.byBoot, wg.byBoot)
		}
		label := r.label
		if r.off > 0 {
			label += fmt.Sprintf(" (%d run(s) marked off-regime)", r.off)
		}
		if r.kicked > 0 {
			label += fmt.Sprintf(" (%d run(s) kicked out of a stall)", r.kicked)
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %.2f | %.2f | %s | %s | %s | %s | %s | %.1f / %.1f |\n", label, r.runs, r.per[0], r.per[1], r.busier,
			vs(r, wgcompare.WireGuard), perBoot, vs(r, wgcompare.Relay2), vs(r, wgcompare.SSH), vs(r, wgcompare.IPsec), r.vcpu[0], r.vcpu[1])
	}
	fmt.Fprintln(w)
	if p, wg := by[wgcompare.Plaintext], by[wgcompare.WireGuard]; p != nil && wg != nil && wg.busier > 0 {
		fmt.Fprintf(w, "plain routing is %.2fx WireGuard per router (the rig's ceiling); ", p.busier/wg.busier)
	}
	if fl, wg := by[wgcompare.Relay2], by[wgcompare.WireGuard]; fl != nil && wg != nil && wg.busier > 0 {
		fmt.Fprintf(w, "the relay floor is %.2fx WireGuard per router (no user-space tunnel can beat its floor)", fl.busier/wg.busier)
	}
	fmt.Fprintln(w)
	for _, l := range goalLines(by) {
		fmt.Fprintln(w, l)
	}
	writeGuestSplit(w, runs)
	fmt.Fprintln(w, "\nMB per qemu CPU s: 10^6 payload bytes per second of that router's qemu process's CPU (utime+stime, all threads), "+
		"median over the in-regime runs of every boot; busier router: per run, bytes over the larger of A's and B's qemu CPU, median; "+
		"× X: X's cost per byte over this row's, on the busier router (above 1 is cheaper than X); per boot: × WireGuard in each boot; "+
		"MB per vCPU s: the same by the vCPU thread alone (the guest's instructions; the rest of qemu's CPU is device and I/O emulation).")
}

// writeGuestSplit prints where each router's guest CPU went, by the
// guest's own /proc/stat (shares of its ticks over the in-regime runs):
// user space (the tunnel's processes), kernel, softirq (the network stack,
// the crypto completions), hard interrupts and idle. Nothing when the
// spans have no guest ticks (older runs).
func writeGuestSplit(w io.Writer, runs []routerRun) {
	type acc struct {
		name   string
		shares [2][5][]float64
	}
	by := map[string]*acc{}
	seen := false
	for _, r := range runs {
		if r.Off {
			continue
		}
		if by[r.Name] == nil {
			by[r.Name] = &acc{name: r.Name}
		}
		for i, c := range r.Router {
			g := c.Guest
			total := float64(g.User + g.Sys + g.Softirq + g.IRQ + g.Idle)
			if total <= 0 {
				continue
			}
			seen = true
			for k, v := range []int64{g.User, g.Sys, g.Softirq, g.IRQ, g.Idle} {
				by[r.Name].shares[i][k] = append(by[r.Name].shares[i][k], 100*float64(v)/total)
			}
		}
	}
	if !seen {
		return
	}
	fmt.Fprintln(w, "\nWhere each router's CPU went, by the guest's /proc/stat (median % of its ticks: user / kernel / softirq / irq / idle):")
	fmt.Fprintln(w, "\n| path | router A (encrypt) | router B (decrypt) |\n|---|---|---|")
	for _, a := range inPathOrder(by) {
		var cells [2]string
		for i := range cells {
			var v []string
			for k := range 5 {
				v = append(v, fmt.Sprintf("%.0f", median(a.shares[i][k])))
			}
			cells[i] = strings.Join(v, " / ")
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", a.name, cells[0], cells[1])
	}
}

// goalLines says, for each goal, met or not with the figure.
func goalLines(by map[string]*routerRow) []string {
	var out []string
	for _, g := range routerGoals {
		a := by[g.anchor]
		best, bestName := 0.0, ""
		for _, p := range g.paths {
			if r := by[p]; r != nil && a != nil && a.busier > 0 && r.busier/a.busier > best {
				best, bestName = r.busier/a.busier, p
			}
		}
		if bestName == "" {
			out = append(out, fmt.Sprintf("- %s: not measured in this run", g.what))
			continue
		}
		verdict := "met"
		if best < g.min {
			verdict = "NOT met"
		}
		out = append(out, fmt.Sprintf("- %s: %s (%s %.2fx %s)", g.what, verdict, bestName, best, g.anchor))
	}
	return out
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// span is "min–max" of v, or "–".
func span(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f–%.3f", slices.Min(v), slices.Max(v))
}
