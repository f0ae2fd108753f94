package main

// offload bench: its flags, the setup of every policy, and the method's
// steps in order. measure/method runs the rounds and judges the
// figures; benchrun.go measures one cell once; benchreport.go makes the
// report's rows and prints them.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/sysinfo"
	"github.com/offload-dev/offload/measure/bench"
	"github.com/offload-dev/offload/measure/method"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel/suite"
)

func init() {
	register(&command{
		Name:  "bench",
		Short: "real throughput through the tunnel for each engine policy (in-process on loopback, or against a server)",
		Usage: "[-policy all|P,P...] [-streams 1,8] [-bytes N | -seconds S] [-repeat N] [-check [-tolerance F]] [-profile FILE] [-save-profile FILE] [-suite S] [-server ADDR -key FILE [-service NAME]] [-irq] [-json] | -sink ADDR",
		Flags: benchFlags,
	})
}

// benchService is the service name of the in-process server's sink, and
// the default service asked of a remote server.
const benchService = "bench"

type benchOpts struct {
	policy, suite, streams string
	bytes, maxFrame, write string
	window                 string
	seconds                float64
	repeat                 int
	server, key, service   string
	unverified             bool
	sink                   string
	irq, json              bool
	cpuProfile             string
	profile, saveProfile   string
	cost                   bool
	check                  bool
	tolerance              float64
}

func benchFlags(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
	var o benchOpts
	fs.StringVar(&o.policy, "policy", "all", "engine policies, comma separated: "+selector.Specs()+"; "+
		"all = software, every engine found for the suite's cipher, auto and hybrid")
	fs.StringVar(&o.suite, "suite", suite.Default.String(), "cipher suite")
	fs.StringVar(&o.streams, "streams", "1,8", "parallel streams per run, comma separated")
	fs.StringVar(&o.bytes, "bytes", "64MiB", "payload per run, over all streams (KiB, MiB, GiB)")
	fs.Float64Var(&o.seconds, "seconds", 0, "send for this many seconds per run instead of -bytes")
	fs.IntVar(&o.repeat, "repeat", 3, "rounds, each running every policy and stream count once, each starting one cell later than the one before; "+
		"the median run (by MB/s) is reported, and gains as medians of per-round ratios (single runs on a busy machine vary by tens of percent)")
	fs.BoolVar(&o.check, "check", false, "fail (exit 1) unless auto reaches the best single-engine policy and hybrid reaches auto, within -tolerance, "+
		"as medians of paired per-round ratios (a hybrid that handed no frame to the CPU routed as auto, an auto that sent 99% of its bytes to the "+
		"best single engine routed as it: within twice -tolerance); "+
		"a failing comparison is measured once more first")
	fs.Float64Var(&o.tolerance, "tolerance", 0.10, "with -check: how far below 1.00x a median ratio may be and still pass (0.10: 0.90x passes)")
	fs.StringVar(&o.maxFrame, "max-frame", "64KiB", "record layer's largest frame (the tunnel cuts frames from the traffic up to this)")
	fs.StringVar(&o.write, "write", strconv.Itoa(bench.DefaultWriteSize), "the load generator's write size")
	fs.StringVar(&o.window, "window", "", "yamux per-stream window (default: the tunnel's)")
	fs.StringVar(&o.server, "server", "", "bench against this running offload server `ADDR` instead of in-process (only the client end runs here)")
	fs.StringVar(&o.key, "key", "", "with -server: the pre-shared key `FILE`")
	fs.StringVar(&o.service, "service", benchService, "with -server: the service to send to; it must be a bench sink (offload bench -sink on the server's side)")
	fs.BoolVar(&o.unverified, "unverified", false, "with -server: accept a service that discards without answering (no integrity check)")
	fs.StringVar(&o.sink, "sink", "", "only run a bench sink on `ADDR` until interrupted, for a server's bench service")
	fs.BoolVar(&o.irq, "irq", false, "show the /proc/interrupts lines that moved during each run")
	fs.BoolVar(&o.json, "json", false, "print JSON for machines instead of the table")
	fs.StringVar(&o.profile, "profile", "", "selector profile `FILE` auto and hybrid read (default: the selector's default path); "+
		"bench never changes it: one missing or stale is measured for this run only")
	fs.StringVar(&o.saveProfile, "save-profile", "", "write the profile auto and hybrid used (read, or measured now) to `FILE`, for a config's profile:")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs (both ends in-process) to `FILE`, for go tool pprof")
	fs.BoolVar(&o.cost, "cost", false, "then show where a frame's time goes for the suite: cipher per engine, its MAC, copies, syscalls (offload frame-cost)")
	return func(ctx context.Context, env *runEnv, args []string) (int, error) {
		if len(args) != 0 || o.repeat <= 0 || o.seconds < 0 {
			return 2, errUsage
		}
		if o.check && o.repeat < 3 {
			return 2, errors.New("-check needs -repeat 3 or more: a median of fewer per-round ratios is as noisy as one run")
		}
		if o.tolerance < 0 || o.tolerance >= 1 {
			return 2, errors.New("-tolerance must be at least 0 and below 1")
		}
		if o.sink != "" {
			return runSink(ctx, env, o.sink)
		}
		if (o.server == "") != (o.key == "") {
			return 2, errors.New("-server and -key go together")
		}
		if o.cost && o.json {
			return 2, errors.New("-cost prints a table; for JSON run offload frame-cost -json")
		}
		code, err := runBench(ctx, env, o)
		if err != nil || !o.cost {
			return code, err
		}
		st, err := suite.Parse(o.suite)
		if err != nil {
			return 2, err
		}
		fmt.Fprintln(env.Stdout)
		return runFrameCost(ctx, env, frameCostOpts{evp: st.Cipher.String(), engine: "all", mac: st.MAC.String(), time: 300 * time.Millisecond})
	}
}

// runSink serves bench streams on addr until ctx ends.
func runSink(ctx context.Context, env *runEnv, addr string) (int, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return 1, fmt.Errorf("-sink: %w", err)
	}
	log := newLogger(config.Log{Level: zapcore.InfoLevel, Format: config.LogConsole}, env.Stderr)
	log.Info("bench sink listening", zap.Stringer("addr", ln.Addr()))
	if err := bench.ServeSink(ctx, ln, log.Named("sink")); err != nil {
		return 1, err
	}
	return 0, nil
}

func runBench(ctx context.Context, env *runEnv, o benchOpts) (int, error) {
	st, err := suite.Parse(o.suite)
	if err != nil {
		return 2, err
	}
	streams, err := parseInts(o.streams)
	if err != nil {
		return 2, fmt.Errorf("-streams: %w", err)
	}
	var nbytes, maxFrame, write, window int
	for _, s := range []struct {
		flag, val string
		dst       *int
	}{{"-bytes", o.bytes, &nbytes}, {"-max-frame", o.maxFrame, &maxFrame}, {"-write", o.write, &write}, {"-window", o.window, &window}} {
		if s.val == "" {
			continue
		}
		if *s.dst, err = config.ParseSize(s.val); err != nil {
			return 2, fmt.Errorf("%s: %w", s.flag, err)
		}
	}
	if o.seconds == 0 && nbytes <= 0 {
		return 2, errors.New("-bytes must be positive")
	}
	var psk []byte
	if o.server != "" {
		if psk, err = config.LoadKey(o.key); err != nil {
			return 1, err
		}
	} else {
		psk = make([]byte, 32)
		copy(psk, "offload bench in-process key....")
	}
	log := newLogger(config.Log{Level: zapcore.WarnLevel, Format: config.LogConsole}, env.Stderr)
	defer func() { _ = log.Sync() }()

	rep := &benchReport{
		Offload: version(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Kernel: sysinfo.Kernel(), CPU: bench.CPUModel(), CPUAES: engine.HardwareAES(), LoadAvg: bench.LoadAvg(),
		Suite: st.String(), Mode: "in-process", MaxFrame: maxFrame, WriteSize: write, Repeat: o.repeat,
		CPUScope: "this process: both tunnel ends, the load generator and the sink",
	}
	if o.seconds > 0 {
		rep.Seconds = o.seconds
	} else {
		rep.Bytes = int64(nbytes)
	}
	if o.server != "" {
		rep.Mode, rep.Server = "remote", o.server
		rep.CPUScope = "this process: the client end and the load generator (not the server)"
	}
	for _, e := range engine.All(st.Cipher, engine.Options{}) {
		if _, err := e.Driver(st.Cipher); err == nil && e.Name() != engine.SoftwareName {
			rep.KernelEngines = append(rep.KernelEngines, e.Name())
		}
	}
	policies := expandPolicies(o.policy, st.Cipher)
	if len(policies) == 0 {
		return 2, errors.New("-policy names no policy")
	}
	if o.check {
		if err := benchRoles.Checkable(policies); err != nil {
			return 2, err
		}
		rep.Tolerance = o.tolerance
	}

	b := &benchRunner{o: o, env: env, log: log, suite: st, psk: psk, maxFrame: maxFrame, write: write, window: window, bytes: int64(nbytes)}
	if o.server == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 1, fmt.Errorf("bench sink: %w", err)
		}
		sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
		sinkDone := make(chan error, 1)
		go func() { sinkDone <- bench.ServeSink(sinkCtx, ln, log.Named("sink")) }()
		defer func() { stopSink(); <-sinkDone }()
		b.sinkAddr = ln.Addr().String()
	}

	stopProfile, err := startCPUProfile(o.cpuProfile, env.Stderr)
	if err != nil {
		return 1, err
	}
	defer stopProfile()
	// Set every policy up first, then take turns: round i of every policy
	// and stream count runs before round i+1 of any, so a warming or busy
	// machine does not favour the policies measured last, and the ratios
	// between policies pair runs made close together in time.
	setups := map[string]engineSet{}
	sess := &method.Session[benchRun]{Measure: func(ctx context.Context, c *benchCell, t method.Turn) (benchRun, error) {
		return b.measure(ctx, c, setups[c.Name], t), nil
	}}
	prof, err := newBenchProfile(cmp.Or(o.profile, selector.DefaultPath()))
	if err != nil {
		return 1, err
	}
	defer prof.close()
	for _, p := range policies {
		var before profileStamp
		if selector.IsPolicy(p) {
			before = stampProfile(prof.work)
		}
		set, err := openEngineSet(ctx, p, st.Cipher, selector.EngineOptions{
			Logger: log.Named("engine"), MaxFrame: maxFrame, Profile: prof.work,
		})
		if selector.IsPolicy(p) && err == nil {
			rep.Profile = prof.src
			// The first policy that measured decides: a later one
			// reads what it measured.
			if state := profileState(before, stampProfile(prof.work)); rep.ProfileState != "measured" {
				rep.ProfileState = state
			}
		}
		if err != nil {
			fmt.Fprintf(env.Stderr, "bench: policy %s: unavailable, skipped: %v\n", p, err)
			rep.Skipped = append(rep.Skipped, method.Skipped{Policy: p, Reason: err.Error()})
			continue
		}
		setups[p] = set
		for _, n := range streams {
			sess.Cells = append(sess.Cells, &benchCell{Name: p, Streams: n})
		}
	}
	if o.saveProfile != "" && rep.Profile != "" {
		if err := prof.save(o.saveProfile); err != nil {
			return 1, fmt.Errorf("-save-profile: %w", err)
		}
		rep.SavedProfile = o.saveProfile
	}
	if err := sess.Rounds(ctx, sess.Cells, o.repeat); err != nil {
		return 130, err
	}
	rep.Runs = summarize(sess.Cells)
	if !o.json {
		printBenchTable(env.Stdout, rep)
	}
	var checkErr error
	if o.check {
		// The JSON document stays alone on stdout.
		out := env.Stdout
		if o.json {
			out = env.Stderr
		}
		ck := method.Checker{Roles: benchRoles, Tolerance: o.tolerance, Skipped: rep.Skipped, Repeat: o.repeat, Out: out,
			Remeasured: func() {
				if !o.json {
					fmt.Fprintln(env.Stdout)
					printBenchTable(env.Stdout, rep)
				}
			}}
		rep.Checks, checkErr = sess.Check(ctx, ck, func() []method.CheckRow {
			rep.Runs = summarize(sess.Cells)
			return checkRows(rep.Runs)
		})
		if ctx.Err() != nil {
			return 130, ctx.Err()
		}
	}

	ran := false
	for _, r := range rep.Runs {
		ran = ran || r.Error == ""
	}
	if o.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1, err
		}
	}
	for _, r := range rep.Runs {
		if r.Error != "" {
			return 1, errors.Join(fmt.Errorf("policy %s with %d streams failed: %s", r.Policy, r.Streams, r.Error), checkErr)
		}
	}
	if !ran {
		return 1, errors.Join(errors.New("no policy could run"), checkErr)
	}
	if checkErr != nil {
		return 1, checkErr
	}
	return 0, nil
}

// expandPolicies turns the -policy list into engine specs, "all" into
// selector.AllPolicies (software, every engine engine.All finds for c,
// auto and hybrid). Duplicates are dropped, order kept.
func expandPolicies(list string, c engine.Cipher) []string {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		if p != "all" {
			add(p)
			continue
		}
		for _, spec := range selector.AllPolicies(c) {
			add(spec)
		}
	}
	return out
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive integers, comma separated", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// benchProfile keeps bench from changing the system (issue 26): auto and
// hybrid read a copy of the profile src in a temporary directory, so that
// one missing or stale is measured into the copy, which the next policy
// reads, and src stays as it was. -save-profile writes the copy where the
// user says.
type benchProfile struct {
	src  string // the profile named (-profile, or the default path)
	dir  string // the temporary directory
	work string // the copy the policies use
}

func newBenchProfile(src string) (*benchProfile, error) {
	dir, err := os.MkdirTemp("", "offload-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: a directory for the profile: %w", err)
	}
	p := &benchProfile{src: src, dir: dir, work: filepath.Join(dir, "profile.json")}
	b, err := os.ReadFile(src)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return p, nil // measured, if auto or hybrid runs
	case err == nil:
		err = os.WriteFile(p.work, b, 0o600)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	return p, nil
}

// save writes the profile the policies used to path.
func (p *benchProfile) save(path string) error {
	prof, err := selector.Load(p.work)
	if err != nil {
		return err
	}
	return selector.Save(path, prof)
}

func (p *benchProfile) close() { _ = os.RemoveAll(p.dir) }

// profileStamp is what bench needs to tell whether setting up auto or
// hybrid measured the selector profile: whether its copy is there, and
// its modification time and size.
type profileStamp struct {
	exists  bool
	modTime time.Time
	size    int64
}

func stampProfile(path string) profileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return profileStamp{}
	}
	return profileStamp{true, fi.ModTime(), fi.Size()}
}

// profileState is "measured" if the policy's setup measured the profile
// (its copy changed, or is still missing: measured and not kept), "read"
// if it was fresh.
func profileState(before, after profileStamp) string {
	if !after.exists || after != before {
		return "measured"
	}
	return "read"
}
