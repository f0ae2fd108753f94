// Command anchor prints the router-class anchor table (docs/router-anchor.md):
// it boots the emulated mipsel router (malta 24Kc, 1 CPU, virtio-crypto)
// with harness/vm once per -boots, runs harness/wgcompare's
// TestKernelRouterAnchor there (plaintext, kernel WireGuard between every
// other run, two bare Go relays, ssh -L, kernel IPsec ESP through the
// device, offload with the device through afalg and cryptodev, and in
// software), reads every run's qemu CPU seconds from harness/vm's -spans
// file, pools the runs of all boots and prints the table: MB per qemu CPU
// second, ms/MB added beyond plaintext, and × each anchor.
//
//	go run ./harness/anchor -mib 32 -rounds 3 -boots 3
//
// It fails when a boot fails (a missing piece, data that did not arrive
// intact, a run that did not cross the path it names), never on a slow
// figure. Run it from the repository's root.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/offload-dev/offload/harness/wgcompare"
)

// modules are what the guest needs beyond harness/vm's base set: veth and
// WireGuard, and for ESP with manual SAs esp4, xfrm_user, xfrm_algo,
// authenc, the IV generators and the RNG they seed from (without them
// ip xfrm state add fails "unable to initialize cryptographic operations").
const modules = "veth,wireguard,authenc,esp4,xfrm_user,xfrm_algo,echainiv,seqiv,drbg,jitterentropy_rng"

// debs are Debian's mipsel programs in the guest: wg, sshd and ssh, and
// iproute2's ip for ip xfrm (busybox's ip has none).
var debs = []string{"wireguard-tools", "openssh-server", "openssh-client", "iproute2"}

type options struct {
	mib, rounds, boots int
	paths              string
	offload            string
	cryptodev          string
	timeout            time.Duration
	out                string
	quiet              bool
	kernelArgs         string
	pool               string
	profile            string
	kick               time.Duration
	baseline           string
	routers            int
	edgeIRQs           bool
	set, twin          []string // config lines for both offload ends (-routers 2)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "anchor:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := &options{}
	fs := flag.NewFlagSet("anchor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.mib, "mib", 32, "MiB per run")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds per boot (each path once per round, WireGuard after every run)")
	fs.IntVar(&o.boots, "boots", 1, "boots to pool")
	fs.StringVar(&o.paths, "paths", "", "comma-separated path names to measure besides WireGuard (default: all)")
	fs.StringVar(&o.offload, "offload", "./cmd/offload", "offload: the command package to build, or a mipsle binary built elsewhere")
	fs.StringVar(&o.cryptodev, "cryptodev", "auto", "the cryptodev path: auto (when scripts/cryptodev-ko.sh has the fixture), on (required) or off")
	fs.DurationVar(&o.timeout, "timeout", 0, "per boot (default: from -mib and -rounds)")
	fs.StringVar(&o.out, "out", "", "folder for each boot's console log and spans (default: a temporary one, removed)")
	fs.BoolVar(&o.quiet, "quiet", false, "do not stream the guest's console")
	fs.StringVar(&o.pool, "pool", "", "comma-separated spans-N.jsonl files of earlier boots (from -out) to pool and print, without booting")
	fs.StringVar(&o.profile, "profile", "", "comma-separated offload paths (e.g. afalg-64k,cryptodev-64k) whose two ends write CPU profiles in the last boot's last round; "+
		"copied to -out as profiles-N/, with go tool pprof -top flat and -cum beside them")
	fs.DurationVar(&o.kick, "kick", 0, "write a console line this often during every run (the UART's i8259 interrupt releases late virtio completions; 0: never)")
	fs.StringVar(&o.baseline, "baseline", "", "a git revision (or a mipsle offload binary) to build as the guest's "+wgcompare.Baseline+
		" for the *-base paths, which measure it beside this tree's build in the same boots (name them in -paths)")
	fs.IntVar(&o.routers, "routers", 1, "1: one guest holds both tunnel ends, the load and the sink (harness/wgcompare's TestKernelRouterAnchor); "+
		"2: two routers, each its own qemu, joined by a wire, the sender and the sink on the host behind them (routers.go), each router's CPU per byte measured")
	fs.BoolVar(&o.edgeIRQs, "edge-irqs", false, "-routers 2: leave the virtio devices' i8259 lines edge-triggered, as malta's firmware sets them "+
		"(by default each router's agent makes them level-triggered; docs/router-anchor.md, \"The i8259 lines\")")
	fs.Func("set", "-routers 2: a config line for both offload ends of every offload path (\"resume_window: 0s\"), repeatable", func(l string) error {
		o.set = append(o.set, l)
		return nil
	})
	fs.Func("twin", "-routers 2: a config line for a twin of every offload path, NAME-twin, run in the same rounds with these lines in place of -set's "+
		"(\"resume_window: 1m\"), repeatable", func(l string) error {
		o.twin = append(o.twin, l)
		return nil
	})
	fs.StringVar(&o.kernelArgs, "kernel-args", "", "appended to the guest kernel's command line (harness/vm -kernel-args)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case o.mib <= 0 || o.rounds <= 0 || o.boots <= 0:
		return errors.New("-mib, -rounds and -boots must be positive")
	case o.cryptodev != "auto" && o.cryptodev != "on" && o.cryptodev != "off":
		return fmt.Errorf("-cryptodev %q: want auto, on or off", o.cryptodev)
	case o.routers != 1 && o.routers != 2:
		return fmt.Errorf("-routers %d: want 1 or 2", o.routers)
	case o.routers == 1 && o.edgeIRQs:
		return errors.New("-edge-irqs: -routers 2 only (the one guest keeps malta's edge-triggered lines)")
	case o.routers == 1 && len(o.set)+len(o.twin) > 0:
		return errors.New("-set, -twin: -routers 2 only")
	case o.routers == 2 && o.kick > 0:
		return errors.New("-kick: one guest only (-routers 2 kicks a stalled run from each router's agent)")
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.pool != "" && o.routers == 2 {
		var runs []routerRun
		files := strings.Split(o.pool, ",")
		for b, f := range files {
			got, err := readRouterSpans(f, b)
			if err != nil {
				return err
			}
			runs = append(runs, got...)
		}
		fmt.Fprintf(stdout, "Router anchor, two routers: %d boot(s) pooled from %s\n\n", len(files), o.pool)
		writeRouterTable(stdout, runs, len(files))
		return nil
	}
	if o.pool != "" {
		var runs []sample
		files := strings.Split(o.pool, ",")
		for b, f := range files {
			got, err := readSpans(f, b)
			if err != nil {
				return err
			}
			runs = append(runs, got...)
		}
		fmt.Fprintf(stdout, "Router anchor: %d boot(s) pooled from %s\n\n", len(files), o.pool)
		writeTable(stdout, runs, len(files))
		return nil
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run from the repository's root: %w", err)
	}
	if o.timeout == 0 {
		// Generous: about 3 s of TCG per MiB for the slowest path, nine
		// paths and as many WireGuard runs a round, on a busy host.
		o.timeout = 10*time.Minute + time.Duration(o.mib*o.rounds)*40*time.Second
	}
	dir := o.out
	if dir == "" {
		tmp, err := os.MkdirTemp("", "offload-anchor-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vm := filepath.Join(dir, "vm")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", vm, "./harness/vm").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./harness/vm: %w\n%s", err, out)
	}
	vmArgs := []string{"-arch", "mipsle", "-smp", "1", "-virtio-crypto", "-modules", modules,
		"-bin", o.offload, "-test", "./harness/wgcompare", "-run", "KernelRouterAnchor",
		"-env", "OFFLOAD_ANCHOR_MIB=" + strconv.Itoa(o.mib), "-env", "OFFLOAD_ANCHOR_ROUNDS=" + strconv.Itoa(o.rounds),
		"-timeout", o.timeout.String()}
	for _, d := range debs {
		vmArgs = append(vmArgs, "-deb", d)
	}
	if o.kernelArgs != "" {
		vmArgs = append(vmArgs, "-kernel-args", o.kernelArgs)
	}
	if o.paths != "" {
		vmArgs = append(vmArgs, "-env", "OFFLOAD_ANCHOR_PATHS="+o.paths)
	}
	if o.kick > 0 {
		vmArgs = append(vmArgs, "-env", "OFFLOAD_ANCHOR_KICK="+o.kick.String())
	}
	if o.baseline != "" {
		bin, err := buildBaseline(ctx, o.baseline, dir)
		if err != nil {
			return err
		}
		vmArgs = append(vmArgs, "-bin", bin)
	}
	ko, err := cryptodevModule(ctx, o.cryptodev, stderr)
	if err != nil {
		return err
	}
	if o.routers == 2 {
		common := []string{"-arch", "mipsle", "-smp", "1", "-virtio-crypto", "-modules", routerModules,
			"-bin", o.offload, "-bin", "./harness/anchor/router", "-timeout", o.timeout.String()}
		for _, d := range debs {
			common = append(common, "-deb", d)
		}
		if o.kernelArgs != "" {
			common = append(common, "-kernel-args", o.kernelArgs)
		}
		if o.baseline != "" {
			bin, err := buildBaseline(ctx, o.baseline, dir)
			if err != nil {
				return err
			}
			common = append(common, "-bin", bin)
		}
		if ko != "" {
			common = append(common, "-ko", ko)
		} else if o.cryptodev != "off" {
			o.cryptodev = "off" // auto without the fixture: no cryptodev paths
		}
		return runRouters(ctx, o, vm, common, dir, stdout, stderr)
	}
	if ko != "" {
		vmArgs = append(vmArgs, "-ko", ko, "-env", "OFFLOAD_ANCHOR_CRYPTODEV=1")
	}
	profiles, err := profileFiles(o.profile, o.paths, ko != "")
	if err != nil {
		return err
	}
	var runs []sample
	started, load0 := time.Now(), hostLoad()
	for b := range o.boots {
		spans := filepath.Join(dir, fmt.Sprintf("spans-%d.jsonl", b+1))
		args := append(append([]string{}, vmArgs...), "-spans", spans, "-log", filepath.Join(dir, fmt.Sprintf("console-%d.log", b+1)))
		if o.quiet {
			args = append(args, "-quiet")
		}
		profDir := filepath.Join(dir, fmt.Sprintf("profiles-%d", b+1))
		last := b == o.boots-1 && len(profiles) > 0
		if last {
			// Only the last boot profiles, so the other boots' runs
			// carry no profiler and the two can be set side by side.
			args = append(args, "-env", "OFFLOAD_ANCHOR_PROFILE="+o.profile, "-env", "OFFLOAD_ANCHOR_PROFILE_DIR="+guestProfileDir, "-out", profDir)
			for _, f := range profiles {
				args = append(args, "-pprof", f)
			}
		}
		fmt.Fprintf(stderr, "anchor: boot %d of %d: %s %s\n", b+1, o.boots, vm, strings.Join(args, " "))
		cmd := exec.CommandContext(ctx, vm, args...)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		// An interrupt lets harness/vm stop its qemu; a kill would leave
		// qemu running.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 30 * time.Second
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("boot %d: harness/vm: %w (its output above says why)", b+1, err)
		}
		got, err := readSpans(spans, b)
		if err != nil {
			return err
		}
		runs = append(runs, got...)
		if last {
			if err := pprofTops(ctx, profDir, profiles); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "anchor: profiles and their go tool pprof -top (flat, cum) in %s\n", profDir)
		}
	}
	fmt.Fprintf(stdout, "\nRouter anchor: %d boot(s) × %d round(s), %d MiB per run, mipsel malta 24Kc, 1 CPU, virtio-crypto; %s, %.0f min; "+
		"host load average %s at the start, %s at the end (on a busy host the guest batches more per wakeup and every path costs less: compare tables made on alike hosts)\n\n",
		o.boots, o.rounds, o.mib, time.Now().UTC().Format("2006-01-02 15:04 UTC"), time.Since(started).Minutes(), load0, hostLoad())
	writeTable(stdout, runs, o.boots)
	return nil
}

// hostLoad is the host's 1-minute load average as /proc/loadavg has it
// (with the CPU count), or "unknown".
func hostLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if err != nil || len(f) == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%s (%d CPUs)", f[0], runtime.NumCPU())
}

// buildBaseline returns a mipsle offload binary named wgcompare.Baseline in
// dir: rev itself when it is a file, else cmd/offload as of git revision
// rev, built from a git archive of it (the work tree is left alone).
func buildBaseline(ctx context.Context, rev, dir string) (string, error) {
	out := filepath.Join(dir, wgcompare.Baseline)
	if st, err := os.Stat(rev); err == nil && st.Mode().IsRegular() {
		b, err := os.ReadFile(rev)
		if err != nil {
			return "", err
		}
		return out, os.WriteFile(out, b, 0o755)
	}
	src := filepath.Join(dir, "baseline-src")
	if err := os.RemoveAll(src); err != nil {
		return "", err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	// Two steps, not a pipe: a pipe's status would be tar's, and tar
	// can pass on what a failed git archive left unwritten.
	tarball := src + ".tar"
	for _, args := range [][]string{{"git", "archive", "--format=tar", "-o", tarball, rev}, {"tar", "-x", "-f", tarball, "-C", src}} {
		if b, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("-baseline %s: %s: %w\n%s", rev, strings.Join(args[:2], " "), err, b)
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/offload")
	build.Dir = src
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=mipsle", "GOMIPS=softfloat", "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("-baseline %s: go build ./cmd/offload: %w\n%s", rev, err, b)
	}
	return out, nil
}

// cryptodevModule builds the cryptodev module for the mipsel kernel with
// scripts/cryptodev-ko.sh, which exits 3 when the fixture is missing.
func cryptodevModule(ctx context.Context, mode string, stderr io.Writer) (string, error) {
	if mode == "off" {
		return "", nil
	}
	cmd := exec.CommandContext(ctx, "bash", "scripts/cryptodev-ko.sh", "mipsle")
	cmd.Stderr = stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 && mode == "auto" {
		fmt.Fprintln(stderr, "anchor: no cryptodev fixture: the cryptodev path is left out")
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("scripts/cryptodev-ko.sh mipsle: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// readSpans reads one boot's -spans file.
func readSpans(file string, boot int) ([]sample, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("boot %d: %w", boot+1, err)
	}
	defer f.Close()
	var runs []sample
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Name  string            `json:"name"`
			Bytes int64             `json:"bytes"`
			HostS float64           `json:"host_s"`
			QemuS float64           `json:"qemu_s"`
			VCPUS float64           `json:"vcpu_s"`
			End   map[string]string `json:"end"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if rec.QemuS <= 0 {
			return nil, fmt.Errorf("%s: run %s has no qemu CPU time", file, rec.Name)
		}
		irq, _ := strconv.ParseInt(rec.End["irq"], 10, 64)
		kicks, _ := strconv.Atoi(rec.End["rescue_kicks"])
		runs = append(runs, sample{Boot: boot, Name: rec.Name, Bytes: rec.Bytes, QemuS: rec.QemuS, VCPUS: rec.VCPUS, HostS: rec.HostS, IRQ: irq, Kicks: kicks})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("%s: no runs", file)
	}
	return runs, nil
}

// guestProfileDir is where the profiled offload ends write in the guest.
const guestProfileDir = "/tmp/anchor-prof"

// profileFiles lists the guest files -profile asks for: a server and a
// client profile per path. A path the boot will not run (left out by
// -paths, or cryptodev without its module) is refused here rather than
// missed after the boot.
func profileFiles(profile, paths string, cryptodev bool) ([]string, error) {
	if profile == "" {
		return nil, nil
	}
	var files []string
	for _, p := range strings.Split(profile, ",") {
		path, ok := wgcompare.PathByName(p)
		switch {
		case !ok || path.Kind != "offload":
			return nil, fmt.Errorf("-profile %q: want offload path names such as afalg-64k", p)
		case paths != "" && !slices.Contains(strings.Split(paths, ","), p):
			return nil, fmt.Errorf("-profile %s: not among -paths %s", p, paths)
		case path.Cryptodev() && !cryptodev:
			return nil, fmt.Errorf("-profile %s: the cryptodev module is not loaded in this run (-cryptodev)", p)
		}
		for _, end := range []string{"server", "client"} {
			files = append(files, guestProfileDir+"/"+p+"-"+end+".prof")
		}
	}
	return files, nil
}

// pprofTops writes go tool pprof -top, by flat and by cumulative time,
// beside each profile harness/vm copied out (it names them after their
// guest path).
func pprofTops(ctx context.Context, dir string, profiles []string) error {
	for _, f := range profiles {
		host := filepath.Join(dir, strings.TrimPrefix(strings.ReplaceAll(f, "/", "_"), "_"))
		for _, v := range []struct{ suffix, flag string }{{".top.txt", "-flat"}, {".cum.txt", "-cum"}} {
			out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", v.flag, "-nodecount=40", host).Output()
			if err != nil {
				return fmt.Errorf("go tool pprof -top %s %s: %w", v.flag, host, err)
			}
			if err := os.WriteFile(host+v.suffix, out, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}
