package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/sysinfo"
	"github.com/offload-dev/offload/measure/speed"
)

func init() {
	register(&command{
		Name:  "speed",
		Short: "measure engines like 'openssl speed [-evp CIPHER] -elapsed [CIPHER...]' or, with -tcrypt, the kernel's 'modprobe tcrypt mode=200'",
		Usage: "[-evp CIPHER] [-engine SPEC|all] [-elapsed] [-seconds N] [-bytes N] [-decrypt] [-multi N] [-irq] [-json] [CIPHER...]\n" +
			"       offload speed -tcrypt [-engine ...] [-seconds N] [-bytes N] [ecb|cbc|ctr...]",
		Flags: speedFlags,
	})
}

type speedOpts struct {
	evp     string
	engine  string
	elapsed bool
	seconds int
	bytes   int
	decrypt bool
	multi   int
	irq     bool
	json    bool
	cost    bool
	tcrypt  bool
	repeat  int
	sizes   string
}

// defaultEVP is what speed measures when no cipher is named, as the seeds do.
const defaultEVP = "aes-256-cbc"

func speedFlags(fs *flag.FlagSet) func(context.Context, *runEnv, []string) (int, error) {
	var o speedOpts
	fs.StringVar(&o.evp, "evp", "", "cipher, measured and labelled the way openssl's -evp does: aes-128|192|256-cbc|ctr|ecb (default "+defaultEVP+" when no CIPHER is named); ECB is for measuring only")
	fs.StringVar(&o.engine, "engine", engine.SoftwareName, "engine: "+engine.Specs+", or all (every engine and driver found)")
	fs.BoolVar(&o.elapsed, "elapsed", false, "divide by elapsed time instead of user CPU time (use it: kernel and device work is not user CPU time)")
	fs.IntVar(&o.seconds, "seconds", 3, "seconds per block size")
	fs.IntVar(&o.bytes, "bytes", 0, "measure only this block size")
	fs.StringVar(&o.sizes, "sizes", "", "measure these block sizes, comma separated (default openssl's "+sizeList(speed.OpenSSLSizes)+"; with -tcrypt those of seed 004's kernel, "+sizeList(tcryptSizes)+"; Linux 6.1's tcrypt uses "+sizeList(tcryptSizes61)+")")
	fs.BoolVar(&o.decrypt, "decrypt", false, "measure decryption")
	fs.IntVar(&o.multi, "multi", 1, "run N workers in parallel, each with its own session")
	fs.IntVar(&o.repeat, "repeat", 1, "rounds, each measuring every engine once (in turned order): the table shows the median and each fastest-engine band its lead as paired per-round ratios, with the spread where the rounds disagree")
	fs.BoolVar(&o.irq, "irq", false, "show the /proc/interrupts lines that moved while each engine ran")
	fs.BoolVar(&o.json, "json", false, "print JSON for machines instead of the table (an array when several ciphers are named)")
	fs.BoolVar(&o.cost, "cost", false, "then show where a tunnel frame's time goes with these engines: cipher, each MAC, copies, syscalls (offload frame-cost)")
	fs.BoolVar(&o.tcrypt, "tcrypt", false, "measure and print like the kernel's 'modprobe tcrypt sec=N mode=200': ecb, cbc, ctr (or the modes named), 128/192/256-bit keys, encryption and decryption, blocks of "+sizeList(tcryptSizes)+" bytes")
	return func(ctx context.Context, env *runEnv, args []string) (int, error) {
		// Flags may follow the cipher names, as openssl takes them.
		var names []string
		for len(args) > 0 {
			if len(args[0]) > 1 && args[0][0] == '-' {
				if err := fs.Parse(args); err != nil {
					if errors.Is(err, flag.ErrHelp) {
						return 0, nil
					}
					return 2, nil // the flag package has said what is wrong
				}
				args = fs.Args()
				continue
			}
			names, args = append(names, args[0]), args[1:]
		}
		if o.seconds <= 0 || o.multi <= 0 || o.bytes < 0 || o.repeat <= 0 {
			return 2, errUsage
		}
		if o.bytes > 0 && o.sizes != "" {
			return 2, errors.New("-bytes and -sizes both name the block sizes: give one")
		}
		if o.tcrypt {
			if o.evp != "" || o.decrypt || o.multi != 1 || o.irq || o.json || o.cost || o.repeat != 1 {
				return 2, errors.New("-tcrypt measures every key size both ways, one request at a time, and prints tcrypt's lines: it takes -engine, -seconds, -bytes and modes (ecb cbc ctr)")
			}
			return runTcrypt(ctx, env, o, names)
		}
		if o.cost && (o.json || len(names) > 0) {
			return 2, errors.New("-cost prints a table for the -evp cipher; for JSON run offload frame-cost -json")
		}
		code, err := runSpeed(ctx, env, o, names)
		if err != nil || !o.cost {
			return code, err
		}
		fmt.Fprintln(env.Stdout)
		evp := o.evp
		if evp == "" {
			evp = defaultEVP
		}
		return runFrameCost(ctx, env, frameCostOpts{
			evp: evp, engine: o.engine, mac: "all", time: 300 * time.Millisecond, bytes: o.bytes, decrypt: o.decrypt,
		})
	}
}

// speedReport is the -json document of one cipher.
type speedReport struct {
	Offload  string `json:"offload"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
	Kernel   string `json:"kernel"`
	CPUAES   bool   `json:"cpu_aes"`
	// AFALG is what this kernel lets AF_ALG reach, where it is less than
	// every driver (engine.KernelAFALGNote: Linux 7.2 and later).
	AFALG     string       `json:"afalg,omitempty"`
	Cipher    string       `json:"cipher"`
	Direction string       `json:"direction"`
	Seconds   int          `json:"seconds"`
	Repeat    int          `json:"repeat"`
	Multi     int          `json:"multi"`
	Elapsed   bool         `json:"elapsed"`
	Engines   []engineRun  `json:"engines"`
	Bands     []speed.Band `json:"bands,omitempty"`
	sizes     []int
	label     string // the table's row name: openssl's, see speedCipher
}

type engineRun struct {
	Engine      string `json:"engine"`
	Available   bool   `json:"available"`
	Unavailable string `json:"unavailable,omitempty"`
	// NotMeasured is why a cipher-only measurement does not apply to
	// the engine (engine.WhyNoCipherFigures: a frame engine).
	NotMeasured string            `json:"not_measured,omitempty"`
	Error       string            `json:"error,omitempty"`
	Driver      *engine.Driver    `json:"driver,omitempty"`
	Results     []speed.Result    `json:"results,omitempty"`
	IRQ         map[string]uint64 `json:"irq_delta,omitempty"`
	// Rounds is every round's results with -repeat above 1; Results is
	// then the median per size.
	Rounds [][]speed.Result `json:"rounds,omitempty"`
}

// speedCipher is one cipher to measure and its label in the progress lines
// and the table, as openssl prints them: the EVP name ("aes-128-cbc") for
// -evp, the old low-level name ("aes-128 cbc") for a cipher named as an
// argument (seed 003's `openssl speed -elapsed aes-128-cbc`).
type speedCipher struct {
	c     engine.Cipher
	label string
}

// speedCiphers resolves the named ciphers, in order, then the -evp one,
// which is aes-256-cbc when nothing is named. "aes" names the three
// AES-CBC key sizes, as openssl reads it.
func speedCiphers(evp string, names []string) ([]speedCipher, error) {
	var out []speedCipher
	for _, n := range names {
		if strings.EqualFold(n, "aes") {
			for _, bits := range []int{128, 192, 256} {
				c := engine.Cipher{Mode: engine.CBC, KeyBits: bits}
				out = append(out, speedCipher{c, legacyLabel(c)})
			}
			continue
		}
		c, err := engine.ParseMeasureCipher(n)
		if err != nil {
			return nil, err
		}
		out = append(out, speedCipher{c, legacyLabel(c)})
	}
	if evp != "" || len(names) == 0 {
		if evp == "" {
			evp = defaultEVP
		}
		c, err := engine.ParseMeasureCipher(evp)
		if err != nil {
			return nil, fmt.Errorf("-evp: %w", err)
		}
		out = append(out, speedCipher{c, c.String()})
	}
	return out, nil
}

// blockSizes is what -bytes or -sizes name, def when neither is given.
func (o speedOpts) blockSizes(def []int) ([]int, error) {
	switch {
	case o.bytes > 0:
		return []int{o.bytes}, nil
	case o.sizes == "":
		return def, nil
	}
	var out []int
	for _, f := range strings.Split(o.sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-sizes: %q is not a positive block size", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// legacyLabel is openssl 1.x's name for a cipher measured without -evp.
func legacyLabel(c engine.Cipher) string { return fmt.Sprintf("aes-%d %s", c.KeyBits, c.Mode) }

func runSpeed(ctx context.Context, env *runEnv, o speedOpts, names []string) (int, error) {
	ciphers, err := speedCiphers(o.evp, names)
	if err != nil {
		return 2, err
	}
	dir := engine.Encrypt
	if o.decrypt {
		dir = engine.Decrypt
	}
	sizes, err := o.blockSizes(speed.OpenSSLSizes)
	if err != nil {
		return 2, err
	}
	// Every cipher's engines are checked before anything is measured.
	engines := make([][]engine.Engine, len(ciphers))
	for i, sc := range ciphers {
		var code int
		if engines[i], code, err = pickEngines(o.engine, sc.c); err != nil {
			return code, err
		}
	}
	if o.elapsed && !o.json {
		fmt.Fprintln(env.Stderr, "You have chosen to measure elapsed time instead of user CPU time.")
	}
	var reps []*speedReport
	measured := 0
	for i, sc := range ciphers {
		rep := &speedReport{
			Offload: version(), Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
			Kernel: sysinfo.Kernel(), CPUAES: engine.HardwareAES(), AFALG: engine.KernelAFALGNote(),
			Cipher: sc.c.String(), Direction: dir.String(), Seconds: o.seconds, Repeat: o.repeat, Multi: o.multi, Elapsed: o.elapsed, sizes: sizes, label: sc.label,
		}
		n, code, err := speedCipherRun(ctx, env.Stderr, o, sc, dir, engines[i], rep)
		if err != nil {
			return code, err
		}
		measured += n
		reps = append(reps, rep)
	}
	if o.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if len(reps) == 1 {
			return 0, enc.Encode(reps[0])
		}
		return 0, enc.Encode(reps)
	}
	printSpeedTable(env.Stdout, reps)
	if measured == 0 {
		return 1, errors.New("no engine could be measured")
	}
	return 0, nil
}

// speedCipherRun measures sc on every engine into rep, -repeat rounds,
// printing openssl's progress lines, and returns how many engines were
// measured. Within a round the engines run one after the other, every
// other round in reverse order, so that the runs a lead pairs were made
// close together in time and no engine always runs first.
func speedCipherRun(ctx context.Context, progress io.Writer, o speedOpts, sc speedCipher, dir engine.Direction, engines []engine.Engine, rep *speedReport) (int, int, error) {
	c := sc.c
	var live []int // indexes into rep.Engines of the engines that serve c
	for _, e := range engines {
		run := engineRun{Engine: e.Name()}
		if why := engine.WhyNoCipherFigures(e.Name()); why != "" {
			run.NotMeasured = why
			fmt.Fprintf(progress, "engine %s: not measured for %s: %s\n", e.Name(), sc.label, why)
		} else if _, err := e.Driver(c); err != nil {
			run.Unavailable = err.Error()
			fmt.Fprintf(progress, "engine %s: unavailable for %s: %v\n", e.Name(), sc.label, err)
		} else {
			run.Available = true
			live = append(live, len(rep.Engines))
		}
		rep.Engines = append(rep.Engines, run)
	}
	byName := map[string]engine.Engine{}
	for _, e := range engines {
		byName[e.Name()] = e
	}
	for round := range o.repeat {
		if o.repeat > 1 {
			fmt.Fprintf(progress, "round %d of %d:\n", round+1, o.repeat)
		}
		order := slices.Clone(live)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, k := range order {
			run := &rep.Engines[k]
			if run.Error != "" {
				continue // failed in an earlier round
			}
			if len(live) > 1 {
				fmt.Fprintf(progress, "engine %s:\n", run.Engine)
			}
			code, err := speedEngineRun(ctx, progress, o, sc, dir, byName[run.Engine], rep.sizes, run)
			if err != nil {
				return 0, code, err
			}
		}
	}
	var rounds []speed.Rounds
	for _, k := range live {
		run := &rep.Engines[k]
		if run.Error != "" || len(run.Rounds) == 0 {
			continue
		}
		r := speed.Rounds{Engine: run.Engine, Runs: run.Rounds}
		run.Results = r.Median().Results
		if o.repeat == 1 {
			run.Rounds = nil // the results are the one round
		}
		rounds = append(rounds, r)
	}
	if len(rounds) > 1 {
		curves := make([]speed.Curve, len(rounds))
		for i, r := range rounds {
			curves[i] = r.Median()
		}
		rep.Bands = speed.Leads(speed.Winners(curves), rounds)
	}
	return len(rounds), 0, nil
}

// speedEngineRun measures one round of one engine into run: its results
// are appended to run.Rounds, a failure ends up in run.Error. The error
// returned (with an exit code) is one that ends the command.
func speedEngineRun(ctx context.Context, progress io.Writer, o speedOpts, sc speedCipher, dir engine.Direction, e engine.Engine, sizes []int, run *engineRun) (int, error) {
	var irq0 map[string]uint64
	var err error
	if o.irq {
		if irq0, err = engine.ReadInterrupts(); err != nil {
			return 1, fmt.Errorf("-irq: %w", err)
		}
	}
	results, drv, err := speed.Run(ctx, e, speed.Config{
		Cipher: sc.c, Direction: dir, Sizes: sizes, Multi: o.multi,
		Duration: time.Duration(o.seconds) * time.Second,
		Start: func(size int) {
			fmt.Fprintf(progress, "Doing %s for %ds on %d size blocks: ", sc.label, o.seconds, size)
		},
		Done: func(r speed.Result) {
			d := r.UserCPU
			if o.elapsed || d <= 0 {
				d = r.Elapsed
			}
			fmt.Fprintf(progress, "%d %s's in %.2fs\n", r.Ops, sc.label, d.Seconds())
		},
	})
	if drv.Name != "" {
		run.Driver = &drv
	}
	if o.irq {
		irq1, ierr := engine.ReadInterrupts()
		if ierr != nil {
			return 1, fmt.Errorf("-irq: %w", ierr)
		}
		if run.IRQ == nil {
			run.IRQ = map[string]uint64{}
		}
		for k, v := range irqDelta(irq0, irq1) {
			run.IRQ[k] += v
		}
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return 130, err
		}
		run.Error = err.Error()
		run.Results = results
		fmt.Fprintf(progress, "\nengine %s failed: %v\n", e.Name(), err)
		return 0, nil
	}
	run.Rounds = append(run.Rounds, results)
	return 0, nil
}

func irqDelta(before, after map[string]uint64) map[string]uint64 {
	d := map[string]uint64{}
	for k, v := range after {
		if v > before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// printSpeedTable prints openssl's table (in 1000s of bytes per second),
// one row per cipher and engine, then what openssl does not say: the driver
// that served each row, the crossovers, and the interrupts that moved.
func printSpeedTable(w io.Writer, reps []*speedReport) {
	first := reps[0]
	fmt.Fprintf(w, "offload %s %s %s, kernel %s, CPU AES instructions: %v\n", first.Offload, first.Go, first.Platform, first.Kernel, yesNo(first.CPUAES))
	if first.AFALG != "" {
		fmt.Fprintf(w, "note: %s\n", first.AFALG)
	}
	fmt.Fprintln(w, "The 'numbers' are in 1000s of bytes per second processed.")
	// label is the row name; name the engine in the sections below, which
	// name the cipher too when there are several.
	label := func(rep *speedReport, r engineRun) string {
		if len(rep.Engines) == 1 {
			return rep.label
		}
		return rep.label + " " + r.Engine
	}
	name := func(rep *speedReport, r engineRun) string {
		if len(reps) == 1 {
			return r.Engine
		}
		return rep.label + " " + r.Engine
	}
	width := 18
	for _, rep := range reps {
		for _, r := range rep.Engines {
			width = max(width, len(label(rep, r))+2, len(name(rep, r))+2)
		}
	}
	fmt.Fprintf(w, "%-*s", width, "type")
	for _, s := range first.sizes {
		fmt.Fprintf(w, " %12s", fmt.Sprintf("%d bytes", s))
	}
	fmt.Fprintln(w)
	for _, rep := range reps {
		for _, r := range rep.Engines {
			if len(r.Results) == 0 {
				continue
			}
			fmt.Fprintf(w, "%-*s", width, label(rep, r))
			for _, res := range r.Results {
				bps := res.BytesPerUserSecond()
				if rep.Elapsed || res.UserCPU <= 0 {
					bps = res.BytesPerSecond()
				}
				fmt.Fprintf(w, " %11.2fk", bps/1000)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w, "\nengine drivers:")
	for _, rep := range reps {
		for _, r := range rep.Engines {
			n := name(rep, r)
			switch {
			case r.NotMeasured != "":
				fmt.Fprintf(w, "  %-*s [not measured: %s]\n", width, n, r.NotMeasured)
			case r.Driver != nil:
				fmt.Fprintf(w, "  %-*s %s\n", width, n, describeDriver(*r.Driver))
				if r.Error != "" {
					fmt.Fprintf(w, "  %-*s failed: %s\n", width, "", r.Error)
				}
			case r.Unavailable != "":
				fmt.Fprintf(w, "  %-*s [unavailable: %s]\n", width, n, r.Unavailable)
			case r.Error != "":
				fmt.Fprintf(w, "  %-*s failed: %s\n", width, n, r.Error)
			}
		}
	}
	for _, rep := range reps {
		if len(rep.Bands) == 0 {
			continue
		}
		if len(reps) == 1 {
			fmt.Fprintln(w, "\nfastest engine by block size:")
		} else {
			fmt.Fprintf(w, "\nfastest engine by block size, %s:\n", rep.label)
		}
		for i, b := range rep.Bands {
			fmt.Fprintf(w, "  %6d..%-6d bytes  %s%s\n", b.From, b.To, b.Engine, leadNote(b))
			if i > 0 {
				sure := ""
				if !speed.SureCrossover(rep.Bands[i-1], b) {
					sure = ", within spread: the rounds disagree on the winner next to it"
				}
				fmt.Fprintf(w, "  crossover: %s overtakes %s between %d and %d bytes%s\n", b.Engine, rep.Bands[i-1].Engine, rep.Bands[i-1].To, b.From, sure)
			}
		}
		if len(rep.Bands) == 1 {
			fmt.Fprintf(w, "  no crossover: %s is fastest at every measured size\n", rep.Bands[0].Engine)
		}
	}
	for _, rep := range reps {
		for _, r := range rep.Engines {
			if r.IRQ == nil {
				continue
			}
			n := name(rep, r)
			if len(r.IRQ) == 0 {
				fmt.Fprintf(w, "\ninterrupts during %s: none moved\n", n)
				continue
			}
			fmt.Fprintf(w, "\ninterrupts during %s:\n", n)
			keys := make([]string, 0, len(r.IRQ))
			for k := range r.IRQ {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return r.IRQ[keys[i]] > r.IRQ[keys[j]] })
			for _, k := range keys {
				fmt.Fprintf(w, "  %10d  %s\n", r.IRQ[k], k)
			}
		}
	}
}

// leadNote is a band's narrowest lead, "(closest: 1.05x afalg at 1024
// bytes)", through ratio.Paired: with the spread where the rounds straddle
// 1.00x, and a note where one round is all there is.
func leadNote(b speed.Band) string {
	if b.Lead == nil {
		return ""
	}
	note := fmt.Sprintf(" (closest: %s %s at %d bytes", b.Lead, b.LeadOver, b.LeadSize)
	if b.Lead.Straddles() {
		note += ": no clear winner there"
	}
	return note + ")"
}

func describeDriver(d engine.Driver) string {
	var parts []string
	parts = append(parts, d.Name)
	if d.Module != "" {
		parts[0] += " (" + d.Module + ")"
	}
	if d.Priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", d.Priority))
	}
	if d.Async {
		parts = append(parts, "async")
	}
	kind := "cpu"
	if d.Hardware {
		kind = "hardware"
	}
	if d.HardwareWhy != "" {
		kind += " (" + d.HardwareWhy + ")"
	}
	return strings.Join(append(parts, kind), ", ")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// pickEngines is the -engine flag of speed and frame-cost: "all" is every
// engine and driver engine.All finds for c (unavailable ones and frame
// engines included, to be reported), anything else one engine, which must
// serve c (exit code 2 for a bad spec, 1 for an unavailable engine).
func pickEngines(spec string, c engine.Cipher) ([]engine.Engine, int, error) {
	if spec == "all" {
		return engine.All(c, engine.Options{}), 0, nil
	}
	e, err := engine.Open(spec, engine.Options{})
	if err != nil {
		return nil, 2, err
	}
	if _, err := e.Driver(c); err != nil {
		return nil, 1, fmt.Errorf("%s: %w", e.Name(), err)
	}
	return []engine.Engine{e}, 0, nil
}
