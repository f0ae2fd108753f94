// Command compare is where the data-path ratios of offload against the
// tools people would use instead come from: one run on loopback, one load
// generator for all (measure/bench: N streams to a sink that checks every
// byte), the tools taking turns:
//
//	direct        no tunnel: the load generator straight to the sink (ceiling)
//	socat         plaintext relay (socat TCP-LISTEN,fork → TCP)
//	relay         two bare Go relays, Read/Write 64 KiB, no crypto: the
//	              floor of any two-ended user-space tunnel (relay.go)
//	relay sealed  the same two relays sealing the hop between them with
//	              offload's aes-256-ctr-hmac-sha256 and nothing else of
//	              offload: the simplest tunnel with its crypto (relay.go)
//	ssh -L        a private sshd on loopback, -c aes256-ctr -m hmac-sha2-256
//	ssh -L gcm    another private sshd, -c aes128-gcm@openssh.com (MAC implicit)
//	spiped        an encrypt/decrypt pair
//	offload       the built binary, server and client, aes-256-ctr-hmac-sha256
//	offload gmac  another pair of the built binary, aes-256-ctr-gmac
//
// For each tool and stream count it reports MB/s and the CPU time of the
// tool's processes (user and system) per 10^9 payload bytes, the median of
// -repeat rounds; each round runs every tool once, in the order of offload
// bench's rounds (measure/method: forward, backward, then one tool
// on). Beside them:
//
//   - the crypto floor of each offload suite: the CPU s/GB of sealing and
//     then opening the same bytes (cipher and MAC, software engine, frames
//     of the configured max_frame), measured in this process with
//     measure/speed.FrameCost; offload's CPU s/GB minus its floor is the
//     tunnel's overhead beyond its crypto, set beside socat's CPU s/GB;
//     and beside it OpenSSL's (openssl speed: ssh's libcrypto), counted
//     the same way;
//   - what the host allows: the relay floor's MB/s against ssh -L's, paired
//     per round, against the ratio issue 28 asks of offload (1.0x on one
//     stream, 1.5x on eight), and offload against the floor;
//   - the resident memory (VmRSS, VmHWM) of each end of the aes-256-ctr-
//     hmac-sha256 pair idle and with -rss-streams streams open under load;
//   - the goals of the data path (issue 11) and issue 28's x86 goals, each
//     met or MISSED. A MISSED
//     goal does not fail the run; a tool that does not run, or data that
//     does not arrive intact, does (exit 1).
//
// Run from the repository root, as root (for sshd) with socat,
// openssh-server/-client and spiped installed (scripts/deps.sh):
//
//	go run ./harness/compare                   # 256 MiB per run, 1 and 8 streams, median of 3
//	go run ./harness/compare -cpuprofile DIR   # and a CPU profile of each offload end in DIR
//	go run ./harness/compare -quick            # smoke: every tool runs, data intact (SHA-256)
//	go run ./harness/compare -tools 'direct,relay,ssh -L,offload'   # issue 28's x86 comparison only
//
// Progress goes to stderr, the report to stdout (-json for machines: every
// run's figures, the floor, the overheads and the goals).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/config"
	"github.com/offload-dev/offload/measure/bench"
	"github.com/offload-dev/offload/measure/method"
	"github.com/offload-dev/offload/tunnel"
)

type options struct {
	bytes      int64
	streams    []int
	repeat     int
	rssStreams int
	rssBytes   int64
	offload    string
	digest     bench.Digest
	json       bool
	quick      bool
	maxFrame   string
	maxProcs   int           // offload's max_procs in both configs; 0 leaves it out
	load       string        // loadBench or loadIperf
	frame      int           // max_frame in bytes, for the crypto floor
	floorTime  time.Duration // per part of the crypto floor
	profileDir string
	tools      []string // the tools to run, by name; all if empty
	iperfSink  *proc    // the iperf3 server, with -load iperf3
}

func main() {
	if spec := os.Getenv(relayEnv); spec != "" {
		// This binary started again as one end of the relay floor.
		err := relayMain(spec)
		fmt.Fprintf(os.Stderr, "compare relay: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	size := fs.String("bytes", "256MiB", "payload per run, over all streams")
	streams := fs.String("streams", "1,8", "stream counts, comma separated")
	repeat := fs.Int("repeat", 3, "rounds per stream count (each runs every tool once); the median is reported")
	rssStreams := fs.Int("rss-streams", 100, "streams open at once for the memory figure")
	rssSize := fs.String("rss-bytes", "200MiB", "payload of the memory run, over all its streams")
	bin := fs.String("offload", "", "offload binary (default: go build ./cmd/offload)")
	digest := fs.String("digest", "crc32c", "the sink's check: crc32c (cheap, for speed) or sha256")
	maxFrame := fs.String("max-frame", "", "offload's max_frame in both configs and the crypto floor's frame size (default: the config default, "+method.Size(int64(tunnel.DefaultOptions().MaxFrame))+")")
	maxProcs := fs.Int("max-procs", 0, "offload's max_procs (GOMAXPROCS of each end) in both configs (default: left out, the runtime's choice)")
	load := fs.String("load", loadBench, "the load generator: bench (measure/bench, every byte checked at the sink) or iperf3 (its client and server; no check, no memory run)")
	profileDir := fs.String("cpuprofile", "", "write a CPU profile of each offload end, from start to exit, to `DIR`/SUITE/{server,client}.pprof")
	tools := fs.String("tools", "", "the tools to run, comma separated, of: "+strings.Join(allTools, ", ")+" (default: all)")
	asJSON := fs.Bool("json", false, "print JSON instead of the tables")
	quick := fs.Bool("quick", false, "smoke test: 4 MiB per run, one round, SHA-256, 100 streams of 16 KiB, a short crypto floor; checks that every tool ran and the data arrived intact, not the speeds")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o := options{repeat: *repeat, rssStreams: *rssStreams, offload: *bin, json: *asJSON, quick: *quick, maxFrame: *maxFrame, maxProcs: *maxProcs, load: *load,
		frame: tunnel.DefaultOptions().MaxFrame, floorTime: 500 * time.Millisecond, profileDir: *profileDir}
	if o.maxFrame != "" {
		n, err := config.ParseSize(o.maxFrame)
		if err != nil {
			fmt.Fprintf(stderr, "compare: -max-frame: %v\n", err)
			return 2
		}
		o.frame = int(n)
	}
	if o.load != loadBench && o.load != loadIperf {
		fmt.Fprintf(stderr, "compare: -load %q: want %s or %s\n", o.load, loadBench, loadIperf)
		return 2
	}
	if o.maxProcs < 0 || o.maxProcs > config.MaxMaxProcs {
		fmt.Fprintf(stderr, "compare: -max-procs %d: want 0 to %d\n", o.maxProcs, config.MaxMaxProcs)
		return 2
	}
	n, err := config.ParseSize(*size)
	if err != nil {
		fmt.Fprintf(stderr, "compare: -bytes: %v\n", err)
		return 2
	}
	o.bytes = int64(n)
	if n, err = config.ParseSize(*rssSize); err != nil {
		fmt.Fprintf(stderr, "compare: -rss-bytes: %v\n", err)
		return 2
	}
	o.rssBytes = int64(n)
	for _, f := range strings.Split(*streams, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "compare: -streams %q: want positive integers\n", *streams)
			return 2
		}
		o.streams = append(o.streams, n)
	}
	if *tools != "" {
		for _, t := range strings.Split(*tools, ",") {
			t = strings.TrimSpace(t)
			if !slices.Contains(allTools, t) {
				fmt.Fprintf(stderr, "compare: -tools: no tool %q (want %s)\n", t, strings.Join(allTools, ", "))
				return 2
			}
			o.tools = append(o.tools, t)
		}
	}
	switch *digest {
	case "crc32c":
		o.digest = bench.CRC32C
	case "sha256":
		o.digest = bench.SHA256
	default:
		fmt.Fprintf(stderr, "compare: -digest %q: want crc32c or sha256\n", *digest)
		return 2
	}
	if o.quick {
		o.bytes, o.repeat, o.digest, o.rssBytes = 4<<20, 1, bench.SHA256, int64(o.rssStreams)*16<<10
		o.floorTime = 50 * time.Millisecond
	}
	if o.repeat <= 0 || o.rssStreams <= 0 || fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	if o.profileDir != "" {
		// The ends run in their own directories: give them an absolute path.
		if o.profileDir, err = filepath.Abs(o.profileDir); err == nil {
			err = os.MkdirAll(o.profileDir, 0o755)
		}
		if err != nil {
			fmt.Fprintf(stderr, "compare: -cpuprofile: %v\n", err)
			return 2
		}
	}
	rep, err := compare(ctx, o, stderr)
	if rep != nil {
		if o.json {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			printReport(stdout, rep)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 1
	}
	return 0
}

// report is the whole result.
type report struct {
	Date    string     `json:"date"`
	Host    string     `json:"host"`
	CPU     string     `json:"cpu"`
	CPUs    int        `json:"cpus"`
	LoadAvg string     `json:"loadavg_before"`
	LoadEnd string     `json:"loadavg_after"`
	Bytes   int64      `json:"bytes_per_run"`
	Repeat  int        `json:"repeat"`
	Digest  string     `json:"digest"`
	Load    string     `json:"load"` // the load generator: bench or iperf3
	Tools   []toolInfo `json:"tools"`
	Rounds  []round    `json:"rounds"`
	Results []result   `json:"results"`
	Floors  []floor    `json:"crypto_floor"`
	// SSLFloor is ssh's crypto (OpenSSL's) at offload's frame size,
	// counted as Floors are.
	SSLFloor *sslFloor `json:"openssl_floor,omitempty"`
	// Overheads is each offload tool's CPU s/GB beyond its floor, beside
	// socat's, per stream count.
	Overheads []overhead `json:"overhead_beyond_crypto"`
	Memory    []memory   `json:"offload_memory"`
	Goals     []goal     `json:"goals"`
	Profiles  []profile  `json:"cpu_profiles,omitempty"`
	Quick     bool       `json:"quick"`
}

type toolInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	How     string `json:"how"`
}

// round is one turn of every tool, in the order they ran.
type round struct {
	Streams int      `json:"streams"`
	Order   []string `json:"order"`
	number  int      // the session's round number
}

type result struct {
	Tool    string    `json:"tool"`
	Streams int       `json:"streams"`
	MBps    float64   `json:"mb_per_s"` // median
	Runs    []float64 `json:"runs_mb_per_s"`
	// CPU is the CPU time of the tool's own processes and their children
	// per 10^9 payload bytes, of the run with the median total (so that
	// user and system add up); zero for direct. RunsCPU has every run's,
	// in the order of Runs.
	CPU     cpuPerGB   `json:"cpu_s_per_gb"`
	RunsCPU []cpuPerGB `json:"runs_cpu_s_per_gb"`
	// LoadCPU is the load generator's and the sink's CPU per 10^9
	// payload bytes in the run CPU is from: this process's with -load
	// bench, iperf3's client and server with -load iperf3.
	LoadCPU cpuPerGB `json:"load_cpu_s_per_gb"`
}

// cpuPerGB is CPU seconds per 10^9 bytes, split as the kernel accounts it.
type cpuPerGB struct {
	User float64 `json:"user"`
	Sys  float64 `json:"sys"`
}

// Total is user plus system.
func (c cpuPerGB) Total() float64 { return c.User + c.Sys }

// perGB is the CPU time c spent on n bytes, per 10^9 bytes.
func perGB(c bench.CPUTime, n int64) cpuPerGB {
	if n <= 0 {
		return cpuPerGB{}
	}
	gb := float64(n) / 1e9
	return cpuPerGB{User: c.User.Seconds() / gb, Sys: c.System.Seconds() / gb}
}

type memory struct {
	End     string       `json:"end"` // server or client
	Idle    bench.Memory `json:"idle"`
	Load    bench.Memory `json:"under_load"` // RSS: the most seen while the streams ran; Peak: VmHWM after
	Streams int          `json:"streams"`
	// PeakAll is VmHWM at the end of the whole comparison, speed runs
	// included.
	PeakAll int64 `json:"peak_all_bytes"`
}

type goal struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
	// Measured is false where this run lacks the figures (a stream count
	// left out of -streams, say); Met is then false too.
	Measured bool `json:"measured"`
}

// tunnelUnderTest is one tool set up and verified with a first byte.
// setup starts one tool: its processes, where the load connects, what it is.
type setup func(ctx context.Context, work, sink string) (*tunnelUnderTest, toolInfo, error)

type tunnelUnderTest struct {
	name  string
	addr  string // where the load connects
	procs []*proc
	// profiles are the CPU profile files of the procs, or nil.
	profiles []string
}

// The tools by name, for the goals and the floor.
const (
	toolDirect      = "direct"
	toolSocat       = "socat"
	toolRelay       = "relay"
	toolSealed      = "relay sealed"
	toolSSH         = "ssh -L"
	toolSSHGCM      = "ssh -L gcm"
	toolSpiped      = "spiped"
	toolOffload     = "offload"
	toolOffloadGMAC = "offload gmac"
)

// allTools are the tools by name, in the order they start.
var allTools = []string{toolDirect, toolSocat, toolRelay, toolSealed, toolSSH, toolSSHGCM, toolSpiped, toolOffload, toolOffloadGMAC}

// offloadTools are the offload pairs compared, each with its suite; the
// first one's ends are the memory figures.
var offloadTools = []struct{ name, suite string }{
	{toolOffload, "aes-256-ctr-hmac-sha256"},
	{toolOffloadGMAC, "aes-256-ctr-gmac"},
}

func compare(ctx context.Context, o options, log io.Writer) (*report, error) {
	work, err := os.MkdirTemp("", "offload-compare-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	rep := &report{
		Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), CPU: bench.CPUModel(), CPUs: runtime.NumCPU(),
		LoadAvg: bench.LoadAvg(), Bytes: o.bytes, Repeat: o.repeat, Digest: o.digest.String(), Load: o.load, Quick: o.quick,
	}
	rep.Host, _ = os.Hostname()

	// The sink, in this process.
	sinkLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	sinkCtx, stopSink := context.WithCancel(context.WithoutCancel(ctx))
	sinkDone := make(chan error, 1)
	zl := zap.NewNop()
	go func() { sinkDone <- bench.ServeSink(sinkCtx, sinkLn, zl) }()
	defer func() { stopSink(); <-sinkDone }()
	sink := sinkLn.Addr().String()
	ready := firstByte
	if o.load == loadIperf {
		p, addr, err := startIperfSink(ctx)
		if err != nil {
			return nil, err
		}
		defer stop(p)
		o.iperfSink = p
		sink, ready = addr, iperfReady
		fmt.Fprintf(log, "compare: load generator iperf3, server on %s\n", addr)
	}

	offloadBin := o.offload
	if offloadBin == "" {
		offloadBin = filepath.Join(work, "offload-bin")
		fmt.Fprintln(log, "compare: go build -o "+offloadBin+" ./cmd/offload")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", offloadBin, "./cmd/offload").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build ./cmd/offload (run from the repository root, or give -offload): %w\n%s", err, out)
		}
	}

	var tuts []*tunnelUnderTest
	defer func() {
		for _, t := range tuts {
			for _, p := range slices.Backward(t.procs) {
				stop(p)
			}
		}
	}()
	sshSetup := func(name, cipher, mac string) setup {
		return func(ctx context.Context, work, sink string) (*tunnelUnderTest, toolInfo, error) {
			return setupSSH(ctx, work, sink, name, cipher, mac)
		}
	}
	offloadSetup := func(name, suite string) setup {
		return func(ctx context.Context, work, sink string) (*tunnelUnderTest, toolInfo, error) {
			prof := ""
			if o.profileDir != "" {
				prof = filepath.Join(o.profileDir, suite)
			}
			return setupOffload(ctx, work, sink, offloadConfig{name: name, bin: offloadBin, suite: suite, maxFrame: o.maxFrame, maxProcs: o.maxProcs, profileDir: prof,
				streams: max(o.rssStreams, slices.Max(o.streams))})
		}
	}
	setups := []struct {
		name string
		fn   setup
	}{
		{toolDirect, setupDirect},
		{toolSocat, setupSocat},
		{toolRelay, setupRelay},
		{toolSealed, sealedSetup(offloadTools[0].suite)},
		{toolSSH, sshSetup(toolSSH, "aes256-ctr", "hmac-sha2-256")},
		{toolSSHGCM, sshSetup(toolSSHGCM, "aes128-gcm@openssh.com", "")},
		{toolSpiped, setupSpiped},
	}
	for _, ot := range offloadTools {
		setups = append(setups, struct {
			name string
			fn   setup
		}{ot.name, offloadSetup(ot.name, ot.suite)})
	}
	if len(o.tools) > 0 {
		setups = slices.DeleteFunc(setups, func(s struct {
			name string
			fn   setup
		}) bool {
			return !slices.Contains(o.tools, s.name)
		})
	}
	var failed []string
	// A tool gets a second start on fresh ports if the first does not come
	// up: freePort's port is free when it is picked, but the tool binds it
	// later, and anything on the machine may take it in between (spiped
	// once failed so in CI: "Address already in use").
	const starts = 2
	for _, s := range setups {
		var err error
		for try := 1; try <= starts; try++ {
			fmt.Fprintf(log, "compare: starting %s\n", s.name)
			var t *tunnelUnderTest
			var info toolInfo
			t, info, err = s.fn(ctx, filepath.Join(work, strings.ReplaceAll(s.name, " ", "")+strconv.Itoa(try)), sink)
			if err == nil {
				err = ready(ctx, t.addr)
			}
			if err == nil {
				tuts = append(tuts, t)
				rep.Tools = append(rep.Tools, info)
				break
			}
			fmt.Fprintf(log, "compare: %s did not come up (start %d of %d): %v\n", s.name, try, starts, err)
			for _, p := range slices.Backward(t.procsOrNil()) {
				fmt.Fprintf(log, "compare: %s output:\n%s\n", p.Name, p.Out.String())
				stop(p)
			}
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", s.name, err))
		}
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("tools that did not run: %s", strings.Join(failed, "; "))
	}
	byName := func(name string) *tunnelUnderTest {
		for _, t := range tuts {
			if t.name == name {
				return t
			}
		}
		return nil // left out by -tools
	}

	// Memory of the offload ends first, idle and then with many streams,
	// so that the speed runs' bigger transfers do not set the peak.
	off := byName(offloadTools[0].name)
	if o.load == loadBench && off != nil {
		mem, err := offloadMemory(ctx, off, o, log)
		if err != nil {
			return rep, err
		}
		rep.Memory = mem
	}

	// The crypto floor, in this process while the tools are idle.
	fmt.Fprintf(log, "compare: crypto floor: sealing and opening %d-byte frames in this process\n", o.frame)
	if rep.Floors, err = measureFloors(ctx, o.frame, o.floorTime); err != nil {
		return rep, fmt.Errorf("crypto floor: %w", err)
	}
	if _, err := exec.LookPath("openssl"); err == nil {
		// Two openssl speed runs of 1 s (its shortest), -quick too.
		f, err := measureSSLFloor(ctx, o.frame, 1)
		if err != nil {
			return rep, fmt.Errorf("openssl floor: %w", err)
		}
		rep.SSLFloor = &f
	} else {
		fmt.Fprintln(log, "compare: no openssl binary: no OpenSSL floor beside offload's")
	}

	// Speed: every round runs each tool once, so that a change of the
	// machine's load hits every tool alike, in method.Rotation's
	// order, so that no tool always runs first (after the idle pause) or
	// after the same neighbour (right after the heaviest, say). All the
	// rounds of one stream count run before the next's.
	names := make([]string, len(tuts))
	for i, t := range tuts {
		names[i] = t.name
	}
	err = speedRounds(ctx, rep, names, o, func(ctx context.Context, name string, n int, turn method.Turn) (speedRun, error) {
		return runSpeed(ctx, byName(name), n, turn, o, log)
	})
	if err != nil {
		return rep, err
	}

	for i, p := range off.procsOrNil() {
		if i >= len(rep.Memory) {
			break // no memory run (-load iperf3)
		}
		m, err := bench.ProcMemory(p.Cmd.Process.Pid)
		if err != nil {
			return rep, err
		}
		rep.Memory[i].PeakAll = m.Peak
	}
	rep.LoadEnd = bench.LoadAvg()
	rep.Overheads = overheads(rep)
	if !o.quick {
		// 4 MiB runs say nothing about speed; -quick checks that
		// everything runs and arrives intact.
		rep.Goals = goals(rep)
	}
	if o.profileDir != "" {
		for _, ot := range offloadTools {
			if byName(ot.name) == nil {
				continue
			}
			ps, err := stopProfiled(ctx, byName(ot.name), ot.suite, log)
			rep.Profiles = append(rep.Profiles, ps...)
			if err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// speedRounds measures every tool at every stream count o.repeat
// times through measure, in rounds, and puts the rounds' orders and the
// results in rep.
func speedRounds(ctx context.Context, rep *report, tools []string, o options,
	measure func(ctx context.Context, tool string, streams int, turn method.Turn) (speedRun, error)) error {
	sess := &method.Session[speedRun]{ByStreams: true}
	for _, n := range o.streams {
		for _, t := range tools {
			sess.Cells = append(sess.Cells, &method.Cell[speedRun]{Name: t, Streams: n})
		}
	}
	sess.Measure = func(ctx context.Context, c *method.Cell[speedRun], turn method.Turn) (speedRun, error) {
		if len(rep.Rounds) == 0 || rep.Rounds[len(rep.Rounds)-1].number != turn.Round {
			rep.Rounds = append(rep.Rounds, round{Streams: c.Streams, number: turn.Round})
		}
		r := &rep.Rounds[len(rep.Rounds)-1]
		r.Order = append(r.Order, c.Name)
		return measure(ctx, c.Name, c.Streams, turn)
	}
	if err := sess.Rounds(ctx, sess.Cells, o.repeat); err != nil {
		return err
	}
	for _, c := range sess.Cells {
		var cpus, loads []cpuPerGB
		for _, r := range c.Runs {
			cpus = append(cpus, r.Result.cpu)
			loads = append(loads, r.Result.load)
		}
		res := summarize(c.Name, c.Streams, c.Rates(), cpus)
		if i := slices.IndexFunc(cpus, func(x cpuPerGB) bool { return x == res.CPU }); i >= 0 {
			res.LoadCPU = loads[i]
		}
		rep.Results = append(rep.Results, res)
	}
	return nil
}

// speedRun is one run of a tool: its MB/s and CPU per 10^9 bytes, and
// the load generator's and sink's CPU per 10^9 bytes.
type speedRun struct {
	mbps float64
	cpu  cpuPerGB
	load cpuPerGB
}

// Rate and Failure make a run a method.Result; a run that failed
// stops the comparison instead (see runSpeed).
func (r speedRun) Rate() float64 { return r.mbps }
func (speedRun) Failure() string { return "" }

// runSpeed runs the load through t once and reads the CPU its processes
// used. Data that does not arrive whole and verified is an error: it
// stops the comparison, whose figures would mean nothing.
func runSpeed(ctx context.Context, t *tunnelUnderTest, n int, turn method.Turn, o options, log io.Writer) (speedRun, error) {
	fmt.Fprintf(log, "compare: %-12s %2d stream(s), round %d of %d: ", t.name, n, turn.N+1, turn.Of)
	if o.load == loadIperf {
		return runIperf(ctx, t, n, o, log)
	}
	self0 := selfCPU()
	cpu0, cerr0 := t.cpu()
	res, err := bench.Run(ctx, bench.Load{Addr: t.addr, Streams: n, Bytes: o.bytes, Digest: o.digest, Seed: uint64(turn.N)})
	cpu1, cerr1 := t.cpu()
	self1 := selfCPU()
	if err == nil {
		err = errors.Join(cerr0, cerr1)
	}
	if err != nil {
		fmt.Fprintln(log, "failed")
		return speedRun{}, fmt.Errorf("%s, %d streams: %w", t.name, n, err)
	}
	if !res.Verified || res.Bytes != o.bytes {
		fmt.Fprintln(log, "failed")
		return speedRun{}, fmt.Errorf("%s, %d streams: %d bytes, verified %v; want %d verified", t.name, n, res.Bytes, res.Verified, o.bytes)
	}
	c := perGB(bench.CPUTime{User: cpu1.User - cpu0.User, System: cpu1.System - cpu0.System}, res.Bytes)
	l := perGB(bench.CPUTime{User: self1.User - self0.User, System: self1.System - self0.System}, res.Bytes)
	fmt.Fprintf(log, "%.1f MB/s, %.2f CPU s/GB (user %.2f, sys %.2f; %s ok; load and sink %.2f)\n", res.MBps(), c.Total(), c.User, c.Sys, o.digest, l.Total())
	return speedRun{mbps: res.MBps(), cpu: c, load: l}, nil
}

// runIperf is runSpeed with iperf3's client as the load.
func runIperf(ctx context.Context, t *tunnelUnderTest, n int, o options, log io.Writer) (speedRun, error) {
	srv0, serr0 := bench.TreeCPU([]int{o.iperfSink.Cmd.Process.Pid})
	cpu0, cerr0 := t.cpu()
	res, err := iperfRun(ctx, t.addr, n, o.bytes)
	cpu1, cerr1 := t.cpu()
	srv1, serr1 := bench.TreeCPU([]int{o.iperfSink.Cmd.Process.Pid})
	if err == nil {
		err = errors.Join(cerr0, cerr1, serr0, serr1)
	}
	if err == nil && res.sent < o.bytes {
		err = fmt.Errorf("iperf3 sent %d bytes, want %d", res.sent, o.bytes)
	}
	if err != nil {
		fmt.Fprintln(log, "failed")
		return speedRun{}, fmt.Errorf("%s, %d streams: %w", t.name, n, err)
	}
	c := perGB(bench.CPUTime{User: cpu1.User - cpu0.User, System: cpu1.System - cpu0.System}, res.sent)
	l := perGB(bench.CPUTime{User: srv1.User - srv0.User + res.client.User, System: srv1.System - srv0.System + res.client.System}, res.sent)
	fmt.Fprintf(log, "%.1f MB/s, %.2f CPU s/GB (user %.2f, sys %.2f; iperf3, unchecked; its client and server %.2f)\n", res.MBps(), c.Total(), c.User, c.Sys, l.Total())
	return speedRun{mbps: res.MBps(), cpu: c, load: l}, nil
}

// summarize is one tool's result at one stream count from its runs: the
// median MB/s, and the CPU of the run whose total is the median.
func summarize(tool string, streams int, mbps []float64, cpu []cpuPerGB) result {
	r := result{Tool: tool, Streams: streams, Runs: mbps, RunsCPU: cpu}
	if len(mbps) > 0 {
		r.MBps = mbps[method.MedianIndex(mbps)]
	}
	if len(cpu) > 0 {
		totals := make([]float64, len(cpu))
		for i, c := range cpu {
			totals[i] = c.Total()
		}
		r.CPU = cpu[method.MedianIndex(totals)]
	}
	return r
}

// selfCPU is this process's CPU time: the load generator's and the
// sink's (measure/bench runs both here), and nothing of the tools, which
// are other processes.
func selfCPU() bench.CPUTime {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return bench.CPUTime{}
	}
	return bench.CPUTime{User: time.Duration(ru.Utime.Nano()), System: time.Duration(ru.Stime.Nano())}
}

// cpu is the CPU time of the tool's processes and their children.
func (t *tunnelUnderTest) cpu() (bench.CPUTime, error) {
	if len(t.procs) == 0 {
		return bench.CPUTime{}, nil
	}
	pids := make([]int, len(t.procs))
	for i, p := range t.procs {
		pids[i] = p.Cmd.Process.Pid
	}
	return bench.TreeCPU(pids)
}

func (t *tunnelUnderTest) procsOrNil() []*proc {
	if t == nil {
		return nil
	}
	return t.procs
}

// firstByte waits until one verified byte crosses the tool (it may still
// be starting), for up to 20 s.
func firstByte(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		_, err := bench.Run(ctx, bench.Load{Addr: addr, Bytes: 1, Digest: bench.SHA256})
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("no verified byte through it within 20s: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// offloadMemory reads VmRSS/VmHWM of both offload ends idle, then samples
// them while rssStreams streams are open at once.
func offloadMemory(ctx context.Context, off *tunnelUnderTest, o options, log io.Writer) ([]memory, error) {
	ends := off.procs // server, client
	var out []memory
	for _, p := range ends {
		m, err := bench.ProcMemory(p.Cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		out = append(out, memory{End: p.Name, Idle: m, Streams: o.rssStreams})
	}
	fmt.Fprintf(log, "compare: offload memory with %d streams open (%s over them): ", o.rssStreams, method.Size(o.rssBytes))
	done := make(chan struct{})
	var wg sync.WaitGroup
	var sampleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			for i, p := range ends {
				m, err := bench.ProcMemory(p.Cmd.Process.Pid)
				if err != nil {
					sampleErr = err
					return
				}
				out[i].Load.RSS = max(out[i].Load.RSS, m.RSS)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	res, err := bench.Run(ctx, bench.Load{Addr: off.addr, Streams: o.rssStreams, Bytes: o.rssBytes, WriteSize: 16 << 10, Digest: o.digest})
	close(done)
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("offload with %d streams: %w", o.rssStreams, err)
	}
	if sampleErr != nil {
		return nil, sampleErr
	}
	fmt.Fprintf(log, "%.1f MB/s, verified\n", res.MBps())
	for i, p := range ends {
		m, err := bench.ProcMemory(p.Cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		out[i].Load.Peak = m.Peak
	}
	return out, nil
}
