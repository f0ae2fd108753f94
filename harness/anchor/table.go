package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/harness/wgcompare"
	"github.com/offload-dev/offload/measure/ratio"
)

// sample is one measured run as harness/vm's -spans file records it.
type sample struct {
	Boot  int
	Name  string
	Bytes int64
	QemuS float64
	VCPUS float64 // of QemuS, qemu's vCPU threads (0: not measured)
	HostS float64
	IRQ   int64
	Kicks int // console lines the guest wrote to release the run from a stall (rescue_kicks)
}

func (r sample) perCPU() float64 { return float64(r.Bytes) / 1e6 / r.QemuS }

// wall is the run's wall time without the idle settle the guest takes
// after the begin marker: kept in, it made every short run (plaintext's
// 0.3 s) look stalled.
func (r sample) wall() float64 { return max(r.HostS-wgcompare.MarkerSettle.Seconds(), 0) }

// median of positive figures (the middle two's mean when even).
func median(v []float64) float64 { return ratio.Of(v).Median }

// row is one path's pooled figures.
type row struct {
	path    wgcompare.Path
	runs    int
	perCPU  float64            // median MB per qemu CPU second over every run of every boot
	byBoot  map[int]float64    // the same per boot
	irqMB   float64            // median device interrupts per MB
	stalled int                // runs whose wall time per qemu CPU second was over twice their boot's median
	rescued int                // runs the guest's stall watch had to kick
	vs      map[string]float64 // × each anchor: its cost per byte over this row's
}

// pool groups runs by path and computes each row's medians and ratios.
func pool(runs []sample) []*row {
	var rows []*row // in the paths' order
	by := map[string]*row{}
	values := map[string][]float64{}
	boots := map[string]map[int][]float64{}
	irqs := map[string][]float64{}
	// A stalled run waited with the guest idle: its wall time per qemu CPU
	// second is over twice its boot's median. (A host busy with other work
	// stretches every run's wall time alike, so the boot's median is the
	// yardstick, not 1.)
	slack := map[int][]float64{}
	for _, r := range runs {
		if r.QemuS > 0 {
			slack[r.Boot] = append(slack[r.Boot], r.wall()/r.QemuS)
		}
	}
	bootSlack := map[int]float64{}
	for b, v := range slack {
		bootSlack[b] = median(v)
	}
	for _, r := range runs {
		if r.QemuS <= 0 || r.Bytes <= 0 {
			continue
		}
		if by[r.Name] == nil {
			p, ok := wgcompare.PathByName(r.Name)
			if !ok {
				p = wgcompare.Path{Name: r.Name, Label: r.Name}
			}
			by[r.Name] = &row{path: p, byBoot: map[int]float64{}, vs: map[string]float64{}}
			boots[r.Name] = map[int][]float64{}
		}
		w := by[r.Name]
		w.runs++
		if r.wall() > 2*bootSlack[r.Boot]*r.QemuS {
			w.stalled++
		}
		if r.Kicks > 0 {
			w.rescued++
		}
		values[r.Name] = append(values[r.Name], r.perCPU())
		boots[r.Name][r.Boot] = append(boots[r.Name][r.Boot], r.perCPU())
		irqs[r.Name] = append(irqs[r.Name], float64(r.IRQ)/(float64(r.Bytes)/1e6))
	}
	rows = inPathOrder(by)
	for name, w := range by {
		w.perCPU, w.irqMB = median(values[name]), median(irqs[name])
		for b, v := range boots[name] {
			w.byBoot[b] = median(v)
		}
	}
	for _, w := range rows {
		for _, a := range wgcompare.Anchors {
			if x := by[a]; x != nil {
				w.vs[a] = w.perCPU / x.perCPU
			}
		}
	}
	return rows
}

// inPathOrder lists by's rows in wgcompare.Paths' order, then the rows of
// names Paths does not know, by name.
func inPathOrder[T any](by map[string]T) []T {
	var rows []T
	for _, p := range wgcompare.Paths {
		if w, ok := by[p.Name]; ok {
			rows = append(rows, w)
		}
	}
	var others []string
	for name := range by {
		if _, ok := wgcompare.PathByName(name); !ok {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	for _, name := range others {
		rows = append(rows, by[name])
	}
	return rows
}

// perBootCell is a row's figure over WireGuard's in each boot, "a / b /
// c", with "–" for a boot that lacks either; "–" for one boot.
func perBootCell(boots int, row, wg map[int]float64) string {
	if boots < 2 {
		return "–"
	}
	var v []string
	for b := range boots {
		if x, ok := row[b]; ok && wg[b] > 0 {
			v = append(v, fmt.Sprintf("%.2f", x/wg[b]))
		} else {
			v = append(v, "–") // not measured in that boot
		}
	}
	return strings.Join(v, " / ")
}

// writeTable prints the pooled table in Markdown, then the notes that read
// it: the rig's ceiling (plaintext against WireGuard) and the cost beyond
// the relay floor.
func writeTable(w io.Writer, runs []sample, boots int) {
	rows := pool(runs)
	by := map[string]*row{}
	for _, r := range rows {
		by[r.path.Name] = r
	}
	ms := func(r *row) float64 { return 1000 / r.perCPU }
	var plainMS float64
	if p := by[wgcompare.Plaintext]; p != nil {
		plainMS = ms(p)
	}
	fmt.Fprintf(w, "| path | runs | MB per qemu CPU s | added ms/MB | × WireGuard | per boot | × relay floor | × ssh -L | × IPsec (device) | device irq/MB |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, r := range rows {
		added := "–"
		if plainMS > 0 && r.path.Name != wgcompare.Plaintext {
			added = fmt.Sprintf("%.1f", ms(r)-plainMS)
		}
		vs := func(a string) string {
			if v, ok := r.vs[a]; ok {
				return fmt.Sprintf("%.2f", v)
			}
			return "–"
		}
		perBoot := "–"
		if wg := by[wgcompare.WireGuard]; wg != nil {
			perBoot = perBootCell(boots, r.byBoot, wg.byBoot)
		}
		label := r.path.Label
		if r.stalled > 0 {
			label += fmt.Sprintf(" (%d of %d runs stalled)", r.stalled, r.runs)
		}
		if r.rescued > 0 {
			label += fmt.Sprintf(" (%d of %d runs kicked out of a stall)", r.rescued, r.runs)
		}
		fmt.Fprintf(w, "| %s | %d | %.2f | %s | %s | %s | %s | %s | %s | %s |\n", label, r.runs, r.perCPU, added,
			vs(wgcompare.WireGuard), perBoot, vs(wgcompare.Relay2), vs(wgcompare.SSH), vs(wgcompare.IPsec), strconv.FormatFloat(r.irqMB, 'f', 0, 64))
	}
	fmt.Fprintln(w)
	if p, wg := by[wgcompare.Plaintext], by[wgcompare.WireGuard]; p != nil && wg != nil {
		x := p.perCPU / wg.perCPU
		fmt.Fprintf(w, "plaintext is %.2fx WireGuard (the rig's ceiling; goal ≥ 4x, below it the load and sink pull every ratio toward 1)\n", x)
	}
	if fl := by[wgcompare.Relay2]; fl != nil && plainMS > 0 {
		floor := ms(fl) - plainMS
		fmt.Fprintf(w, "the relay floor adds %.1f ms/MB beyond plaintext; beyond that floor:", floor)
		for _, r := range rows {
			if r.path.Kind == "offload" || r.path.Kind == "ssh" {
				beyond := ms(r) - ms(fl)
				fmt.Fprintf(w, " %s %.1f ms/MB (%.2fx the floor's own);", r.path.Name, beyond, beyond/floor)
			}
		}
		fmt.Fprintln(w)
	}
	writeVCPU(w, runs)
	fmt.Fprintln(w, "MB per qemu CPU s: 10^6 payload bytes per second of the qemu process's CPU (utime+stime, all threads), "+
		"median over every run of every boot; added: ms of qemu CPU per MB beyond plaintext's; × X: X's cost per byte over "+
		"this row's (above 1 is cheaper than X); per boot: × WireGuard in each boot; device irq/MB: virtio interrupts "+
		"per MB in the guest; a stalled run took over twice its boot's median wall time per qemu CPU second (the guest waited idle); "+
		"a kicked run moved under 128 KiB in 3 s, so the guest wrote console lines until it moved again (a late virtio completion).")
}

// writeVCPU prints, where the spans have it, each path's cost by qemu's
// vCPU threads alone (the guest's instructions) and their share of
// qemu's CPU: the rest is qemu's device emulation and I/O threads, which
// the host's spare cores let run beside the guest (polling), so a path
// with many device requests costs more on a quieter host.
func writeVCPU(w io.Writer, runs []sample) {
	var have []sample
	for _, r := range runs {
		if r.VCPUS > 0 && r.QemuS > 0 {
			have = append(have, r)
		}
	}
	if len(have) == 0 {
		return
	}
	perVCPU, share := map[string][]float64{}, map[string][]float64{}
	for _, r := range have {
		perVCPU[r.Name] = append(perVCPU[r.Name], float64(r.Bytes)/1e6/r.VCPUS)
		share[r.Name] = append(share[r.Name], r.VCPUS/r.QemuS)
	}
	wg := median(perVCPU[wgcompare.WireGuard])
	fmt.Fprintf(w, "\n| path | runs | MB per vCPU s | × WireGuard (vCPU) | vCPU share of qemu's CPU (median, range) |\n|---|---:|---:|---:|---|\n")
	for _, p := range wgcompare.Paths {
		v := perVCPU[p.Name]
		if len(v) == 0 {
			continue
		}
		x := "–"
		if wg > 0 {
			x = fmt.Sprintf("%.2f", median(v)/wg)
		}
		sh := share[p.Name]
		fmt.Fprintf(w, "| %s | %d | %.2f | %s | %.0f %% (%.0f–%.0f %%) |\n", p.Name, len(v), median(v), x,
			100*median(sh), 100*slices.Min(sh), 100*slices.Max(sh))
	}
	fmt.Fprintln(w)
}
