package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/measure/method"
	"github.com/offload-dev/offload/tunnel"
)

type rssOpts struct {
	offload  string // prebuilt binary; "" builds ./cmd/offload
	examples string
	streams  []int
	windows  []int64
	cross    bool
	sink     string // fast, stalled, both or held
	load     time.Duration
	idle     time.Duration
	chunk    int
	env      listFlag
	sanity   int64
	keep     bool
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, " ") }
func (l *listFlag) Set(s string) error {
	if !strings.Contains(s, "=") {
		return fmt.Errorf("%q: want NAME=VALUE", s)
	}
	*l = append(*l, s)
	return nil
}

// scenario is one start of the server and the client.
type scenario struct {
	Streams int
	Window  int64
	Stalled bool // the sink accepts but does not read
	Held    bool // each stream sends -chunk bytes once, then stays open
}

func (s scenario) String() string {
	sink := "fast sink"
	if s.Stalled {
		sink = "stalled sink"
	}
	if s.Held {
		sink = "held streams"
	}
	return fmt.Sprintf("%d streams, window %s, %s", s.Streams, fmtBytes(s.Window), sink)
}

// proc indexes the two processes in results.
const (
	server = iota
	client
)

var procNames = [2]string{"server", "client"}

type rssResult struct {
	scenario
	Idle    [2]memStatus // after the link is up and has settled
	LoadMax [2]int64     // highest VmRSS sampled under load
	LoadHWM [2]int64     // VmHWM after the load
	Sent    int64        // bytes the load generator wrote
	Sunk    int64        // bytes the sink read
	Secs    float64
}

func runRSS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o rssOpts
	fs := flag.NewFlagSet("rss", flag.ContinueOnError)
	fs.SetOutput(stderr)
	streams := fs.String("streams", "10,50,100,200", "concurrent streams under load (comma-separated)")
	windows := fs.String("windows", "256KiB,1MiB,4MiB", "yamux_window values (comma-separated)")
	fs.BoolVar(&o.cross, "cross", false, "every streams x window pair; without it, the streams at the default window (1MiB) and the windows at 100 streams")
	fs.StringVar(&o.sink, "sink", "fast", "fast (reads and discards), stalled (accepts, never reads: the buffers fill), both, or held (each stream sends -chunk bytes, then all are held open: what idle streams cost)")
	fs.StringVar(&o.offload, "offload", "", "offload binary to run (default: build ./cmd/offload stripped, for this machine)")
	fs.StringVar(&o.examples, "examples", "examples", "folder with server.yaml and client.yaml to start from")
	fs.DurationVar(&o.load, "load", 5*time.Second, "how long the load generator pushes data")
	fs.DurationVar(&o.idle, "idle", 2*time.Second, "settle time before the idle reading")
	fs.IntVar(&o.chunk, "chunk", 32<<10, "bytes per write of the load generator")
	fs.Var(&o.env, "env", "NAME=VALUE in the environment of both processes, e.g. GOMEMLIMIT=20MiB (repeatable)")
	sanity := fs.String("sanity", "0", "fail if a process's VmHWM with a fast sink exceeds this (0: off); a generous bound, not the goal")
	fs.BoolVar(&o.keep, "keep", false, "keep the work folder (configs, logs) and print its path")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "rss: unexpected arguments %q\n", fs.Args())
		}
		return errUsage
	}
	var err error
	if o.streams, err = parseList(*streams, strconv.Atoi); err != nil {
		return fmt.Errorf("-streams: %w", err)
	}
	if o.windows, err = parseList(*windows, parseBytes); err != nil {
		return fmt.Errorf("-windows: %w", err)
	}
	if o.sanity, err = parseBytes(*sanity); err != nil {
		return fmt.Errorf("-sanity: %w", err)
	}
	for _, n := range o.streams {
		if n < 1 {
			return fmt.Errorf("-streams: %d: want at least 1", n)
		}
	}
	if o.sink != "fast" && o.sink != "stalled" && o.sink != "both" && o.sink != "held" {
		return fmt.Errorf("-sink %q: want fast, stalled, both or held", o.sink)
	}
	if o.load <= 0 || o.idle < 0 || o.chunk < 1 {
		return fmt.Errorf("-load, -idle, -chunk: want positive values")
	}
	if runtime.GOOS != "linux" {
		return fmt.Errorf("rss reads /proc/PID/status: Linux only")
	}

	dir, err := os.MkdirTemp("", "offload-budget-rss-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintf(stderr, "budget: work folder %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := o.offload
	if bin == "" {
		bin = filepath.Join(dir, "offload")
		if err := goBuild(ctx, bin, "./cmd/offload", nil, stderr); err != nil {
			return err
		}
	}
	key := filepath.Join(dir, "offload.key")
	if out, err := exec.CommandContext(ctx, bin, "keygen", "-o", key).CombinedOutput(); err != nil {
		return fmt.Errorf("offload keygen: %w: %s", err, out)
	}
	var tmpl [2]string
	for i, name := range []string{"server.yaml", "client.yaml"} {
		b, err := os.ReadFile(filepath.Join(o.examples, name))
		if err != nil {
			return fmt.Errorf("config template: %w (run from the repository root, or set -examples)", err)
		}
		tmpl[i] = string(b)
	}

	env := "default GOGC, no GOMEMLIMIT"
	if len(o.env) > 0 {
		env = strings.Join(o.env, " ")
	}
	fmt.Fprintf(stdout, "RSS of offload server and client (%s, %s/%s, %d CPUs), configs from %s/ with engine and tunables as there; load: %v of %d-byte writes per stream; %s\n\n",
		bin, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), o.examples, o.load, o.chunk, env)
	if err := rssTable.WriteMarkdownHeader(stdout); err != nil {
		return fmt.Errorf("rss table: %w", err)
	}

	var insane []string
	for i, sc := range o.scenarios() {
		r, err := measure(ctx, &o, bin, key, tmpl, filepath.Join(dir, strconv.Itoa(i)), sc)
		if err != nil {
			return fmt.Errorf("%v: %w", sc, err)
		}
		sink, rate := "fast", fmt.Sprintf("%.1f", float64(r.Sunk)/1e6/r.Secs)
		if sc.Stalled {
			sink, rate = fmt.Sprintf("stalled (%s MiB written)", mib(r.Sent)), "-"
		}
		if sc.Held {
			sink, rate = fmt.Sprintf("held (%d bytes each, then open)", o.chunk), "-"
		}
		// Each row as it is measured: a scenario takes seconds.
		if err := method.WriteMarkdownRow(stdout, strconv.Itoa(sc.Streams), fmtBytes(sc.Window), sink, rate,
			mib(r.Idle[server].RSS), mib(r.LoadMax[server]), mib(r.LoadHWM[server]),
			mib(r.Idle[client].RSS), mib(r.LoadMax[client]), mib(r.LoadHWM[client])); err != nil {
			return fmt.Errorf("rss table: %w", err)
		}
		if f, ok := stdout.(interface{ Sync() error }); ok {
			_ = f.Sync()
		}
		if o.sanity > 0 && !sc.Stalled {
			for p := range 2 {
				if r.LoadHWM[p] > o.sanity {
					insane = append(insane, fmt.Sprintf("%s with %v: VmHWM %s MiB", procNames[p], sc, mib(r.LoadHWM[p])))
				}
			}
		}
	}
	fmt.Fprintf(stdout, "\n(MiB; idle RSS is VmRSS after the link is up; load max RSS is the highest VmRSS sampled every 50ms under load; HWM is VmHWM after it)\n")
	if len(insane) > 0 {
		return fmt.Errorf("%w: sanity bound %s MiB: %s", errOver, mib(o.sanity), strings.Join(insane, "; "))
	}
	return nil
}

// rssTable is the report's table: a row per scenario.
var rssTable = method.Table{Columns: []method.Column{
	{Title: "streams", Right: true}, {Title: "window", Right: true}, {Title: "sink"}, {Title: "MB/s", Right: true},
	{Title: "server idle RSS", Right: true}, {Title: "server load max RSS", Right: true}, {Title: "server HWM", Right: true},
	{Title: "client idle RSS", Right: true}, {Title: "client load max RSS", Right: true}, {Title: "client HWM", Right: true},
}}

// defaultWindow and defaultStreams pick the row and column of the
// default (non -cross) matrix.
const (
	defaultWindow  = 1 << 20
	defaultStreams = 100
)

func (o *rssOpts) scenarios() []scenario {
	var base []scenario
	seen := map[scenario]bool{}
	add := func(s scenario) {
		if !seen[s] {
			seen[s] = true
			base = append(base, s)
		}
	}
	if o.cross || len(o.streams) == 1 || len(o.windows) == 1 {
		for _, w := range o.windows {
			for _, n := range o.streams {
				add(scenario{Streams: n, Window: w})
			}
		}
	} else {
		w := o.windows[0]
		for _, x := range o.windows {
			if x == defaultWindow {
				w = x
			}
		}
		n := o.streams[0]
		for _, x := range o.streams {
			if x == defaultStreams {
				n = x
			}
		}
		for _, s := range o.streams {
			add(scenario{Streams: s, Window: w})
		}
		for _, x := range o.windows {
			add(scenario{Streams: n, Window: x})
		}
	}
	var out []scenario
	for _, s := range base {
		if o.sink == "held" {
			s.Held = true
			out = append(out, s)
			continue
		}
		if o.sink != "stalled" {
			out = append(out, s)
		}
		if o.sink != "fast" {
			s.Stalled = true
			out = append(out, s)
		}
	}
	return out
}

// sink is the service the server forwards to. Every connection starts
// with a line: "probe" (readiness check: the line is reported on ready)
// or "load" (then data: read and discarded, or held unread when stalled).
type sink struct {
	ln      net.Listener
	stalled bool
	ready   chan struct{}
	once    sync.Once
	read    atomic.Int64
	ended   atomic.Int64 // load connections read to their end
	mu      sync.Mutex
	conns   []net.Conn
}

func newSink(stalled bool) (*sink, error) {
	var lc net.ListenConfig
	if stalled {
		// A small receive buffer (inherited by accepted sockets), so that
		// what the stalled streams hold is held by the server process and
		// not by the loopback socket buffers (megabytes each, autotuned).
		lc.Control = func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, stalledRcvBuf)
			})
			if err != nil {
				return err
			}
			return serr
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, stalled: stalled, ready: make(chan struct{})}
	go s.serve()
	return s, nil
}

func (s *sink) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		go s.handle(c)
	}
}

func (s *sink) handle(c net.Conn) {
	// The first line, a byte at a time: nothing after it is read yet.
	var line []byte
	b := make([]byte, 1)
	for len(line) < 16 {
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		if line = append(line, b[0]); b[0] == '\n' {
			break
		}
	}
	switch string(line) {
	case "probe\n":
		s.once.Do(func() { close(s.ready) })
		_ = c.Close()
	case "load\n":
		if s.stalled {
			return // held open, unread, until close
		}
		_, err := io.Copy(countWriter{&s.read}, c)
		if err == nil {
			s.ended.Add(1)
		}
		_ = c.Close()
	}
}

func (s *sink) close() {
	_ = s.ln.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
}

// countWriter counts what it discards as it arrives (held streams never
// end).
type countWriter struct{ n *atomic.Int64 }

func (w countWriter) Write(p []byte) (int, error) {
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// stalledRcvBuf is SO_RCVBUF of the stalled sink (the kernel doubles it).
const stalledRcvBuf = 4 << 10

// freePort returns a loopback address that was free a moment ago.
func freePort() (string, error) { return testutil.FreeAddr("127.0.0.1") }

// child is a started offload process.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it has exited
	err  error         // of Wait, once done
}

func startChild(name, bin, config, logFile string, env []string) (*child, error) {
	lf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, name, "-c", config)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, err
	}
	c := &child{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		lf.Close()
		close(c.done)
	}()
	return c, nil
}

// alive fails if the process has exited, with the tail of its log.
func (c *child) alive() error {
	select {
	case <-c.done:
		return fmt.Errorf("offload %s exited (%v): %s", c.name, c.err, c.tail())
	default:
		return nil
	}
}

func (c *child) tail() string {
	b, _ := os.ReadFile(c.log)
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// stop sends SIGTERM and waits; a process that does not end is killed and
// that is an error.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		if c.err != nil {
			return fmt.Errorf("offload %s after SIGTERM: %w: %s", c.name, c.err, c.tail())
		}
		return nil
	case <-time.After(15 * time.Second):
		c.kill()
		return fmt.Errorf("offload %s did not stop within 15s of SIGTERM", c.name)
	}
}

// kill ends the process if it still runs.
func (c *child) kill() {
	select {
	case <-c.done:
	default:
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func measure(ctx context.Context, o *rssOpts, bin, key string, tmpl [2]string, dir string, sc scenario) (*rssResult, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	sk, err := newSink(sc.Stalled)
	if err != nil {
		return nil, err
	}
	defer sk.close()
	listen, err := freePort()
	if err != nil {
		return nil, err
	}
	forward, err := freePort()
	if err != nil {
		return nil, err
	}
	window := "yamux_window: " + fmtBytes(sc.Window)
	// A stalled sink: link_buffer bounds what the stalled streams hold
	// and resets a stream past it; raise it (never lower it) so that
	// every stream fills its window and the figures measure them. Fast
	// and held sinks run on the default.
	def := int64(tunnel.DefaultOptions().LinkBuffer)
	linkBuffer := "link_buffer: " + fmtBytes(def)
	if sc.Stalled {
		linkBuffer = "link_buffer: " + fmtBytes(max(def, int64(tunnel.LinkBufferFor(sc.Streams, int(sc.Window)))))
	}
	srv := tmpl[server]
	srv = setTopLevel(srv, "listen", "listen: "+listen)
	srv = setTopLevel(srv, "key_file", "key_file: "+key)
	srv = setTopLevel(srv, "services", "services:\n  sink: "+sk.ln.Addr().String())
	srv = setTopLevel(srv, "yamux_window", window)
	srv = setTopLevel(srv, "link_buffer", linkBuffer)
	cli := tmpl[client]
	cli = setTopLevel(cli, "server", "server: "+listen)
	cli = setTopLevel(cli, "key_file", "key_file: "+key)
	cli = setTopLevel(cli, "forwards", "forwards:\n  - listen: "+forward+"\n    service: sink")
	cli = setTopLevel(cli, "yamux_window", window)
	cli = setTopLevel(cli, "link_buffer", linkBuffer)
	var procs [2]*child
	for p, text := range []string{srv, cli} {
		cfg := filepath.Join(dir, procNames[p]+".yaml")
		if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
			return nil, err
		}
		c, err := startChild(procNames[p], bin, cfg, filepath.Join(dir, procNames[p]+".log"), o.env)
		if err != nil {
			return nil, err
		}
		procs[p] = c
		defer c.kill()
	}

	// Ready: a probe line reaches the sink through the tunnel.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", forward, time.Second); err == nil {
			_, _ = io.WriteString(c, "probe\n")
			select {
			case <-sk.ready:
			case <-time.After(time.Second):
			}
			_ = c.Close()
		}
		select {
		case <-sk.ready:
		default:
			for _, c := range procs {
				if err := c.alive(); err != nil {
					return nil, err
				}
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("no probe reached the sink through the tunnel in 20s; server: %s; client: %s", procs[server].tail(), procs[client].tail())
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			continue
		}
		break
	}
	select {
	case <-time.After(o.idle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r := &rssResult{scenario: sc}
	for p, c := range procs {
		if r.Idle[p], err = readStatus(c.cmd.Process.Pid); err != nil {
			return nil, err
		}
	}

	// Load: Streams connections write until the end of the load, the
	// sampler keeps the highest VmRSS of each process.
	stopSampling := make(chan struct{})
	sampled := make(chan error, 1)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for p, c := range procs {
				m, err := readStatus(c.cmd.Process.Pid)
				if err != nil {
					sampled <- err
					return
				}
				r.LoadMax[p] = max(r.LoadMax[p], m.RSS)
			}
			select {
			case <-stopSampling:
				sampled <- nil
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	end := start.Add(o.load)
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sc.Streams)
	var conns []net.Conn
	var mu sync.Mutex
	for range sc.Streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", forward, 5*time.Second)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			_ = c.SetWriteDeadline(end)
			if _, err := io.WriteString(c, "load\n"); err != nil {
				errs <- err
				return
			}
			buf := make([]byte, o.chunk)
			for i := range buf {
				buf[i] = byte(i)
			}
			if sc.Held {
				n, err := c.Write(buf)
				sent.Add(int64(n))
				if err != nil {
					errs <- err
				}
				return
			}
			for {
				n, err := c.Write(buf)
				sent.Add(int64(n))
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						errs <- err
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	r.Secs = time.Since(start).Seconds()
	close(errs)
	if err, ok := <-errs; ok {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	r.Sent = sent.Load()
	if sc.Held {
		// Every stream's bytes reached the sink: all are open and idle.
		for wait := time.Now().Add(60 * time.Second); sk.read.Load() < r.Sent; {
			if time.Now().After(wait) {
				return nil, fmt.Errorf("60s after the writes, the sink has read %d of %d bytes", sk.read.Load(), r.Sent)
			}
			time.Sleep(20 * time.Millisecond)
		}
		select {
		case <-time.After(o.idle):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		r.Sunk = sk.read.Load()
		for p, c := range procs {
			m, err := readStatus(c.cmd.Process.Pid)
			if err != nil {
				return nil, err
			}
			r.LoadMax[p] = max(r.LoadMax[p], m.RSS)
		}
	}
	if !sc.Stalled && !sc.Held {
		// Everything written must arrive: close the writing side and wait
		// for the sink to see every stream end.
		for _, c := range conns {
			_ = c.(*net.TCPConn).CloseWrite()
		}
		for wait := time.Now().Add(30 * time.Second); sk.ended.Load() < int64(sc.Streams); {
			if time.Now().After(wait) {
				return nil, fmt.Errorf("30s after the load, the sink has seen %d of %d streams end, %d of %d bytes",
					sk.ended.Load(), sc.Streams, sk.read.Load(), r.Sent)
			}
			time.Sleep(20 * time.Millisecond)
		}
		r.Sunk = sk.read.Load()
		if r.Sunk != r.Sent {
			return nil, fmt.Errorf("the sink read %d bytes, the load generator wrote %d", r.Sunk, r.Sent)
		}
	}
	close(stopSampling)
	if err := <-sampled; err != nil {
		return nil, err
	}
	for p, c := range procs {
		m, err := readStatus(c.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		r.LoadHWM[p] = m.HWM
	}
	for _, c := range conns {
		_ = c.Close()
	}
	sk.close()
	for _, p := range []int{client, server} {
		if err := procs[p].stop(); err != nil {
			return nil, err
		}
	}
	return r, nil
}
