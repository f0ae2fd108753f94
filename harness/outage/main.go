// Command outage measures what applications see through offload when the
// path between its ends fails and returns (issue 30; docs/tunnel.md,
// "Sessions that outlive links"; figures in docs/lab/sessions.md). As
// root it makes two network namespaces joined by a veth pair (rig.go)
// with a WAN's rate (-rate, tc tbf); with -proxy (no root) everything is
// on loopback and the path is a proxy (proxy.go). It runs the built
// binary's server and client there, the targets (an echo service, a
// hashing sink, a source) beside the server and the applications beside
// the client. For each disruption it starts a fresh load (load.go):
// -streams echo connections that each echo a message before and after,
// and a transfer of -bytes each way (sha256 checked at the receiving
// end), then, once a quarter of the bytes crossed, disrupts the path:
//
//	outage D  the client's end of the veth down for D, then up (-outages);
//	          with -proxy the proxy resets the link and refuses new ones
//	          for D
//	roam      the client's namespace moves to another address (-roam;
//	          not with -proxy)
//	cuts N    the link's TCP connection destroyed (ss -K; with -proxy the
//	          proxy resets it) N times in a row, each once the transfer
//	          moved on (-cuts)
//
// and reports per run:
//
//	resets   applications that saw their connection fail: echo streams
//	         (of -streams), the upload, the download
//	sha256   whether each transfer's bytes arrived whole and intact
//	moving   from the path's return (the veth up, the address moved) to
//	         the first byte the transfers deliver after it; for cuts, from
//	         each cut until 8 MiB more arrived each way (an upper bound:
//	         it includes moving those bytes), the largest of the cuts
//	served   from the path's return (each cut) to a new connection's echo
//	RSS      the most VmRSS of the server and the client while the path
//	         was away (sampled from /proc every 100 ms)
//	waiting  the server's `offload status` lines about a session that
//	         waits for its client, taken mid-outage
//
// Run it from the repository root (it builds ./cmd/offload unless -bin),
// as root unless -proxy:
//
//	go run ./harness/outage                             # 256 MiB each way, 1,000 streams, 3s,10s,30s, roam, 20 cuts
//	go run ./harness/outage -set 'resume_window: 0'     # the same with resumption off
//	go run ./harness/outage -quick -check               # CI's smoke
//	go run ./harness/outage -proxy                      # no root: a proxy resets the link
//
// A hash mismatch is always exit status 1; -check makes any reset one
// too. Interrupted,
// it stops both ends and deletes its namespaces; a run killed outright is
// cleaned up by the next (removeStale).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

type options struct {
	bin        string
	bytes      int64
	streams    int
	outages    []time.Duration
	roam       bool
	cuts       int
	check      bool
	set        []string
	rate       string
	proxy      bool
	logs       string
	maxStreams int
}

// quick is -quick's load: small enough for CI's 2 busy cores, every kind
// of disruption once.
var quick = options{bytes: 32 << 20, streams: 100, outages: []time.Duration{3 * time.Second}, roam: true, cuts: 3}

func main() {
	// Pdeathsig (rig.start) fires when the thread that started the child
	// exits, not the process: the ends are started from main's goroutine,
	// kept on the main thread, which lives as long as the process.
	runtime.LockOSThread()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outage:", err)
	}
	os.Exit(code)
}

// sizeFlag is a byte count with a binary suffix (256MiB).
type sizeFlag struct{ n *int64 }

func (s sizeFlag) String() string {
	if s.n == nil {
		return ""
	}
	return fmt.Sprintf("%dMiB", *s.n>>20)
}

func (s sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err == nil {
		*s.n = n
	}
	return err
}

// parseSize reads N, NKiB, NMiB or NGiB.
func parseSize(v string) (int64, error) {
	digits := strings.TrimRight(v, "KMGiB")
	shift := map[string]uint{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30}
	s, ok := shift[v[len(digits):]]
	n, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil || n <= 0 || n > 1<<(62-s) {
		return 0, fmt.Errorf("size %q: want a positive N, NKiB, NMiB or NGiB", v)
	}
	return n << s, nil
}

// parseOutages reads -outages: durations, comma separated ("" is none).
func parseOutages(v string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-outages: %q is not a positive duration", f)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, "; ") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{bytes: 256 << 20}
	fs := flag.NewFlagSet("outage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "", "the offload binary (default: go build ./cmd/offload)")
	fs.Var(sizeFlag{&o.bytes}, "bytes", "each transfer's size, each way (256MiB)")
	fs.IntVar(&o.streams, "streams", 1000, "echo streams open across each disruption")
	outages := fs.String("outages", "3s,10s,30s", "veth-down outages, comma separated (\"\" for none)")
	fs.BoolVar(&o.roam, "roam", true, "a run where the client's address moves")
	fs.IntVar(&o.cuts, "cuts", 20, "a run with this many cuts of the link in a row (0: none)")
	fs.StringVar(&o.rate, "rate", "100mbit", "the path's rate each way (tc tbf; \"\" for the veth's own; not with -proxy)")
	fs.BoolVar(&o.proxy, "proxy", false, "no root: both ends on loopback, the path a proxy that resets the link (no -roam, no -rate)")
	fs.StringVar(&o.logs, "logs", "", "a `DIR` to keep both ends' logs in (server.log, client.log)")
	fs.BoolVar(&o.check, "check", false, "exit 1 on any reset too (a hash mismatch always is)")
	q := fs.Bool("quick", false, fmt.Sprintf("CI's smoke: -bytes %dMiB -streams %d -outages 3s -roam -cuts %d, unless given", quick.bytes>>20, quick.streams, quick.cuts))
	fs.Var((*listFlag)(&o.set), "set", "a config line for both ends (\"resume_window: 30s\"), repeatable")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if o.outages, err = parseOutages(*outages); err != nil {
		return o, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if o.proxy {
		// Loopback has no rate to set and the client no address to move.
		if (given["roam"] && o.roam) || given["rate"] {
			return o, errors.New("-proxy: no -roam, no -rate (they need the namespaces)")
		}
		o.roam, o.rate = false, "loopback"
	}
	if *q {
		if !given["bytes"] {
			o.bytes = quick.bytes
		}
		if !given["streams"] {
			o.streams = quick.streams
		}
		if !given["outages"] {
			o.outages = quick.outages
		}
		if !given["cuts"] {
			o.cuts = quick.cuts
		}
	}
	if o.streams < 0 || o.cuts < 0 {
		return o, errors.New("-streams and -cuts must not be negative")
	}
	// Every echo stream, both transfers and the probes at once, on one
	// link (the server's cap) and through the client (its own).
	o.maxStreams = max(1024, o.streams+64)
	return o, nil
}

func run(ctx context.Context, args []string, stdout io.Writer) (int, error) {
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		return 2, err
	}
	if !o.proxy {
		if os.Geteuid() != 0 {
			return 1, errors.New("needs root: it makes network namespaces and a veth pair (-proxy does not)")
		}
		for _, tool := range []string{"ip", "ss"} {
			if _, err := exec.LookPath(tool); err != nil {
				return 1, fmt.Errorf("needs %s (iproute2): %w", tool, err)
			}
		}
	}
	dir, err := os.MkdirTemp("", "offload-outage-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	if o.bin == "" {
		o.bin = filepath.Join(dir, "offload")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", o.bin, "./cmd/offload").CombinedOutput(); err != nil {
			return 1, fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	version, _ := exec.Command(o.bin, "version").Output()
	extra := ""
	for _, l := range o.set {
		extra += l + "\n"
	}
	r, err := newRig(ctx, o.bin, dir, o, extra)
	if err != nil {
		return 1, err
	}
	defer r.close()
	if o.logs != "" {
		defer func() {
			r.close() // the ends' last lines, then the files
			for name, out := range map[string]*testutil.SyncBuffer{"server.log": r.srv.Out, "client.log": r.cli.Out} {
				if err := os.WriteFile(filepath.Join(o.logs, name), []byte(out.String()), 0o644); err != nil {
					fmt.Fprintln(os.Stderr, "outage: -logs:", err)
				}
			}
		}()
	}

	fmt.Fprintf(stdout, "outage: %s; %d echo streams, %d MiB each way at %s; %s; config +%q\n",
		strings.TrimSpace(firstLine(string(version))), o.streams, o.bytes>>20, o.rate, time.Now().UTC().Format(time.RFC3339), o.set)
	var runs []scenario
	for _, d := range o.outages {
		runs = append(runs, scenario{name: "outage " + d.String(), outage: d})
	}
	if o.roam {
		runs = append(runs, scenario{name: "roam", roam: true})
	}
	if o.cuts > 0 {
		runs = append(runs, scenario{name: fmt.Sprintf("cuts %d", o.cuts), cuts: o.cuts})
	}
	var rows []row
	for i, sc := range runs {
		res, err := measure(ctx, r, o, sc, uint64(i+1)<<8)
		if err != nil {
			writeTable(stdout, rows, o.streams)
			return 1, fmt.Errorf("%s: %w\nserver:\n%s\nclient:\n%s", sc.name, err, tail(r.srv.Out), tail(r.cli.Out))
		}
		rows = append(rows, res)
		fmt.Fprintf(os.Stderr, "outage: %s done: %s\n", sc.name, res.summary(o.streams))
	}
	writeTable(stdout, rows, o.streams)
	resets, bad := 0, 0
	for _, rw := range rows {
		resets, bad = resets+rw.resets(), bad+rw.mismatches()
	}
	if bad > 0 {
		return 1, fmt.Errorf("%d transfers arrived with another sha256", bad)
	}
	if o.check && resets > 0 {
		return 1, fmt.Errorf("-check: %d applications saw a reset", resets)
	}
	return 0, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// tail is the last 40 lines of a process's output.
func tail(b *testutil.SyncBuffer) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-40):], "\n")
}
