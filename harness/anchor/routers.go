package main

// -routers 2: two emulated routers, each its own qemu, joined by a wire.
//
//	sender ns (host)                                              sink ns (host)
//	  tap ──lan── [router A: qemu, 1 CPU, virtio-crypto] ──wan── wire (UDP on
//	  loopback) ──wan── [router B: qemu, 1 CPU, virtio-crypto] ──lan── tap
//
// The sender and the sink run in this process, each in a network namespace
// it makes, behind a TAP device that A's or B's qemu holds (the taps are
// made in the host's namespace, attached by qemu, then moved). Every stream
// goes from the sender through A (the encrypting side) and B (decrypting)
// to the sink, which hashes it all (sha256) against the stream sent. Each
// router runs harness/anchor/router, which names its cards and takes the
// host's setup and clock requests over the LAN (router.go has the client).
// Around every run the host reads both qemus' CPU time (all threads, and
// the vCPU thread alone) and both guests' clocks, so each router's cost per
// byte and each guest timer's rate against the host's clock are measured
// separately; routers_table.go pools them.
//
// Addresses (only in the two namespaces and the guests), one pair of LAN
// subnets per kind of path so that each path's return traffic takes the
// same way back:
//
//	plain routing, relays, ssh -L, offload: 10.77.1.0/24 (A's LAN) -> 10.77.2.0/24 (B's)
//	WireGuard:                              10.77.13.0/24 -> 10.77.23.0/24 (wg0 10.77.9.0/24)
//	IPsec ESP, tunnel mode:                 10.77.14.0/24 -> 10.77.24.0/24
//	the wire:                               10.77.0.1 (A) - 10.77.0.2 (B)

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/harness/internal/qemucpu"
	"github.com/offload-dev/offload/harness/wgcompare"
	"github.com/offload-dev/offload/internal/testutil"
)

// routerSide is one router's fixed part of the rig.
type routerSide struct {
	name     string // "A" or "B"
	lanMAC   string
	wanMAC   string
	lanAddr  string // the router's LAN address (the agent's control address)
	lanAddrs []string
	wanAddr  string
	hostAddr string   // the host namespace's end of the LAN
	hostNets []string // the host namespace's other addresses (/24)
	routes   []string // the router's routes: "NET via GW" or "NET dev wg0"
}

var sides = [2]routerSide{
	{name: "A", lanMAC: "52:54:00:77:0a:01", wanMAC: "52:54:00:77:0a:02",
		lanAddr: "10.77.1.1", lanAddrs: []string{"10.77.13.1/24", "10.77.14.1/24"}, wanAddr: "10.77.0.1",
		hostAddr: "10.77.1.2", hostNets: []string{"10.77.13.2/24", "10.77.14.2/24"},
		routes: []string{"10.77.2.0/24 via 10.77.0.2", "10.77.24.0/24 via 10.77.0.2"}},
	{name: "B", lanMAC: "52:54:00:77:0b:01", wanMAC: "52:54:00:77:0b:02",
		lanAddr: "10.77.2.1", lanAddrs: []string{"10.77.23.1/24", "10.77.24.1/24"}, wanAddr: "10.77.0.2",
		hostAddr: "10.77.2.2", hostNets: []string{"10.77.23.2/24", "10.77.24.2/24"},
		routes: []string{"10.77.1.0/24 via 10.77.0.1", "10.77.14.0/24 via 10.77.0.1"}},
}

const (
	controlPort = "7070"
	sinkPort2   = "9000"
	relayPort2  = "7100"
	relayZCPort = "7101" // the relays with MSG_ZEROCOPY sends (relay-zc)
	sealPort    = "7102" // the sealing relays (relay-seal)
	sshFwdPort  = "7200"
	fwdPort     = "7300"
	tunnelPort2 = "7000"
	wgPort2     = "51820"
	guestDir    = "/tmp/anchor"
)

// routerModules are routerside kernel modules: the virtio cards besides
// the one-guest set (which has veth for its namespaces; harmless here).
const routerModules = modules + ",virtio_net"

// target is where the sender connects for each kind of path.
func target(kind string) string {
	switch kind {
	case "plain":
		return "10.77.2.2:" + sinkPort2
	case "wireguard":
		return "10.77.23.2:" + sinkPort2
	case "ipsec":
		return "10.77.24.2:" + sinkPort2
	case "relay":
		return "10.77.1.1:" + relayPort2
	case "relay-zc":
		return "10.77.1.1:" + relayZCPort
	case "relay-seal":
		return "10.77.1.1:" + sealPort
	case "ssh":
		return "10.77.1.1:" + sshFwdPort
	case "offload":
		return "10.77.1.1:" + fwdPort
	}
	return ""
}

// vmCommandLine is harness/vm's command line for one router: the common
// arguments, the agent as the one step, qemu's pid file, the LAN card on
// the tap and the WAN card on the wire (UDP between two loopback ports).
func vmCommandLine(common []string, s routerSide, tap, pidfile string, wireLocal, wireRemote int, edgeIRQs bool) []string {
	args := append([]string{}, common...)
	return append(args,
		"-cmd", fmt.Sprintf("router serve -lan %s=%s/24 -wan %s -listen %s -level-irqs=%v", s.lanMAC, s.lanAddr, s.wanMAC, controlPort, !edgeIRQs),
		"-qemu-arg=-pidfile", "-qemu-arg="+pidfile,
		"-qemu-arg=-nic", fmt.Sprintf("-qemu-arg=tap,ifname=%s,script=no,downscript=no,model=virtio-net-pci,mac=%s", tap, s.lanMAC),
		"-qemu-arg=-nic", fmt.Sprintf("-qemu-arg=socket,udp=127.0.0.1:%d,localaddr=127.0.0.1:%d,model=virtio-net-pci,mac=%s", wireRemote, wireLocal, s.wanMAC))
}

// routerRun is one measured run: both routers' costs and clocks.
type routerRun struct {
	Boot   int           `json:"boot"`
	Round  int           `json:"round"`
	Name   string        `json:"name"`
	Bytes  int64         `json:"bytes"`
	HostS  float64       `json:"host_s"` // wall time of the stream, by the host
	Router [2]routerCost `json:"router"` // A, B
	Off    bool          `json:"-"`      // another timer regime than the rest (set by markRegimes)
	Err    string        `json:"error,omitempty"`
}

// routerCost is one router's share of a run.
type routerCost struct {
	QemuS  float64 `json:"qemu_s"`  // its qemu's CPU seconds (utime+stime, all threads)
	VCPUS  float64 `json:"vcpu_s"`  // of which its vCPU thread's
	GuestS float64 `json:"guest_s"` // the guest's clock over the run
	ClockS float64 `json:"clock_s"` // the host's clock over the same two readings
	IRQ    int64   `json:"irq"`     // interrupts on the crypto device's line
	Kicks  int     `json:"kicks"`   // console lines the stall watch wrote
	// Guest is the guest's own CPU account over the run and the reads
	// around it (USER_HZ ticks; the guest's ticks, so read as shares).
	Guest guestCPU `json:"guest_ticks"`
}

// rate is the guest timer's rate against the host clock over the run.
func (c routerCost) rate() float64 {
	if c.ClockS <= 0 {
		return 0
	}
	return c.GuestS / c.ClockS
}

// routersRig is one boot's two routers and the host's namespaces.
type routersRig struct {
	o        *options
	dir      string
	boot     int
	ns       [2]string // sender's (A's LAN), sink's (B's LAN)
	taps     [2]string
	pids     [2]int
	ctl      [2]*control
	vms      [2]*vmProc
	cancel   context.CancelCauseFunc // ends the boot's context (an unexpected exit of a harness/vm)
	quitting atomic.Bool             // the host asked both agents to quit: their exits are expected
	sink     *hashSink
	pattern  string
	irqLine  [2]string
	stderr   io.Writer
	logf     func(string, ...any)
}

// runRouters boots -boots pairs of routers and prints the per-router
// table; vmArgs are harness/vm's arguments common to both routers.
func runRouters(ctx context.Context, o *options, vm string, vmArgs []string, dir string, stdout, stderr io.Writer) error {
	paths, err := routerPaths(o)
	if err != nil {
		return err
	}
	boot := func(ctx context.Context, b int) ([]routerRun, error) {
		rig := &routersRig{o: o, dir: dir, boot: b, stderr: stderr,
			logf: func(f string, a ...any) {
				fmt.Fprintf(stderr, "anchor: boot %d: "+f+"\n", append([]any{b + 1}, a...)...)
			}}
		return rig.run(ctx, vm, vmArgs, paths)
	}
	return poolBoots(ctx, o, dir, boot, stdout)
}

// poolBoots runs the boots one after the other, writes each one's spans and
// prints the table. When a boot fails, or the command is interrupted or
// times out, it still prints the table of what was measured (the failed
// boot's finished runs included, the header saying so) and then fails.
func poolBoots(ctx context.Context, o *options, dir string, boot func(context.Context, int) ([]routerRun, error), stdout io.Writer) error {
	var runs []routerRun
	started, load0 := time.Now(), hostLoad()
	var bootErr error
	boots := 0
	for b := range o.boots {
		got, err := boot(ctx, b)
		boots++
		if werr := writeRouterSpans(filepath.Join(dir, fmt.Sprintf("routers2-spans-%d.jsonl", b+1)), got); werr != nil && err == nil {
			err = werr
		}
		runs = append(runs, got...)
		if err != nil {
			bootErr = fmt.Errorf("boot %d: %w", b+1, err)
			break
		}
		if ctx.Err() != nil {
			bootErr = fmt.Errorf("after boot %d: %w", b+1, context.Cause(ctx))
			break
		}
	}
	fmt.Fprintf(stdout, "\nRouter anchor, two routers: %d boot(s) × %d round(s), %d MiB per run; each router mipsel malta 24Kc, 1 CPU, virtio-crypto, its own qemu; "+
		"%s, %.0f min; host load average %s at the start, %s at the end\n\n",
		o.boots, o.rounds, o.mib, time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(started).Minutes(), load0, hostLoad())
	if bootErr != nil {
		fmt.Fprintf(stdout, "INCOMPLETE: %s; the table is over the %d run(s) of %d boot(s) measured before\n\n", firstLine(bootErr.Error()), len(runs)-failed(runs), boots)
	}
	if len(runs) > 0 {
		writeRouterTable(stdout, runs, boots)
	}
	if bootErr != nil {
		return bootErr
	}
	if n := failed(runs); n > 0 {
		return fmt.Errorf("%d run(s) failed (listed above the table, their errors in the log and the spans)", n)
	}
	return nil
}

// routerPaths are the paths -paths names (default: every path that is not
// an experiment), WireGuard always among them; cryptodev ones only with
// the module.
func routerPaths(o *options) ([]wgcompare.Path, error) {
	var only []string
	if o.paths != "" {
		only = strings.Split(o.paths, ",")
		for _, n := range only {
			if _, ok := wgcompare.PathByName(n); !ok {
				return nil, fmt.Errorf("-paths: unknown path %q", n)
			}
		}
	}
	var out []wgcompare.Path
	for _, p := range wgcompare.Paths {
		switch {
		case p.Name == wgcompare.WireGuard:
			continue // always measured, first in each round's order
		case only != nil && !slices.Contains(only, p.Name):
			continue
		case only == nil && p.Extra:
			continue
		case p.Cryptodev() && o.cryptodev == "off":
			continue
		case p.Bin == wgcompare.Baseline && o.baseline == "":
			return nil, fmt.Errorf("-paths %s: give -baseline", p.Name)
		}
		if p.Kind != "offload" {
			out = append(out, p)
			continue
		}
		p.Conf = o.set
		out = append(out, p)
		if len(o.twin) > 0 {
			// Beside it in every round, so the two are paired runs.
			t := p
			t.Name, t.Label, t.Conf = p.Name+"-twin", p.Label+", with "+strings.Join(o.twin, "; "), o.twin
			out = append(out, t)
		}
	}
	return out, nil
}

// Every wait of a boot ends on an event or a deadline that says which
// wait it was: each harness/vm's exit (vmProc.done) ends the requests to
// its agent at once and, unless the host asked it to quit, the whole boot;
// an interrupt or SIGTERM (ctx) and the boot's own deadline (-timeout, as
// harness/vm's, plus bootSlack) end it too. On the way out (deferred, in
// this order) both harness/vm are interrupted and waited for, a qemu they
// leave is killed, and the namespaces and taps go.
func (r *routersRig) run(ctx context.Context, vm string, common []string, paths []wgcompare.Path) (runs []routerRun, err error) {
	id := strconv.Itoa(os.Getpid() % 100000)
	r.ns = [2]string{"oa2-" + id + "-snd", "oa2-" + id + "-sink"}
	r.taps = [2]string{"oa2" + id + "a", "oa2" + id + "b"}
	defer r.teardown()
	for i := range 2 {
		if err := ipRun("netns", "add", r.ns[i]); err != nil {
			return nil, err
		}
		if err := ipRun("tuntap", "add", "dev", r.taps[i], "mode", "tap"); err != nil {
			return nil, err
		}
	}
	ports, err := freeUDPPorts(2)
	if err != nil {
		return nil, err
	}
	ctx, r.cancel = context.WithCancelCause(ctx)
	defer r.cancel(nil)
	defer r.stopVMs()
	for i, s := range sides {
		pidfile := filepath.Join(r.dir, fmt.Sprintf("qemu-%s-%d.pid", s.name, r.boot+1))
		_ = os.Remove(pidfile)
		args := vmCommandLine(common, s, r.taps[i], pidfile, ports[i], ports[1-i], r.o.edgeIRQs)
		args = append(args, "-prefix", s.name+"| ", "-log", filepath.Join(r.dir, fmt.Sprintf("console-%s-%d.log", s.name, r.boot+1)))
		if r.o.quiet {
			args = append(args, "-quiet")
		}
		r.logf("router %s: %s %s", s.name, vm, strings.Join(args, " "))
		cmd := exec.Command(vm, args...)
		cmd.Stdout, cmd.Stderr = r.stderr, r.stderr
		// Should r.stderr not be a file, a qemu outliving harness/vm
		// would hold the pipe: Wait gives up on it after this.
		cmd.WaitDelay = 30 * time.Second
		v, err := startVM("router "+s.name+"'s harness/vm", cmd, pidfile)
		if err != nil {
			return nil, err
		}
		r.vms[i] = v
		go r.watch(v)
		pid, err := r.waitQEMU(ctx, i, pidfile)
		if err != nil {
			return nil, fmt.Errorf("router %s: %w", s.name, err)
		}
		r.pids[i] = pid
	}
	ctx, cancel := context.WithTimeoutCause(ctx, r.o.timeout+bootSlack,
		fmt.Errorf("the boot's deadline passed (-timeout %v and %v more, from both qemus' start)", r.o.timeout, bootSlack))
	defer cancel()
	if err := r.hostSides(); err != nil {
		return nil, err
	}
	for i, s := range sides {
		c, err := dialControl(ctx, testutil.DialIn("/run/netns/"+r.ns[i]), net.JoinHostPort(s.lanAddr, controlPort), r.vms[i], 5*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("router %s: %w", s.name, err)
		}
		r.attach(ctx, i, c)
	}
	r.logf("both routers answer; setting up the paths")
	if err := r.setup(); err != nil {
		return nil, err
	}
	l, err := testutil.ListenIn("/run/netns/"+r.ns[1], "tcp", "0.0.0.0:"+sinkPort2)
	if err != nil {
		return nil, err
	}
	r.sink = serveHashSink(l)
	r.pattern = filepath.Join(r.dir, "pattern")
	if err := wgcompare.WritePatternFile(r.pattern); err != nil {
		return nil, err
	}
	wg, _ := wgcompare.PathByName(wgcompare.WireGuard)
	for _, k := range []string{"plain", "wireguard", "ipsec", "relay", "ssh"} {
		if err := r.waitUp(ctx, target(k)); err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	all := append([]wgcompare.Path{wg}, paths...)
	for round := range r.o.rounds {
		// Each round starts one path later, so drift in the emulator
		// hits every path alike.
		for i := range all {
			p := all[(i+round)%len(all)]
			prof := round == r.o.rounds-1 && r.boot == r.o.boots-1 && slices.Contains(strings.Split(r.o.profile, ","), p.Name)
			run, err := r.measure(ctx, p, round, prof)
			if err != nil {
				// A failed run is kept (its error in the spans, out of
				// every figure) and the boot goes on while both routers
				// still answer; the command fails at the end.
				run.Err = err.Error()
				runs = append(runs, run)
				r.logf("round %d %s FAILED: %v", round+1, p.Name, err)
				if ctx.Err() != nil {
					return runs, fmt.Errorf("%s (round %d): %w", p.Name, round+1, context.Cause(ctx))
				}
				if !r.alive() || failed(runs) > maxFailedRuns {
					return runs, fmt.Errorf("%s (round %d): %w", p.Name, round+1, err)
				}
				continue
			}
			runs = append(runs, run)
			a, b := run.Router[0], run.Router[1]
			r.logf("round %d %-14s %6.2f MB/s; A %.2f MB/qemu-s (vCPU %.0f %%, timer %.2f), B %.2f MB/qemu-s (vCPU %.0f %%, timer %.2f)",
				round+1, p.Name, float64(run.Bytes)/1e6/run.HostS,
				float64(run.Bytes)/1e6/a.QemuS, 100*a.VCPUS/a.QemuS, a.rate(), float64(run.Bytes)/1e6/b.QemuS, 100*b.VCPUS/b.QemuS, b.rate())
		}
	}
	return runs, r.shutdown(ctx)
}

// bootSlack is how long a boot may outlast harness/vm's -timeout (which
// counts from qemu's start and then kills it) before the host gives up
// on its own.
const bootSlack = 5 * time.Minute

// powerOffWait bounds the wait for a router to power off after its quit.
const powerOffWait = 2 * time.Minute

// watch ends the boot when v exits before the host asked it to quit.
func (r *routersRig) watch(v *vmProc) {
	<-v.done
	if !r.quitting.Load() {
		r.cancel(v.exitError())
	}
}

// attach makes c router i's control connection, ended by ctx or by the
// router's harness/vm exiting.
func (r *routersRig) attach(ctx context.Context, i int, c *control) {
	c.endOn(ctx, r.vms[i])
	r.ctl[i] = c
}

// shutdown asks each agent to quit and waits for its harness/vm to exit.
// The agent answers and exits, and its guest powers off at once: the
// answer can be lost on the way (it was in run a4), so a harness/vm that
// exits cleanly after the quit is a clean stop, answered or not.
func (r *routersRig) shutdown(ctx context.Context) error {
	r.quitting.Store(true)
	for i, c := range r.ctl {
		_, qerr := c.do(request{Op: "quit"})
		c.close() // the agent waits for this before it exits
		v := r.vms[i]
		select {
		case <-v.done:
		case <-ctx.Done():
			return fmt.Errorf("router %s: waiting for it to power off after quit: %w", sides[i].name, context.Cause(ctx))
		case <-time.After(powerOffWait):
			return fmt.Errorf("router %s: did not power off within %v of quit (quit: %v)", sides[i].name, powerOffWait, qerr)
		}
		if v.err != nil {
			return fmt.Errorf("router %s: %w (quit: %v)", sides[i].name, v.exitError(), qerr)
		}
		if qerr != nil {
			r.logf("router %s: its quit's answer was lost (%v), but it powered off cleanly", sides[i].name, qerr)
		}
	}
	return nil
}

// maxFailedRuns is how many failed runs a boot goes on after.
const maxFailedRuns = 3

func failed(runs []routerRun) int {
	n := 0
	for _, r := range runs {
		if r.Err != "" {
			n++
		}
	}
	return n
}

// alive says whether both agents still answer, after stopping whatever a
// failed run left running (an offload end).
func (r *routersRig) alive() bool {
	for i := range r.ctl {
		_, _ = r.ctl[i].do(request{Op: "stop", ID: "offload"})
		if _, err := r.ctl[i].do(request{Op: "clock"}); err != nil {
			r.logf("router %s no longer answers: %v", sides[i].name, err)
			return false
		}
	}
	return true
}

// waitQEMU waits for qemu's pid file and for qemu to hold the tap, then
// gives the pid.
func (r *routersRig) waitQEMU(ctx context.Context, i int, pidfile string) (int, error) {
	deadline := time.Now().Add(15 * time.Minute) // harness/vm builds and fetches first
	for time.Now().Before(deadline) {
		select {
		case <-r.vms[i].done:
			return 0, fmt.Errorf("before qemu started: %w", r.vms[i].exitError())
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for qemu to start: %w", context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
		b, err := os.ReadFile(pidfile)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		if holdsTap(pid, r.taps[i]) {
			return pid, nil
		}
	}
	return 0, errors.New("qemu did not start (no pid file holding the tap) within 15 min")
}

// holdsTap says whether process pid has the tap open (/proc/PID/fdinfo
// names a tun file's device as "iff:").
func holdsTap(pid int, tap string) bool {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil && strings.Contains(string(b), "iff:\t"+tap+"\n") {
			return true
		}
	}
	return false
}

// hostSides moves each tap into its namespace and gives it the host's
// addresses and the routes through its router.
func (r *routersRig) hostSides() error {
	for i, s := range sides {
		ns, tap := r.ns[i], r.taps[i]
		lines := [][]string{
			{"link", "set", tap, "netns", ns},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", ns, "addr", "add", s.hostAddr + "/24", "dev", tap},
		}
		for _, a := range s.hostNets {
			lines = append(lines, []string{"-n", ns, "addr", "add", a, "dev", tap})
		}
		lines = append(lines, []string{"-n", ns, "link", "set", tap, "up"})
		// The far side's subnets, each through this router's address
		// in the same subnet as the source it must leave from.
		far := sides[1-i]
		srcs := append([]string{s.hostAddr + "/24"}, s.hostNets...)
		fars := append([]string{far.hostAddr + "/24"}, far.hostNets...)
		for j := range srcs {
			src, _, _ := strings.Cut(srcs[j], "/")
			gw := src[:strings.LastIndexByte(src, '.')] + ".1"
			lines = append(lines, []string{"-n", ns, "route", "add", subnet(fars[j]), "via", gw, "src", src})
		}
		for _, l := range lines {
			if err := ipRun(l...); err != nil {
				return err
			}
		}
	}
	return nil
}

// subnet is the /24 of an ADDR/24.
func subnet(cidr string) string {
	a, _, _ := strings.Cut(cidr, "/")
	return a[:strings.LastIndexByte(a, '.')] + ".0/24"
}

func (r *routersRig) teardown() {
	if r.sink != nil {
		r.sink.Close()
	}
	for i := range 2 {
		if r.ns[i] != "" {
			_ = ipRun("netns", "del", r.ns[i])
		}
		if r.taps[i] != "" {
			// Still here when qemu never took it.
			_ = ipRun("tuntap", "del", "dev", r.taps[i], "mode", "tap")
		}
	}
}

// stopVMs stops each harness/vm still running (a failed or interrupted
// boot) and any qemu one left behind.
func (r *routersRig) stopVMs() {
	for _, v := range r.vms {
		if v != nil {
			v.stop(40*time.Second, r.logf)
		}
	}
}

// ipTimeout bounds one ip command (it never takes long; this is so that
// nothing in the rig can hang).
const ipTimeout = 2 * time.Minute

func ipRun(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), ipTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// freeUDPPorts finds n free UDP ports on loopback for the wire.
func freeUDPPorts(n int) ([]int, error) {
	var ports []int
	var conns []net.PacketConn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		ports = append(ports, c.LocalAddr().(*net.UDPAddr).Port)
	}
	return ports, nil
}

// setup configures both routers: addresses, forwarding, routes, WireGuard,
// the ESP SAs and policies, sshd on B, the relays, offload's key.
func (r *routersRig) setup() error {
	for i, s := range sides {
		var b strings.Builder
		fmt.Fprintf(&b, "set -e\nmkdir -p %s\necho 1 > /proc/sys/net/ipv4/ip_forward\n%s link set lo up\n%s addr add %s/24 dev wan\n", guestDir, ip, ip, s.wanAddr)
		for _, a := range s.lanAddrs {
			fmt.Fprintf(&b, "%s addr add %s dev lan\n", ip, a)
		}
		for _, rt := range s.routes {
			fmt.Fprintf(&b, "%s route add %s\n", ip, rt)
		}
		fmt.Fprintf(&b, "wg genkey > %s/wg.key\n", guestDir)
		if _, err := r.ctl[i].sh(b.String()); err != nil {
			return err
		}
		// The crypto device's interrupt line (virtio-net cards may share it).
		out, err := r.ctl[i].sh("ls /sys/bus/virtio/drivers/virtio_crypto/ | grep '^virtio'")
		if err != nil {
			return fmt.Errorf("router %s: no virtio_crypto device: %w", s.name, err)
		}
		r.irqLine[i] = strings.TrimSpace(out)
	}
	// WireGuard: wg0 on each, the other's LAN subnet through it.
	var pubs [2]string
	for i := range sides {
		out, err := r.ctl[i].sh("wg pubkey < " + guestDir + "/wg.key")
		if err != nil {
			return err
		}
		pubs[i] = strings.TrimSpace(out)
	}
	wgNets := [2]string{"10.77.13.0/24", "10.77.23.0/24"}
	for i, s := range sides {
		j := 1 - i
		script := fmt.Sprintf(`set -e
%[1]s link add wg0 type wireguard
wg set wg0 listen-port %[2]s private-key %[3]s/wg.key peer %[4]s allowed-ips %[5]s,10.77.9.%[6]d/32 endpoint %[7]s:%[2]s
%[1]s addr add 10.77.9.%[8]d/24 dev wg0
%[1]s link set wg0 up
%[1]s route add %[5]s dev wg0
`, ip, wgPort2, guestDir, pubs[j], wgNets[j], j+1, sides[j].wanAddr, i+1)
		if _, err := r.ctl[i].sh(script); err != nil {
			return fmt.Errorf("router %s: WireGuard: %w", s.name, err)
		}
	}
	if err := r.setupESP(); err != nil {
		return err
	}
	if err := r.setupSSH(); err != nil {
		return err
	}
	// The floor: a bare relay on each router, A's LAN to B's wire
	// address, B's to the sink.
	relays := [2][2]string{{"10.77.1.1:" + relayPort2, "10.77.0.2:" + relayPort2}, {"10.77.0.2:" + relayPort2, "10.77.2.2:" + sinkPort2}}
	for i := range sides {
		if _, err := r.ctl[i].do(request{Op: "start", ID: "relay", Argv: []string{"router", "relay", "-listen", relays[i][0], "-target", relays[i][1]}}); err != nil {
			return err
		}
	}
	// offload's key: made on A, copied to B.
	if _, err := r.ctl[0].sh("offload keygen -o " + guestDir + "/offload.key"); err != nil {
		return err
	}
	key, err := r.ctl[0].do(request{Op: "read", Path: guestDir + "/offload.key"})
	if err != nil {
		return err
	}
	_, err = r.ctl[1].do(request{Op: "write", Path: guestDir + "/offload.key", Data: key.Data})
	return err
}

// espSPI are the two SAs: A to B (the stream's way), B to A.
const espSPIAB, espSPIBA = "0x2001", "0x2002"

// setupESP adds ESP in tunnel mode between 10.77.14.0/24 (A's LAN) and
// 10.77.24.0/24 (B's), manual SAs between the wire addresses with
// cbc(aes) (the device's, by priority) and hmac(sha256), and checks that
// the device's driver serves it on both routers.
func (r *routersRig) setupESP() error {
	key := func() string {
		b := make([]byte, 32)
		_, _ = rand.Read(b)
		return "0x" + hex.EncodeToString(b)
	}
	ab := [4]string{"10.77.0.1", "10.77.0.2", espSPIAB, "1"}
	ba := [4]string{"10.77.0.2", "10.77.0.1", espSPIBA, "2"}
	var states strings.Builder
	for _, sa := range [][4]string{ab, ba} {
		fmt.Fprintf(&states, "%s xfrm state add src %s dst %s proto esp spi %s reqid %s mode tunnel auth-trunc 'hmac(sha256)' %s 128 enc 'cbc(aes)' %s\n",
			ip, sa[0], sa[1], sa[2], sa[3], key(), key())
	}
	policy := func(src, dst, dir string, sa [4]string) string {
		return fmt.Sprintf("%s xfrm policy add src %s dst %s dir %s tmpl src %s dst %s proto esp reqid %s mode tunnel\n", ip, src, dst, dir, sa[0], sa[1], sa[3])
	}
	const lanA, lanB = "10.77.14.0/24", "10.77.24.0/24"
	scripts := [2]string{
		policy(lanA, lanB, "out", ab) + policy(lanB, lanA, "in", ba) + policy(lanB, lanA, "fwd", ba),
		policy(lanB, lanA, "out", ba) + policy(lanA, lanB, "in", ab) + policy(lanA, lanB, "fwd", ab),
	}
	for i, s := range sides {
		if _, err := r.ctl[i].sh("set -e\n" + states.String() + scripts[i]); err != nil {
			return fmt.Errorf("router %s: ESP: %w", s.name, err)
		}
		crypto, err := r.ctl[i].do(request{Op: "read", Path: "/proc/crypto"})
		if err != nil {
			return err
		}
		if d := espDriver(string(crypto.Data)); !strings.Contains(d, wgcompare.DeviceDriver) {
			return fmt.Errorf("router %s: ESP's authenc(hmac(sha256),cbc(aes)) is %q, not the device's %s", s.name, d, wgcompare.DeviceDriver)
		}
	}
	return nil
}

// espDriver is the driver /proc/crypto names for ESP's transform.
func espDriver(proc string) string {
	for _, block := range strings.Split(proc, "\n\n") {
		if !strings.Contains(block, "authenc(hmac(sha256),cbc(aes))") {
			continue
		}
		for _, l := range strings.Split(block, "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "driver" {
				return strings.TrimSpace(v)
			}
		}
	}
	return ""
}

// setupSSH runs Debian's sshd on B (key only, aes256-ctr and
// hmac-sha2-256 only) on its wire address and ssh -N -L on A forwarding
// A's LAN port to the sink, as the one-guest anchor does.
func (r *routersRig) setupSSH() error {
	a, b := r.ctl[0], r.ctl[1]
	if _, err := a.sh("ssh-keygen -q -t ed25519 -N '' -f " + guestDir + "/id_ed25519"); err != nil {
		return err
	}
	pub, err := a.do(request{Op: "read", Path: guestDir + "/id_ed25519.pub"})
	if err != nil {
		return err
	}
	if _, err := b.do(request{Op: "write", Path: guestDir + "/authorized_keys", Data: pub.Data}); err != nil {
		return err
	}
	conf := wgcompare.SSHDConfig("10.77.0.2:22", guestDir)
	if _, err := b.do(request{Op: "write", Path: guestDir + "/sshd_config", Data: []byte(conf)}); err != nil {
		return err
	}
	script := fmt.Sprintf(`set -e
grep -q '^sshd:' /etc/passwd || echo 'sshd:x:100:65534::/run/sshd:/bin/false' >> /etc/passwd
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f %[1]s/ssh_host_ed25519_key
/usr/sbin/sshd -t -f %[1]s/sshd_config
`, guestDir)
	if _, err := b.sh(script); err != nil {
		return fmt.Errorf("router B: sshd: %w", err)
	}
	if _, err := b.do(request{Op: "start", ID: "sshd", Argv: []string{"/usr/sbin/sshd", "-D", "-e", "-f", guestDir + "/sshd_config"}}); err != nil {
		return err
	}
	// ssh gives up at once if sshd is not listening yet: wait for B's
	// listening socket (port 22 is 0016 in /proc/net/tcp, state 0A).
	if _, err := b.sh("i=0; until grep -q ':0016 00000000:0000 0A' /proc/net/tcp; do i=$((i+1)); [ $i -lt 300 ] || exit 1; sleep 0.2; done"); err != nil {
		return fmt.Errorf("router B: sshd not listening: %w", err)
	}
	_, err = a.do(request{Op: "start", ID: "ssh", Argv: []string{"ssh", "-N", "-T", "-i", guestDir + "/id_ed25519",
		"-L", "10.77.1.1:" + sshFwdPort + ":10.77.2.2:" + sinkPort2,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "ExitOnForwardFailure=yes", "-o", "Ciphers=aes256-ctr", "-o", "MACs=hmac-sha2-256",
		"-o", "Compression=no", "-o", "LogLevel=ERROR", "-p", "22", "root@10.77.0.2"}})
	return err
}

// offloadConfigs are the server's (B) and the client's (A) configs for p,
// as the one-guest anchor writes them: examples/*.yaml's fields, the
// path's suite, engine and frame, the sink as the one service.
func offloadConfigs(p wgcompare.Path) (server, client string) {
	common := fmt.Sprintf("key_file: offload.key\nsuite: %s\nengine: %s\nmax_frame: %s\ndrain_timeout: 2s\nmetrics: 127.0.0.1:9100\nlog:\n  level: warn\n",
		p.Suite, p.Eng, p.Frame)
	server = fmt.Sprintf("listen: 10.77.0.2:%s\n%sservices:\n  sink: 10.77.2.2:%s\n", tunnelPort2, common, sinkPort2)
	client = fmt.Sprintf("server: 10.77.0.2:%s\n%sforwards:\n  - listen: 10.77.1.1:%s\n    service: sink\nredial:\n  min: 200ms\n  max: 2s\n",
		tunnelPort2, common, fwdPort)
	for _, l := range p.Conf {
		server, client = server+l+"\n", client+l+"\n"
	}
	return server, client
}

// counters are a router's byte and interrupt counters around a run.
type counters struct {
	wanRx, wgTx, espBytes, irq int64
	cpu                        guestCPU
}

// guestCPU is the guest's own account of its CPU (/proc/stat's cpu line,
// USER_HZ ticks): user space, kernel, softirq (the network stack's and the
// crypto completions' bottom halves), hard interrupts, idle.
type guestCPU struct {
	User, Sys, Softirq, IRQ, Idle int64
}

func (g guestCPU) sub(o guestCPU) guestCPU {
	return guestCPU{g.User - o.User, g.Sys - o.Sys, g.Softirq - o.Softirq, g.IRQ - o.IRQ, g.Idle - o.Idle}
}

// parseStatCPU reads /proc/stat's "cpu user nice system idle iowait irq
// softirq ..." line (nice counts as user).
func parseStatCPU(line string) (guestCPU, error) {
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return guestCPU{}, fmt.Errorf("counters: bad /proc/stat line %q", line)
	}
	var v [7]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return guestCPU{}, fmt.Errorf("counters: bad /proc/stat line %q", line)
		}
		v[i] = n
	}
	return guestCPU{User: v[0] + v[1], Sys: v[2], Idle: v[3] + v[4], IRQ: v[5], Softirq: v[6]}, nil
}

var espBytesRE = regexp.MustCompile(`(\d+)\(bytes\)`)

// read reads router i's counters with one shell line (outside the
// measured window: it forks).
func (r *routersRig) counters(i int) (counters, error) {
	cmd := fmt.Sprintf("set -e; cat /sys/class/net/wan/statistics/rx_bytes /sys/class/net/wg0/statistics/tx_bytes; grep -w '%s' /proc/interrupts; head -1 /proc/stat; %s -s xfrm state get src 10.77.0.1 dst 10.77.0.2 proto esp spi %s",
		r.irqLine[i], ip, espSPIAB)
	out, err := r.ctl[i].sh(cmd)
	if err != nil {
		return counters{}, err
	}
	return parseCounters(out)
}

// parseCounters reads counters' output: two numbers, the interrupt line,
// /proc/stat's cpu line, then ip -s xfrm state's text.
func parseCounters(out string) (counters, error) {
	var c counters
	lines := strings.Split(out, "\n")
	if len(lines) < 4 {
		return c, fmt.Errorf("counters: short output %q", out)
	}
	var err1, err2 error
	c.wanRx, err1 = strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64)
	c.wgTx, err2 = strconv.ParseInt(strings.TrimSpace(lines[1]), 10, 64)
	if err1 != nil || err2 != nil {
		return c, fmt.Errorf("counters: bad byte counts in %q", out)
	}
	f := strings.Fields(lines[2])
	var err error
	if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
		return c, fmt.Errorf("counters: bad interrupt line %q", lines[2])
	}
	if c.irq, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return c, fmt.Errorf("counters: bad interrupt line %q", lines[2])
	}
	if c.cpu, err = parseStatCPU(lines[3]); err != nil {
		return c, err
	}
	if m := espBytesRE.FindStringSubmatch(strings.Join(lines[4:], "\n")); m != nil {
		c.espBytes, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return c, nil
}

// measure runs path p once: its per-run setup (offload's two ends), the
// stream with both routers' CPU and clocks read around it, the checks
// that it crossed the path it names, and the teardown.
func (r *routersRig) measure(ctx context.Context, p wgcompare.Path, round int, profile bool) (routerRun, error) {
	run := routerRun{Boot: r.boot, Round: round, Name: p.Name}
	payload := int64(r.o.mib) << 20
	profDir := guestDir + "/prof"
	if p.Kind == "offload" {
		srv, cli := offloadConfigs(p)
		for i, f := range []struct{ name, body string }{{"client.yaml", cli}, {"server.yaml", srv}} {
			if _, err := r.ctl[i].do(request{Op: "write", Path: guestDir + "/" + f.name, Data: []byte(f.body)}); err != nil {
				return run, err
			}
		}
		ends := [2][]string{{p.Command(), "client", "-c", guestDir + "/client.yaml"}, {p.Command(), "server", "-c", guestDir + "/server.yaml"}}
		if profile {
			ends[0] = append(ends[0], "-cpuprofile", profDir+"/"+p.Name+"-client-A.prof")
			ends[1] = append(ends[1], "-cpuprofile", profDir+"/"+p.Name+"-server-B.prof")
			for i := range r.ctl {
				if _, err := r.ctl[i].sh("mkdir -p " + profDir); err != nil {
					return run, err
				}
			}
		}
		for _, i := range []int{1, 0} { // the server first
			if _, err := r.ctl[i].do(request{Op: "start", ID: "offload", Argv: ends[i], Env: p.Env}); err != nil {
				return run, err
			}
		}
		if err := r.waitUp(ctx, target(p.Kind)); err != nil {
			return run, err
		}
	}
	if p.Kind == "relay-zc" || p.Kind == "relay-seal" {
		// The floor with MSG_ZEROCOPY sends on both hops (A's to the
		// wire, B's to the sink), or with the wire's hop sealed (A seals
		// toward B, B opens what it accepts), up for this run only.
		port, args := relayZCPort, [2][]string{{"-zerocopy"}, {"-zerocopy"}}
		if p.Kind == "relay-seal" {
			port = sealPort
			for i, side := range []string{"target", "listen"} {
				args[i] = []string{"-seal", side, "-engine", p.Eng, "-suite", p.Suite, "-full=" + strconv.FormatBool(p.Full)}
			}
		}
		relays := [2][2]string{{"10.77.1.1:" + port, "10.77.0.2:" + port}, {"10.77.0.2:" + port, "10.77.2.2:" + sinkPort2}}
		for _, i := range []int{1, 0} {
			argv := append(append([]string{"router", "relay"}, args[i]...), "-listen", relays[i][0], "-target", relays[i][1])
			if _, err := r.ctl[i].do(request{Op: "start", ID: p.Kind, Argv: argv}); err != nil {
				return run, err
			}
		}
		if err := r.waitUp(ctx, target(p.Kind)); err != nil {
			return run, err
		}
	}
	var c0 [2]counters
	for i := range r.ctl {
		var err error
		if c0[i], err = r.counters(i); err != nil {
			return run, err
		}
	}
	g0, h0, err := r.clocks(true)
	if err != nil {
		return run, err
	}
	cpu0, err := r.cpu()
	if err != nil {
		return run, err
	}
	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	res, sendErr := wgcompare.Send(sctx, testutil.DialIn("/run/netns/"+r.ns[0]), target(p.Kind), r.pattern, payload)
	cancel()
	run.HostS = time.Since(start).Seconds()
	cpu1, err := r.cpu()
	if err != nil {
		return run, err
	}
	g1, h1, err := r.clocks(false)
	if err != nil {
		return run, err
	}
	for i := range r.ctl {
		ans, err := r.ctl[i].do(request{Op: "unwatch"})
		if err != nil {
			return run, err
		}
		run.Router[i].Kicks = ans.Kicks
	}
	var c1 [2]counters
	for i := range r.ctl {
		if c1[i], err = r.counters(i); err != nil {
			return run, err
		}
	}
	if p.Kind == "relay-zc" || p.Kind == "relay-seal" {
		// Each relay's counts (relay-zc: sends, those the kernel copied
		// anyway), or what a sealing relay said.
		var out string
		for i, verb := range []string{"sealed", "opened"} {
			ans, err := r.ctl[i].do(request{Op: "stop", ID: p.Kind})
			if err != nil {
				return run, fmt.Errorf("%s on %s: %w\n%s", p.Kind, sides[i].name, err, ans.Out)
			}
			out += fmt.Sprintf("\n%s: %s", sides[i].name, strings.TrimSpace(ans.Out))
			// A seals the stream, B opens it.
			if n := sealedBytes(ans.Out, verb); p.Kind == "relay-seal" && sendErr == nil && n < payload {
				return run, fmt.Errorf("router %s's relay %s %d bytes for a %d-byte stream:%s", sides[i].name, verb, n, payload, out)
			}
		}
		r.logf("%s:%s", p.Name, out)
	}
	var endsOut string
	if p.Kind == "offload" {
		for _, i := range []int{0, 1} {
			if m, err := r.ctl[i].sh("wget -q -O - http://127.0.0.1:9100/metrics | grep '^offload_frames_total' || true"); err == nil {
				endsOut += fmt.Sprintf("\n%s frames: %s", sides[i].name, strings.Join(strings.Fields(m), " "))
			}
			ans, err := r.ctl[i].do(request{Op: "stop", ID: "offload"})
			if err != nil {
				return run, fmt.Errorf("offload on %s: %w\n%s", sides[i].name, err, ans.Out)
			}
			if sendErr != nil {
				endsOut += fmt.Sprintf("\n%s's offload said:\n%s", sides[i].name, ans.Out)
			}
		}
		r.logf("%s:%s", p.Name, endsOut)
		if profile {
			if err := r.fetchProfiles(ctx, p.Name, profDir); err != nil {
				return run, err
			}
		}
	}
	if sendErr != nil {
		return run, fmt.Errorf("%w%s", sendErr, endsOut)
	}
	run.Bytes = res.Bytes
	for i := range run.Router {
		run.Router[i].QemuS = cpu1[i][0] - cpu0[i][0]
		run.Router[i].VCPUS = cpu1[i][1] - cpu0[i][1]
		run.Router[i].GuestS = float64(g1[i]-g0[i]) / 1e9
		run.Router[i].ClockS = h1[i].Sub(h0[i]).Seconds()
		run.Router[i].IRQ = c1[i].irq - c0[i].irq
		run.Router[i].Guest = c1[i].cpu.sub(c0[i].cpu)
	}
	// The stream must have crossed the path it names.
	if d := c1[1].wanRx - c0[1].wanRx; d < payload {
		return run, fmt.Errorf("router B's wire card received %d bytes for a %d-byte stream: the data took another way", d, payload)
	}
	// At least a frame, and a device request, per path frame (64 KiB where
	// the path sets none or less).
	minFrames := payload / max(p.FrameBytes(), 64<<10)
	switch p.Kind {
	case "wireguard":
		if d := c1[0].wgTx - c0[0].wgTx; d < payload {
			return run, fmt.Errorf("router A's wg0 sent %d bytes for a %d-byte stream", d, payload)
		}
	case "ipsec":
		if d := c1[0].espBytes - c0[0].espBytes; d < payload {
			return run, fmt.Errorf("router A's ESP SA carried %d bytes for a %d-byte stream", d, payload)
		}
	case "offload":
		// Every frame through the path's engine: A seals, B opens.
		for i, dir := range []string{"encrypt", "decrypt"} {
			if n := engineFrames(endsOut, sides[i].name, p.Eng, dir); n < minFrames {
				return run, fmt.Errorf("%s %sed %d frames with %s for a %d-byte stream:%s", sides[i].name, strings.TrimSuffix(dir, "rypt"), n, p.Eng, payload, endsOut)
			}
		}
	}
	if p.Device {
		for i := range run.Router {
			if run.Router[i].IRQ < minFrames {
				return run, fmt.Errorf("router %s: the device's line raised %d interrupts for %d bytes: the device did not do the work", sides[i].name, run.Router[i].IRQ, payload)
			}
		}
	}
	return run, nil
}

// sealedBytes reads the most bytes a sealing relay's report lines
// ("ADDR: sealed N frames, B bytes (...)") say were sealed or opened (verb).
func sealedBytes(out, verb string) int64 {
	re := regexp.MustCompile(verb + ` \d+ frames, (\d+) bytes`)
	var most int64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		most = max(most, n)
	}
	return most
}

// engineFrames reads, from measure's summary of the ends' /metrics
// ("NAME frames: offload_frames_total{...} N ..."), router name's frame
// count for engine and dir.
func engineFrames(summary, name, engine, dir string) int64 {
	re := regexp.MustCompile(`offload_frames_total\{engine="` + regexp.QuoteMeta(engine) + `",dir="` + dir + `"\} (\d+)`)
	for _, l := range strings.Split(summary, "\n") {
		if !strings.HasPrefix(l, name+" frames:") {
			continue
		}
		if m := re.FindStringSubmatch(l); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			return n
		}
	}
	return 0
}

// clocks reads both guests' clocks (watch arms their stall watches) and
// the host's at the middle of each request.
func (r *routersRig) clocks(watch bool) ([2]int64, [2]time.Time, error) {
	var g [2]int64
	var h [2]time.Time
	for i := range r.ctl {
		t0 := time.Now()
		ans, err := r.ctl[i].do(request{Op: "clock", Watch: watch})
		if err != nil {
			return g, h, err
		}
		t1 := time.Now()
		g[i], h[i] = ans.MonoNS, t0.Add(t1.Sub(t0)/2)
	}
	return g, h, nil
}

// cpu reads both qemus' CPU seconds: all threads, and the vCPU thread.
func (r *routersRig) cpu() ([2][2]float64, error) {
	var c [2][2]float64
	for i, pid := range r.pids {
		all, err := qemucpu.Process(pid)
		if err != nil {
			return c, fmt.Errorf("router %s's qemu: %w", sides[i].name, err)
		}
		v, err := qemucpu.VCPU(pid)
		if err != nil {
			return c, fmt.Errorf("router %s's qemu: %w", sides[i].name, err)
		}
		c[i] = [2]float64{all.Seconds(), v.Seconds()}
	}
	return c, nil
}

// waitUp sends one checked byte until it arrives (90 s).
func (r *routersRig) waitUp(ctx context.Context, addr string) error {
	wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	dial := testutil.DialIn("/run/netns/" + r.ns[0])
	var err error
	for wctx.Err() == nil {
		if _, err = wgcompare.Send(wctx, dial, addr, r.pattern, 1); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("waiting for %s: %w (%v)", addr, context.Cause(ctx), err)
	}
	return fmt.Errorf("%s not reachable within 90s: %v", addr, err)
}

// fetchProfiles copies the two ends' profiles out and writes go tool pprof
// -top beside them, in -out's profiles-routers2/.
func (r *routersRig) fetchProfiles(ctx context.Context, name, profDir string) error {
	dir := filepath.Join(r.dir, "profiles-routers2")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var guest []string
	for i, f := range []string{name + "-client-A.prof", name + "-server-B.prof"} {
		g := profDir + "/" + f
		ans, err := r.ctl[i].do(request{Op: "read", Path: g})
		if err != nil {
			return fmt.Errorf("profile %s: %w", g, err)
		}
		host := filepath.Join(dir, strings.TrimPrefix(strings.ReplaceAll(g, "/", "_"), "_"))
		if err := os.WriteFile(host, ans.Data, 0o644); err != nil {
			return err
		}
		guest = append(guest, g)
	}
	return pprofTops(ctx, dir, guest)
}

func writeRouterSpans(file string, runs []routerRun) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range runs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func readRouterSpans(file string, boot int) ([]routerRun, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var runs []routerRun
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l == "" {
			continue
		}
		var r routerRun
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		r.Boot = boot
		runs = append(runs, r)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: no runs", file)
	}
	return runs, nil
}
