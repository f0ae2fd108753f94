// Command vm boots Debian's kernel under qemu with a small initramfs
// (busybox, the kernel modules offload needs, and the project's static
// binaries), runs test binaries and shell lines in the guest, and exits
// non-zero if any step failed, the VM hung, or the guest's summary never
// came. It is how code that needs AF_ALG, a crypto device or netem is tested
// for real on machines whose own kernel has none of them.
//
//	go run ./harness/vm -arch amd64 -virtio-crypto -test ./engine \
//	    -bin ./cmd/offload -cmd 'offload engines'
//
// -deb puts a Debian package's programs into the guest (deb.go); guest
// programs time work from the host with span markers (spans.go); -fetch and
// -pprof copy files out over the console, -pprof printing the profile by
// function and by component (pprof.go). The router-class anchor
// (harness/wgcompare) uses all of them.
//
// docs/kernel-notes.md has the recipe this follows.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error {
	*l = append(*l, s)
	return nil
}

type options struct {
	arch         string
	smp          int
	mem          int
	timeout      time.Duration
	virtioCrypto bool
	tests        listFlag
	bins         listFlag
	cmds         listFlag
	kos          listFlag
	modules      string
	run          string
	bench        string
	benchtime    string
	log          string
	netns        bool
	boot         string
	quiet        bool
	prefix       string
	keep         bool
	debs         listFlag
	env          listFlag
	fetch        listFlag
	pprof        listFlag
	out          string
	spans        string
	kernelArgs   string
	qemuArgs     listFlag
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("vm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.arch, "arch", "amd64", "guest architecture: "+archNames())
	fs.IntVar(&o.smp, "smp", 2, "guest CPUs")
	fs.IntVar(&o.mem, "mem", 512, "guest memory in MB")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "kill the VM and fail after this long")
	fs.BoolVar(&o.virtioCrypto, "virtio-crypto", false, "add a virtio-crypto device and load its driver")
	fs.Var(&o.tests, "test", "package whose tests run in the guest (repeatable; ./pkg/... allowed)")
	fs.Var(&o.bins, "bin", "command package to build and put at /bin/<name>, or a binary file to copy there as it is (repeatable)")
	fs.Var(&o.cmds, "cmd", "shell line to run in the guest after the tests (repeatable)")
	fs.Var(&o.kos, "ko", "out-of-tree .ko file to load (repeatable)")
	fs.StringVar(&o.modules, "modules", "", "extra kernel modules to load, comma separated")
	fs.StringVar(&o.run, "run", "Kernel|Integration", "-test.run regexp for the guest tests")
	fs.StringVar(&o.bench, "bench", "", "-test.bench regexp for the guest tests")
	fs.StringVar(&o.benchtime, "benchtime", "", "-test.benchtime for the guest tests")
	fs.StringVar(&o.log, "log", "", "save the whole console to this file")
	fs.BoolVar(&o.netns, "netns", false, "add iproute2's ip and tc (/usr/sbin), veth and sch_netem (amd64); "+
		"-cmd lines get iproute2's, but a nested busybox sh -c runs busybox's own ip unless given /usr/sbin/ip")
	fs.StringVar(&o.boot, "boot", "auto", "auto, pvh (uncompressed vmlinux with qboot) or bios (vmlinuz)")
	fs.BoolVar(&o.quiet, "quiet", false, "do not stream the guest console to stdout")
	fs.StringVar(&o.prefix, "prefix", "", "prefix for streamed guest console lines")
	fs.BoolVar(&o.keep, "keep", false, "keep the work folder (binaries, initrd) and print its path")
	fs.Var(&o.debs, "deb", "Debian package of the guest's architecture whose programs go into the guest, "+
		"with the libraries they need (repeatable; e.g. wireguard-tools for wg)")
	fs.Var(&o.env, "env", "NAME=VALUE exported to every step in the guest (repeatable)")
	fs.Var(&o.fetch, "fetch", "guest file to copy out over the console after the steps, into -out (repeatable)")
	fs.Var(&o.pprof, "pprof", "guest CPU profile to copy out and print with go tool pprof -top on the host, then summed by component (repeatable)")
	fs.StringVar(&o.out, "out", "", "folder for -fetch and -pprof files (default for -pprof: the work folder)")
	fs.StringVar(&o.kernelArgs, "kernel-args", "", "appended to the guest kernel's command line (e.g. nohz=off)")
	fs.Var(&o.qemuArgs, "qemu-arg", "one more qemu argument, appended to its command line as it is (repeatable; e.g. -qemu-arg=-nic -qemu-arg=tap,ifname=t0,script=no,model=virtio-net-pci "+
		"for a network card, or -qemu-arg=-pidfile -qemu-arg=FILE)")
	fs.StringVar(&o.spans, "spans", "", "write every span (spans.go) to this file, one JSON object a line, pass or fail")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./harness/vm [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q (steps are given with -test and -cmd)", fs.Args())
	}
	a, err := lookupArch(o.arch)
	if err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// The defaults fit amd64; smaller boards get their own maximum.
	if !set["smp"] && a.MaxSMP > 0 && o.smp > a.MaxSMP {
		o.smp = a.MaxSMP
	}
	if !set["mem"] && a.MaxMemMB > 0 && o.mem > a.MaxMemMB {
		o.mem = a.MaxMemMB
	}
	switch {
	case o.smp < 1:
		return nil, fmt.Errorf("-smp %d: want at least 1", o.smp)
	case a.MaxSMP > 0 && o.smp > a.MaxSMP:
		return nil, fmt.Errorf("-smp %d: the %s machine has at most %d CPUs", o.smp, o.arch, a.MaxSMP)
	case o.mem < 128:
		return nil, fmt.Errorf("-mem %d: want at least 128 MB", o.mem)
	case a.MaxMemMB > 0 && o.mem > a.MaxMemMB:
		return nil, fmt.Errorf("-mem %d: the %s machine takes at most %d MB", o.mem, o.arch, a.MaxMemMB)
	case o.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v: want a positive duration", o.timeout)
	case o.boot != "auto" && o.boot != "pvh" && o.boot != "bios":
		return nil, fmt.Errorf("-boot %q: want auto, pvh or bios", o.boot)
	case o.boot == "pvh" && !a.PVH:
		return nil, fmt.Errorf("-boot pvh: only for amd64")
	case o.netns && o.arch != "amd64":
		return nil, fmt.Errorf("-netns: only amd64 guests (the host's iproute2 is copied in)")
	case o.run == "":
		return nil, fmt.Errorf("-run: empty regexp")
	}
	for _, c := range o.cmds {
		if strings.TrimSpace(c) == "" {
			return nil, errors.New("-cmd: empty shell line")
		}
	}
	for _, e := range o.env {
		if k, _, ok := strings.Cut(e, "="); !ok || !envName.MatchString(k) {
			return nil, fmt.Errorf("-env %q: want NAME=VALUE", e)
		}
	}
	for _, f := range append(append([]string{}, o.fetch...), o.pprof...) {
		if !strings.HasPrefix(f, "/") || strings.ContainsAny(f, " \t\n='\"") {
			return nil, fmt.Errorf("-fetch/-pprof %q: want an absolute guest path without spaces, quotes or '='", f)
		}
	}
	if len(o.fetch) > 0 && o.out == "" {
		return nil, errors.New("-fetch: give -out FOLDER for the files")
	}
	for _, d := range o.debs {
		if d == "" || strings.ContainsAny(d, " :/") {
			return nil, fmt.Errorf("-deb %q: want a package name (the guest's architecture is added)", d)
		}
	}
	for _, k := range o.kos {
		if !strings.HasSuffix(k, ".ko") {
			return nil, fmt.Errorf("-ko %s: want an uncompressed .ko file", k)
		}
		if !fileExists(k) {
			return nil, fmt.Errorf("-ko %s: no such file", k)
		}
	}
	return o, nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command; it returns the exit code: 0 all steps passed,
// 1 a step failed or the VM hung or crashed, 2 bad flags or a setup error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "vm:", err)
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "vm: "+format+"\n", a...) }
	start := time.Now()
	plan, cfg, work, err := prepare(ctx, o, logf)
	if work != "" {
		if o.keep {
			logf("work folder kept: %s", work)
		} else {
			defer os.RemoveAll(work)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "vm:", err)
		return 2
	}
	qemu, err := lookQEMU(cfg.Arch)
	if err != nil {
		fmt.Fprintln(stderr, "vm:", err)
		return 2
	}
	qargs := qemuArgs(cfg)
	logf("prepared in %.1fs; booting %s (%s), steps: %s", time.Since(start).Seconds(),
		cfg.Kernel.Package, bootKind(cfg.Kernel), strings.Join(plan.steps(), " "))
	logf("%s %s", qemu, strings.Join(qargs, " "))

	sink := &consoleSink{Prefix: o.prefix, Report: newReport(plan.Nonce)}
	if !o.quiet {
		sink.Stream = stdout
	}
	if o.log != "" {
		f, err := os.Create(o.log)
		if err != nil {
			fmt.Fprintln(stderr, "vm: -log:", err)
			return 2
		}
		defer f.Close()
		sink.Log = f
	}
	boot := time.Now()
	runErr := runQEMU(ctx, qemu, qargs, o.timeout, sink, stderr)
	elapsed := time.Since(boot)
	verdict := sink.Report.verdict(plan.steps())
	r := sink.Report
	passed, failed := 0, 0
	for _, s := range r.Steps {
		if s.RC == 0 {
			passed++
		} else {
			failed++
		}
	}
	failed += len(plan.steps()) - len(r.Steps)
	writeSpanTable(stdout, r.Spans.Done, sink.PID)
	if o.spans != "" {
		if err := writeSpanFile(o.spans, r.Spans.Done); err != nil {
			fmt.Fprintln(stderr, "vm:", err)
			return 2
		}
	}
	if runErr != nil || verdict != nil {
		if runErr != nil {
			fmt.Fprintln(stderr, "vm: FAIL:", runErr)
		}
		if verdict != nil {
			for _, l := range strings.Split(verdict.Error(), "\n") {
				fmt.Fprintln(stderr, "vm: FAIL:", l)
			}
		}
		if failed == 0 {
			failed = 1
		}
		fmt.Fprintf(stdout, "vm: %d passed, %d failed\n", passed, failed)
		logf("FAIL after %.1fs in the VM (%.1fs in all)", elapsed.Seconds(), time.Since(start).Seconds())
		return 1
	}
	fmt.Fprintf(stdout, "vm: %d passed, %d failed\n", passed, failed)
	if err := afterRun(ctx, o, work, r, sink.PID, stdout, logf); err != nil {
		fmt.Fprintln(stderr, "vm: FAIL:", err)
		return 1
	}
	logf("PASS: kernel %s, %.1fs in the VM (%.1fs in all)", r.Kernel, elapsed.Seconds(), time.Since(start).Seconds())
	return 0
}

func bootKind(k *kernel) string {
	if k.Vmlinux != "" {
		return "PVH vmlinux via qboot"
	}
	return "vmlinuz via the default firmware"
}

// prepare fetches the kernel, builds the binaries, resolves the modules and
// writes the initramfs. It returns the work folder as soon as it exists,
// so the caller can clean up after an error too.
func prepare(ctx context.Context, o *options, logf func(string, ...any)) (*guestPlan, vmConfig, string, error) {
	a, err := lookupArch(o.arch)
	if err != nil {
		return nil, vmConfig{}, "", err
	}
	if _, err := lookQEMU(a); err != nil {
		return nil, vmConfig{}, "", err
	}
	cache, err := cacheDir()
	if err != nil {
		return nil, vmConfig{}, "", err
	}
	wantPVH := o.boot != "bios"
	if wantPVH && !fileExists(qbootROM) {
		if o.boot == "pvh" {
			return nil, vmConfig{}, "", fmt.Errorf("-boot pvh: %s missing (qemu-system-data)", qbootROM)
		}
		wantPVH = false
	}
	k, err := fetchKernel(ctx, cache, a, wantPVH, logf)
	if err != nil {
		return nil, vmConfig{}, "", err
	}
	if o.boot == "pvh" && k.Vmlinux == "" {
		return nil, vmConfig{}, "", fmt.Errorf("-boot pvh: %s cannot be booted through PVH", k.Package)
	}
	busybox, err := fetchBusybox(ctx, cache, a, logf)
	if err != nil {
		return nil, vmConfig{}, "", err
	}

	work, err := os.MkdirTemp("", "offload-vm-")
	if err != nil {
		return nil, vmConfig{}, "", fmt.Errorf("work folder: %w", err)
	}
	nonce := make([]byte, 6)
	if _, err := rand.Read(nonce); err != nil {
		return nil, vmConfig{}, work, fmt.Errorf("nonce: %w", err)
	}
	plan := &guestPlan{
		Nonce:     hex.EncodeToString(nonce),
		Cmds:      o.cmds,
		Run:       o.run,
		Bench:     o.bench,
		Benchtime: o.benchtime,
		NetNS:     o.netns,
		Env:       o.env,
	}
	for _, f := range append(append([]string{}, o.fetch...), o.pprof...) {
		if !slices.Contains(plan.Fetch, f) {
			plan.Fetch = append(plan.Fetch, f)
		}
	}
	if o.timeout >= 2*time.Minute {
		// A hung test then dumps its goroutines before the VM is killed.
		plan.TestTimeout = o.timeout - time.Minute
	}
	if plan.Tests, err = buildTests(ctx, a, o.tests, work, logf); err != nil {
		return nil, vmConfig{}, work, err
	}
	if plan.Bins, err = buildBins(ctx, a, o.bins, work, logf); err != nil {
		return nil, vmConfig{}, work, err
	}

	ms, err := loadModuleSet(k.Modules, work)
	if err != nil {
		return nil, vmConfig{}, work, err
	}
	var reqs []modReq
	for _, m := range a.BaseModules {
		reqs = append(reqs, modReq{Name: m})
	}
	if o.virtioCrypto {
		for _, m := range a.VirtioCrypto {
			reqs = append(reqs, modReq{Name: m, Required: true})
		}
	}
	if o.netns {
		for _, m := range a.NetModules {
			reqs = append(reqs, modReq{Name: m, Required: true})
		}
	}
	for _, m := range strings.Split(o.modules, ",") {
		if m = strings.TrimSpace(m); m != "" {
			reqs = append(reqs, modReq{Name: m, Required: true})
		}
	}
	for _, f := range o.kos {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, vmConfig{}, work, fmt.Errorf("-ko: %w", err)
		}
		reqs = append(reqs, modReq{Name: modName(f), File: abs, Required: true})
	}
	order, notes, err := ms.resolve(reqs, k.Release)
	if err != nil {
		return nil, vmConfig{}, work, err
	}
	for _, n := range notes {
		logf("note: %s", n)
	}
	plan.Modules = order
	var names []string
	for _, m := range order {
		names = append(names, m.Name)
	}
	logf("modules to load: %s", strings.Join(names, " "))

	gf := guestFiles{Busybox: busybox}
	if gf.Debs, err = fetchDebPrograms(ctx, cache, a, o.debs, logf); err != nil {
		return nil, vmConfig{}, work, err
	}
	if o.netns {
		for _, t := range []string{"/usr/sbin/ip", "/usr/sbin/tc"} {
			if !fileExists(t) {
				return nil, vmConfig{}, work, fmt.Errorf("-netns: %s missing: install iproute2 (bash scripts/deps.sh)", t)
			}
		}
		gf.NetTools = []string{"/usr/sbin/ip", "/usr/sbin/tc"}
	}
	tree, err := buildTree(plan, gf)
	if err != nil {
		return nil, vmConfig{}, work, err
	}
	initrd := filepath.Join(work, "initrd.gz")
	if err := writeInitramfs(initrd, tree); err != nil {
		return nil, vmConfig{}, work, err
	}
	cfg := vmConfig{Arch: a, SMP: o.smp, MemMB: o.mem, Kernel: k, Initrd: initrd, VirtioCrypto: o.virtioCrypto, KernelArgs: o.kernelArgs, Extra: o.qemuArgs}
	return plan, cfg, work, nil
}

// afterRun writes the fetched files to -out (or the work folder) and prints
// each -pprof profile with go tool pprof -top. The profile is symbolized by
// the Go runtime that wrote it, so the guest's binary is not needed.
func afterRun(ctx context.Context, o *options, work string, r *report, pid int, stdout io.Writer, logf func(string, ...any)) error {
	dir := o.out
	if dir == "" {
		dir = work
	}
	if len(r.Files) > 0 {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("-out: %w", err)
		}
	}
	saved := map[string]string{}
	for _, f := range append(append([]string{}, o.fetch...), o.pprof...) {
		if _, ok := saved[f]; ok {
			continue
		}
		ff := r.Files[f]
		if ff == nil || ff.Err != nil {
			return fmt.Errorf("fetch %s: not copied out", f)
		}
		host := filepath.Join(dir, strings.TrimPrefix(strings.ReplaceAll(f, "/", "_"), "_"))
		if err := os.WriteFile(host, ff.Data, 0o644); err != nil {
			return fmt.Errorf("fetch %s: %w", f, err)
		}
		saved[f] = host
		logf("copied guest %s to %s (%d bytes)", f, host, len(ff.Data))
	}
	for _, f := range o.pprof {
		cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", saved[f])
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(stdout, "\nvm: go tool pprof -top %s (guest %s)\n%s", saved[f], f, out)
		if err != nil {
			return fmt.Errorf("go tool pprof -top %s: %w", saved[f], err)
		}
		all, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0", saved[f]).Output()
		if err != nil {
			return fmt.Errorf("go tool pprof -top %s: %w", saved[f], err)
		}
		if err := pprofComponents(string(all), stdout); err != nil {
			return fmt.Errorf("%s: %w", saved[f], err)
		}
	}
	return nil
}
