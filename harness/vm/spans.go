package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/offload-dev/offload/harness/internal/qemucpu"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/measure/ratio"
)

// Spans time a piece of guest work from the host. A guest program prints
//
//	@@offload-vm span-begin name=wireguard ref=1 id=NONCE
//	@@offload-vm span-end name=wireguard bytes=33554432 guest_s=2.5 guest_busy_s=2.4 id=NONCE
//
// (the nonce is in $OFFLOAD_VM_ID) and the host samples its own clock and
// the qemu process's CPU time (utime+stime of all its threads) at each
// line. Under TCG the guest's clock is not to be trusted: the emulated
// malta timer sometimes stalls and a run then looks several times faster
// than it was. qemu's CPU seconds on the host are the guest's work as the
// host paid for it, so the span table gives them beside the guest's own
// figures. Repeated spans of one name are runs of one path; the table gives
// medians, and ratios against the spans marked ref=1.

// cpuSample is one reading of the host's clock and qemu's CPU time.
type cpuSample struct {
	Wall  time.Time
	CPU   time.Duration
	CPUOK bool
	// VCPU is the CPU time of qemu's vCPU threads alone (the guest's
	// instructions); CPU minus VCPU is device emulation and I/O.
	VCPU   time.Duration
	VCPUOK bool
}

// span is one timed piece of guest work.
type span struct {
	Name       string
	Ref        bool
	Begin, End cpuSample
	Bytes      int64
	GuestS     float64 // the guest's own elapsed seconds, 0 if not given
	GuestBusyS float64 // the guest's busy CPU seconds, 0 if not given
	// End holds every key of the span-end line, for -spans.
	EndKV map[string]string
}

func (s *span) hostS() float64 { return s.End.Wall.Sub(s.Begin.Wall).Seconds() }
func (s *span) qemuS() float64 { return (s.End.CPU - s.Begin.CPU).Seconds() }
func (s *span) cpuOK() bool    { return s.Begin.CPUOK && s.End.CPUOK }
func (s *span) vcpuS() float64 { return (s.End.VCPU - s.Begin.VCPU).Seconds() }
func (s *span) vcpuOK() bool   { return s.Begin.VCPUOK && s.End.VCPUOK }

// spanLog collects the spans of one boot.
type spanLog struct {
	open map[string]*span
	Done []*span
	bad  []error
}

func (l *spanLog) begin(kv map[string]string, at cpuSample) {
	name := kv["name"]
	if name == "" {
		l.bad = append(l.bad, errors.New("span-begin without a name"))
		return
	}
	if l.open == nil {
		l.open = map[string]*span{}
	}
	if _, ok := l.open[name]; ok {
		l.bad = append(l.bad, fmt.Errorf("span %s began twice without ending", name))
		return
	}
	l.open[name] = &span{Name: name, Ref: kv["ref"] == "1", Begin: at}
}

func (l *spanLog) end(kv map[string]string, at cpuSample) {
	name := kv["name"]
	s, ok := l.open[name]
	if !ok {
		l.bad = append(l.bad, fmt.Errorf("span %q ended without beginning", name))
		return
	}
	delete(l.open, name)
	var err error
	if s.Bytes, err = strconv.ParseInt(kv["bytes"], 10, 64); err != nil || s.Bytes < 0 {
		l.bad = append(l.bad, fmt.Errorf("span %s: bad bytes=%q", name, kv["bytes"]))
		return
	}
	for _, f := range []struct {
		key string
		to  *float64
	}{{"guest_s", &s.GuestS}, {"guest_busy_s", &s.GuestBusyS}} {
		if v, ok := kv[f.key]; ok {
			if *f.to, err = strconv.ParseFloat(v, 64); err != nil {
				l.bad = append(l.bad, fmt.Errorf("span %s: bad %s=%q", name, f.key, v))
				return
			}
		}
	}
	s.End = at
	s.EndKV = kv
	l.Done = append(l.Done, s)
}

// spanRecord is one line of the -spans file: a finished span as JSON, for
// tools that pool runs over several boots (harness/wgcompare's anchor).
type spanRecord struct {
	Name   string            `json:"name"`
	Ref    bool              `json:"ref"`
	Bytes  int64             `json:"bytes"`
	HostS  float64           `json:"host_s"`
	QemuS  float64           `json:"qemu_s"`           // 0 when qemu's CPU time could not be read
	VCPUS  float64           `json:"vcpu_s,omitempty"` // of it, qemu's vCPU threads
	GuestS float64           `json:"guest_s,omitempty"`
	Busy   float64           `json:"guest_busy_s,omitempty"`
	End    map[string]string `json:"end"` // the span-end line's keys
}

// writeSpanFile writes every finished span to file, one JSON object a line.
func writeSpanFile(file string, spans []*span) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, s := range spans {
		r := spanRecord{Name: s.Name, Ref: s.Ref, Bytes: s.Bytes, HostS: s.hostS(), GuestS: s.GuestS, Busy: s.GuestBusyS, End: s.EndKV}
		if s.cpuOK() {
			r.QemuS = s.qemuS()
		}
		if s.vcpuOK() {
			r.VCPUS = s.vcpuS()
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("-spans: %w", err)
		}
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-spans: %w", err)
	}
	return nil
}

// errs returns malformed span lines and spans that never ended.
func (l *spanLog) errs() []error {
	errs := append([]error(nil), l.bad...)
	var names []string
	for n := range l.open {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		errs = append(errs, fmt.Errorf("span %s began but never ended", n))
	}
	return errs
}

// spanGroup is every run of one path.
type spanGroup struct {
	Name  string
	Ref   bool
	Runs  []*span
	Guest float64 // median MB/s by the guest's clock (0: not given)
	Host  float64 // median MB/s by the host's clock
	QemuS float64 // median qemu CPU seconds per run
	PerCS float64 // median MB per qemu CPU second
	Clock float64 // median guest seconds per host second
}

func groupSpans(spans []*span) []*spanGroup {
	var groups []*spanGroup
	byName := map[string]*spanGroup{}
	for _, s := range spans {
		g := byName[s.Name]
		if g == nil {
			g = &spanGroup{Name: s.Name}
			byName[s.Name] = g
			groups = append(groups, g)
		}
		g.Ref = g.Ref || s.Ref
		g.Runs = append(g.Runs, s)
	}
	for _, g := range groups {
		var guest, host, qs, percs, clock []float64
		for _, s := range g.Runs {
			mb := float64(s.Bytes) / 1e6
			if s.GuestS > 0 {
				guest = append(guest, mb/s.GuestS)
				clock = append(clock, s.GuestS/s.hostS())
			}
			if h := s.hostS(); h > 0 {
				host = append(host, mb/h)
			}
			if q := s.qemuS(); s.cpuOK() && q > 0 {
				qs = append(qs, q)
				percs = append(percs, mb/q)
			}
		}
		g.Guest, g.Host, g.QemuS, g.PerCS, g.Clock = ratio.Median(guest), ratio.Median(host), ratio.Median(qs), ratio.Median(percs), ratio.Median(clock)
	}
	return groups
}

// writeSpanTable prints the per-path table: medians over the runs, and
// ratios against the ref group by the guest's clock and by qemu's CPU time.
func writeSpanTable(w io.Writer, spans []*span, pid int) {
	if len(spans) == 0 {
		return
	}
	groups := groupSpans(spans)
	var ref *spanGroup
	for _, g := range groups {
		if g.Ref {
			ref = g
			break
		}
	}
	refName := "ref"
	if ref != nil {
		refName = ref.Name
	}
	fmt.Fprintf(w, "\nvm: spans timed on the host: qemu pid %d, CPU = utime+stime of all its threads (10 ms ticks); medians over runs\n", pid)
	fmt.Fprintf(w, "%-28s %4s %10s %10s %9s %12s %9s %11s %11s\n", "path", "runs", "guest MB/s", "host MB/s",
		"qemu CPU s", "MB/qemu-CPU-s", "guest/host", "vs "+trunc(refName, 8), "vs (qemu)")
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	num := func(v float64, f string) string {
		if v <= 0 {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}
	for _, g := range groups {
		var vsGuest, vsQemu = "-", "-"
		if ref != nil {
			vsGuest, vsQemu = ratio(g.Guest, ref.Guest), ratio(g.PerCS, ref.PerCS)
		}
		fmt.Fprintf(w, "%-28s %4d %10s %10s %9s %12s %9s %11s %11s\n", g.Name, len(g.Runs),
			num(g.Guest, "%.2f"), num(g.Host, "%.2f"), num(g.QemuS, "%.2f"), num(g.PerCS, "%.2f"),
			num(g.Clock, "%.2f"), vsGuest, vsQemu)
	}
	var stalls []string
	for _, s := range spans {
		if s.GuestS > 0 && s.GuestS/s.hostS() < 0.5 {
			stalls = append(stalls, fmt.Sprintf("%s (guest %.2fs, host %.2fs)", s.Name, s.GuestS, s.hostS()))
		}
	}
	if len(stalls) > 0 {
		fmt.Fprintf(w, "vm: note: the guest's clock ran at under half the host's in %d run(s), a stalled emulated timer: %s\n",
			len(stalls), strings.Join(stalls, "; "))
	}
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// qemuCPU and vcpuCPU are qemu's CPU time, all threads and the vCPU
// threads alone (harness/internal/qemucpu, shared with harness/anchor).
func qemuCPU(pid int) (time.Duration, error) { return qemucpu.Process(pid) }
func vcpuCPU(pid int) (time.Duration, error) { return qemucpu.VCPU(pid) }
