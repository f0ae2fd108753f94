package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/bench"
	"github.com/offload-dev/offload/internal/ratio"
	"github.com/offload-dev/offload/internal/sysinfo"
	"github.com/offload-dev/offload/selector"
	"github.com/offload-dev/offload/tunnel"
	"github.com/offload-dev/offload/tunnel/record"
	"github.com/offload-dev/offload/tunnel/suite"
)

func init() {
	register(&command{
		Name:  "bench",
		Short: "real throughput through the tunnel for each engine policy (in-process on loopback, or against a server)",
		Usage: "[-policy all|P,P...] [-streams 1,8] [-bytes N | -seconds S] [-repeat N] [-check [-tolerance F]] [-suite S] [-server ADDR -key FILE [-service NAME]] [-irq] [-json] | -sink ADDR",
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
	profile                string
	cost                   bool
	check                  bool
	tolerance              float64
}

func benchFlags(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
	var o benchOpts
	fs.StringVar(&o.policy, "policy", "all", "engine policies, comma separated: "+engine.Specs+", auto, hybrid; "+
		"all = software, every engine found for the suite's cipher, auto and hybrid")
	fs.StringVar(&o.suite, "suite", suite.Default.String(), "cipher suite")
	fs.StringVar(&o.streams, "streams", "1,8", "parallel streams per run, comma separated")
	fs.StringVar(&o.bytes, "bytes", "64MiB", "payload per run, over all streams (KiB, MiB, GiB)")
	fs.Float64Var(&o.seconds, "seconds", 0, "send for this many seconds per run instead of -bytes")
	fs.IntVar(&o.repeat, "repeat", 3, "rounds, each running every policy and stream count once, each starting one cell later than the one before; "+
		"the median run (by MB/s) is reported, and gains as medians of per-round ratios (single runs on a busy machine vary by tens of percent)")
	fs.BoolVar(&o.check, "check", false, "fail (exit 1) unless auto reaches the best single-engine policy and hybrid reaches auto, within -tolerance, "+
		"as medians of paired per-round ratios (a hybrid that handed no frame to the CPU routed as auto: within twice -tolerance); "+
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
	fs.StringVar(&o.profile, "profile", "", "selector profile for the auto and hybrid policies (default: the selector's default path; measured if missing or stale)")
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
	CPUScope string         `json:"cpu_scope"`
	Runs     []benchRun     `json:"runs"`
	Skipped  []benchSkipped `json:"skipped,omitempty"`
	// Tolerance and Checks are -check's: the final result of every check.
	Tolerance float64      `json:"tolerance,omitempty"`
	Checks    []benchCheck `json:"checks,omitempty"`
	start     time.Time
}

type benchSkipped struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

type benchRun struct {
	Policy   string  `json:"policy"`
	Streams  int     `json:"streams"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"mb_per_s"`
	CPUPerGB float64 `json:"cpu_s_per_gb,omitempty"`
	// Repeats is the MB/s of every run of the policy at this stream count,
	// in run order (0 for a failed run): entry i is round i, and the cells
	// -check measured again have their extra rounds after the first
	// -repeat. The run reported is the median of these.
	Repeats []float64 `json:"repeats_mb_per_s,omitempty"`
	// Gain is the median over the rounds of MB/s over software only's in
	// the same round at the same stream count (0: no software run to
	// compare with). Failed runs are left out.
	Gain float64 `json:"gain_vs_software,omitempty"`
	// GainPaired, VsBestSinglePaired and VsAutoPaired are those medians
	// with the range of their per-round ratios: where it straddles 1.00x
	// the rounds do not agree on which side is ahead, and the table says
	// so instead of showing a gain.
	GainPaired         ratio.Paired `json:"gain_vs_software_paired,omitzero"`
	VsBestSinglePaired ratio.Paired `json:"vs_best_single_paired,omitzero"`
	VsAutoPaired       ratio.Paired `json:"vs_auto_paired,omitzero"`
	// VsBestSingle (auto and hybrid only) is the same median of ratios
	// against VsBestSinglePolicy: of the policies that are not auto or
	// hybrid (software included), the one with the highest median MB/s
	// at this stream count.
	VsBestSingle       float64 `json:"vs_best_single,omitempty"`
	VsBestSinglePolicy string  `json:"vs_best_single_policy,omitempty"`
	// VsAuto (hybrid only) is the same median of ratios against auto.
	VsAuto float64 `json:"vs_auto,omitempty"`
	// HandedToCPU (hybrid only) is how many frames the policy gave a CPU
	// engine although their band's device would have had them under auto:
	// in a run, and in a reported row over all of its rounds.
	HandedToCPU uint64            `json:"hybrid_handed_to_cpu,omitempty"`
	Verified    bool              `json:"verified"`
	Engines     []benchEngine     `json:"engines"`
	IRQ         map[string]uint64 `json:"irq_delta,omitempty"`
	Error       string            `json:"error,omitempty"`
	// round numbers the round the run was made in, to pair it with the
	// other policies' runs of that round.
	round int
}

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
		CPUScope: "this process: both tunnel ends, the load generator and the sink", start: time.Now(),
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
	policies := expandPolicies(o.policy, st.Cipher)
	if len(policies) == 0 {
		return 2, errors.New("-policy names no policy")
	}
	if o.check {
		if err := checkableError(policies); err != nil {
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
	sess := &benchSession{repeat: o.repeat, stderr: env.Stderr, runCell: func(ctx context.Context, c *benchCell) benchRun {
		return b.run(ctx, c.policy, c.engines, c.pol, c.streams)
	}}
	for _, p := range policies {
		engines, policy, err := selector.Engines(ctx, p, st.Cipher, selector.EngineOptions{
			Logger: log.Named("engine"), MaxFrame: maxFrame, Profile: o.profile,
		})
		if err != nil {
			fmt.Fprintf(env.Stderr, "bench: policy %s: unavailable, skipped: %v\n", p, err)
			rep.Skipped = append(rep.Skipped, benchSkipped{Policy: p, Reason: err.Error()})
			continue
		}
		for _, n := range streams {
			sess.cells = append(sess.cells, &benchCell{policy: p, engines: engines, pol: policy, streams: n})
		}
	}
	sess.skipped = rep.Skipped
	if err := sess.measure(ctx, sess.cells, o.repeat); err != nil {
		return 130, err
	}
	rep.Runs = summarize(sess.cells)
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
		rep.Runs, rep.Checks, checkErr = sess.check(ctx, o.tolerance, out, func(runs []benchRun) {
			if !o.json {
				rep.Runs = runs
				fmt.Fprintln(env.Stdout)
				printBenchTable(env.Stdout, rep)
			}
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

// benchRunner runs one measurement at a time.
type benchRunner struct {
	o        benchOpts
	env      *runEnv
	log      *zap.Logger
	suite    suite.Suite
	psk      []byte
	maxFrame int
	write    int
	window   int
	bytes    int64
	sinkAddr string // in-process only
}

// handedCounter is the selector's hybrid policy: it counts the frames it
// gave the CPU instead of a device.
type handedCounter interface{ HandedToCPU() uint64 }

// end is one tunnel end whose record counters a run reads.
type end struct {
	name  string
	stats *record.Stats
}

// run measures one policy with n streams on a fresh link: the tunnel is
// started, warmed up with one small verified stream (handshake and link
// up are not part of the figure), measured, and stopped.
func (b *benchRunner) run(ctx context.Context, spec string, engines []engine.Engine, policy record.Policy, n int) benchRun {
	r := benchRun{Policy: spec, Streams: n}
	opt := tunnel.Options{
		Suite: b.suite, PSK: b.psk, Engines: engines, Policy: policy,
		MaxFrame: b.maxFrame, YamuxWindow: b.window, StatusInterval: -1,
		DialTimeout: 10 * time.Second, Logger: b.log,
		// The load's last streams may still be closing inside the tunnel
		// when it stops: let them end instead of cutting them.
		DrainTimeout: 10 * time.Second,
		// The bench measures throughput, not the link budget: give the
		// link room for all n streams (link_buffer caps them otherwise).
		LinkBuffer: max(tunnel.DefaultLinkBuffer, n*(cmp.Or(b.window, tunnel.DefaultYamuxWindow)+256<<10)),
	}
	tctx, stop := context.WithCancel(ctx)
	var waits []chan error
	defer func() {
		stop()
		for _, w := range waits {
			if err := waitEnd(w); err != nil && r.Error == "" {
				r.Error = err.Error()
			}
		}
	}()
	var ends []end
	server := b.o.server
	if server == "" {
		srv, err := tunnel.NewServer(tunnel.ServerConfig{Options: opt, Services: map[string]string{benchService: b.sinkAddr}})
		if err != nil {
			r.Error = err.Error()
			return r
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.Error = err.Error()
			return r
		}
		server = ln.Addr().String()
		w := make(chan error, 1)
		go func() { w <- srv.Serve(tctx, ln) }()
		waits = append(waits, w)
		ends = append(ends, end{"server", srv.Stats()})
	}
	fwd, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Error = err.Error()
		return r
	}
	service := benchService
	if b.o.server != "" {
		service = b.o.service
	}
	cli, err := tunnel.NewClient(tunnel.ClientConfig{Options: opt, Server: server, Forwards: []tunnel.Forward{{Listener: fwd, Service: service}}})
	if err != nil {
		_ = fwd.Close()
		r.Error = err.Error()
		return r
	}
	w := make(chan error, 1)
	go func() { w <- cli.Run(tctx) }()
	waits = append(waits, w)
	ends = append(ends, end{"client", cli.Stats()})

	load := bench.Load{Addr: fwd.Addr().String(), Streams: 1, Bytes: 1, WriteSize: b.write, AllowUnverified: b.o.unverified}
	if _, err := bench.Run(tctx, load); err != nil {
		r.Error = fmt.Sprintf("warm-up stream: %v", err)
		return r
	}
	before := snapshot(ends)
	hp, _ := policy.(handedCounter)
	var handed0 uint64
	if hp != nil {
		handed0 = hp.HandedToCPU()
	}
	var irq0 engine.Interrupts
	if b.o.irq {
		if irq0, err = engine.ReadInterrupts(); err != nil {
			r.Error = fmt.Sprintf("-irq: %v", err)
			return r
		}
	}
	load.Streams, load.Bytes = n, b.bytes
	if b.o.seconds > 0 {
		load.Duration = time.Duration(b.o.seconds * float64(time.Second))
	}
	var sent atomic.Int64
	load.Sent = &sent
	stopProgress := progressDots(b.env.Stderr, &sent)
	res, err := bench.Run(tctx, load)
	stopProgress()
	if b.o.irq {
		if irq1, ierr := engine.ReadInterrupts(); ierr == nil {
			r.IRQ = irqDelta(irq0, irq1)
		}
	}
	r.Bytes, r.Seconds, r.MBps, r.CPUPerGB, r.Verified = res.Bytes, res.Elapsed.Seconds(), res.MBps(), res.CPUPerGB(), res.Verified
	r.Engines = engineCounts(engines, b.suite.Cipher, ends, before, snapshot(ends))
	if hp != nil {
		r.HandedToCPU = hp.HandedToCPU() - handed0
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// waitEnd waits for a tunnel end to stop after its context was cancelled.
func waitEnd(w chan error) error {
	select {
	case err := <-w:
		return err
	case <-time.After(30 * time.Second):
		return errors.New("a tunnel end did not stop within 30s")
	}
}

// progressDots prints the bytes sent so far to w once a second while a
// run goes on; the returned func stops it.
func progressDots(w io.Writer, sent *atomic.Int64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(w, "%s.. ", sizeString(sent.Load()))
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// counts are the record counters of every end: [end][dir][engine].
type counts [][2][record.MaxEngines]frameCount

func snapshot(ends []end) counts {
	c := make(counts, len(ends))
	for i, e := range ends {
		for d := range 2 {
			for k := range record.MaxEngines {
				c[i][d][k] = frameCount{e.stats.Frames[d][k].Load(), e.stats.Bytes[d][k].Load()}
			}
		}
	}
	return c
}

// engineCounts is what each engine did between two snapshots.
func engineCounts(engines []engine.Engine, c engine.Cipher, ends []end, before, after counts) []benchEngine {
	out := make([]benchEngine, 0, len(engines))
	for k, e := range engines {
		be := benchEngine{Engine: e.Name(), By: map[string]frameCount{}}
		if d, err := e.Driver(c); err == nil {
			be.Driver = d.String()
		}
		for i, en := range ends {
			for d := range 2 {
				f := after[i][d][k].Frames - before[i][d][k].Frames
				by := after[i][d][k].Bytes - before[i][d][k].Bytes
				be.Frames += f
				be.Bytes += by
				be.By[en.name+"/"+engine.Direction(d).String()] = frameCount{f, by}
			}
			be.Fallbacks += en.stats.Fallbacks[k].Load()
		}
		out = append(out, be)
	}
	return out
}

// median picks the run with the median rate (the lower middle for an even
// count); a failed run wins, so failures are never hidden.
func median(runs []benchRun) benchRun {
	for _, r := range runs {
		if r.Error != "" {
			return r
		}
	}
	s := slices.Clone(runs)
	sort.Slice(s, func(i, j int) bool { return s[i].MBps < s[j].MBps })
	return s[(len(s)-1)/2]
}

// expandPolicies turns the -policy list into engine specs, "all" into
// software, every engine Discover finds for c, auto and hybrid. Duplicates
// are dropped, order kept.
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

func repeatNote(i, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(" (run %d of %d)", i+1, n)
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

// sizeString prints a byte count in binary units.
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
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
	what := sizeString(rep.Bytes) + " per run"
	if rep.Seconds > 0 {
		what = fmt.Sprintf("%gs per run", rep.Seconds)
	}
	where := "in-process on loopback"
	if rep.Mode == "remote" {
		where = "to server " + rep.Server
	}
	fmt.Fprintf(w, "offload bench: %s, %s, %s, frames up to %s, writes of %s", rep.Suite, where, what, sizeString(int64(rep.MaxFrame)), sizeString(int64(rep.WriteSize)))
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
	width := len("policy")
	for _, r := range rep.Runs {
		width = max(width, len(r.Policy))
	}
	for _, s := range rep.Skipped {
		width = max(width, len(s.Policy))
	}
	ranges, bests, gains := make([]string, len(rep.Runs)), make([]string, len(rep.Runs)), make([]string, len(rep.Runs))
	rangeWidth, bestWidth, gainWidth := len("range"), len("vs best"), len("gain")
	for i, r := range rep.Runs {
		ranges[i], bests[i] = rangeString(r.Repeats), "-"
		if r.VsBestSingle > 0 {
			bests[i] = r.VsBestSinglePaired.String() + " " + r.VsBestSinglePolicy
		}
		if r.Gain > 0 {
			gains[i] = r.GainPaired.String()
		}
		// fmt pads by runes, and the range has an en dash.
		rangeWidth = max(rangeWidth, utf8.RuneCountInString(ranges[i]))
		bestWidth = max(bestWidth, utf8.RuneCountInString(bests[i]))
		gainWidth = max(gainWidth, utf8.RuneCountInString(gains[i]))
	}
	// fmt pads by runes; a spread has an en dash.
	pad := func(s string, n int) string { return s + strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s))) }
	fmt.Fprintf(w, "%-*s  %7s  %9s  %*s  %8s  %s  %s  %s\n", width, "policy", "streams", "MB/s", rangeWidth, "range", "CPU s/GB", pad("gain", gainWidth),
		pad("vs best", bestWidth), "frames per engine")
	for i, r := range rep.Runs {
		if r.Error != "" {
			fmt.Fprintf(w, "%-*s  %7d  failed: %s\n", width, r.Policy, r.Streams, r.Error)
			continue
		}
		gain := gains[i]
		if gain == "" {
			gain = "-"
		}
		cpu := "-"
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
		fmt.Fprintf(w, "%-*s  %7d  %9.1f  %*s  %8s  %s  %s  %s%s\n", width, r.Policy, r.Streams, r.MBps, rangeWidth, ranges[i], cpu, pad(gain, gainWidth),
			pad(bests[i], bestWidth), strings.Join(frames, ", "), note)
	}
	fmt.Fprintln(w, "\nMB/s: 10^6 payload bytes per second of wall time, of the median run; range: the lowest and highest over the rounds.")
	fmt.Fprintf(w, "CPU s/GB: CPU seconds (user+system) per 10^9 payload bytes, of %s.\n", rep.CPUScope)
	fmt.Fprintln(w, "gain: MB/s over software's; vs best (auto, hybrid): MB/s over that of the policy with the highest median MB/s")
	fmt.Fprintln(w, "among those that are not auto or hybrid (software included); both at the same stream count, and both medians")
	fmt.Fprintln(w, "of per-round ratios (a round runs every row once; a ratio pairs two runs of the same round). \"within spread\":")
	fmt.Fprintln(w, "the rounds fall on both sides of 1.00x (lowest–highest shown), so the median is noise, not a gain or a loss.")
	fmt.Fprintln(w, "frames per engine: frames each engine sealed or opened, both directions, every end measured here;")
	fmt.Fprintln(w, "handed to the CPU (hybrid): frames of a device's band that hybrid gave a CPU engine because the device was loaded, in all rounds.")
	if len(rep.Skipped) > 0 {
		fmt.Fprintln(w, "\nskipped (unavailable here):")
		for _, s := range rep.Skipped {
			fmt.Fprintf(w, "  %-*s  %s\n", width, s.Policy, s.Reason)
		}
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
