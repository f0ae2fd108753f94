// Command mitm runs an offload server and client on loopback with a
// man-in-the-middle proxy between them that holds no keys, drives bulk
// and interactive streams through the tunnel, tampers with one record
// frame of the first link, and checks what every end saw (docs/defences.md,
// "Tampered frames"): the record layer must cut the link, and every
// stream must end with a reset or with all of its data, never with forged
// bytes or a clean but short end.
//
//	go run ./harness/mitm -mode flip                    # one run, seed 1
//	go run ./harness/mitm -mode reorder -dir s2c -seed 7 -keep
//	go run ./harness/mitm -mode dup -extra 'link_buffer:~64MiB' -up 30
//
// Without -bin it builds ./cmd/offload into its work folder (run it from
// the repository root). It writes a key with "offload keygen", a server
// config with three services (sink: checks every byte of an upload, then
// acks; source: sends a download; echo) and a client config with a forward
// to each, through the proxy; then it runs -up uploads and -down downloads
// of 1 to -size random bytes, each byte checked, and -inter interactive
// echo streams that type a line every few ms until the bulk streams end.
//
// Modes (the one tampering, on frame -at of direction -dir of the first
// link): flip (one random bit of the frame), flipflag (the header's epoch
// bit), replay (an earlier frame of that direction before it), dup (the
// frame twice), drop, reorder (swapped with the next frame), truncate (a
// prefix of the frame, then both connections closed), cutclean (both
// connections closed at a frame boundary), halfcut (a FIN at a frame
// boundary in this direction only), blackhole (nothing more forwarded this
// way, the connections kept), oldepoch (the last frame of the epoch before
// the first rekey, injected two frames after it: needs a build whose
// record.DefaultRekeyFrames is small), none (forward everything).
//
// Output: one JSON line. Tampered says the tamper happened; Frames and
// Epochs count the frames and the frames with the epoch bit seen client to
// server and server to client; TargetEnds and AppEnds count how the
// targets' and the application's connections ended (reset, eof: clean and
// complete, up-acked: an upload the sink had whole, inter-survived: an
// interactive stream still up at the end, timeout, dialfail, ...);
// ServerFailLines and ClientFailLines count "link failed" log lines, with
// the first of each. Violations lists what must not happen: a forged
// byte, a clean end that is short, an echo ended cleanly while open, a
// tampering (other than a FIN, a clean cut or a blackhole) that neither
// end logged as a link failure, streams that hung, or no tampering at
// all. Exit status 0: no violations; 1: violations (with -keep, the logs
// stay in the work folder it names); 2: the run could not be set up. For
// tests on your own machine only.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

var (
	bin      = flag.String("bin", "", "offload binary (default: go build ./cmd/offload into the work folder)")
	mode     = flag.String("mode", "flip", "flip|flipflag|replay|dup|drop|reorder|truncate|cutclean|halfcut|blackhole|oldepoch|none")
	dirFlag  = flag.String("dir", "c2s", "direction to tamper with: c2s (client to server) or s2c")
	seed     = flag.Uint64("seed", 1, "seed of the stream sizes, the frame -at and the tampering")
	uploads  = flag.Int("up", 6, "upload streams")
	downs    = flag.Int("down", 3, "download streams")
	inter    = flag.Int("inter", 2, "interactive streams")
	maxSize  = flag.Int("size", 4<<20, "max bytes per bulk stream")
	atFrame  = flag.Int("at", -1, "tamper at this data frame of -dir (-1: random 10..119 from -seed)")
	workdir  = flag.String("work", "", "work folder (default: a new temporary one)")
	keepLogs = flag.Bool("keep", false, "keep the work folder (configs, logs)")
	extraCfg = flag.String("extra", "", `extra YAML lines for both configs; \n separates lines, ~ stands for a space`)
)

var modes = map[string]bool{"flip": true, "flipflag": true, "replay": true, "dup": true, "drop": true, "reorder": true,
	"truncate": true, "cutclean": true, "halfcut": true, "blackhole": true, "oldepoch": true, "none": true}

type result struct {
	Mode, Dir       string
	Seed            uint64
	At              int
	Tampered        bool
	Epochs          [2]int // frames with the epoch bit, c2s and s2c
	Frames          [2]int
	TargetEnds      map[string]int
	AppEnds         map[string]int
	Violations      []string
	ServerFailLines int
	ClientFailLines int
	ServerLog       string `json:",omitempty"`
	ClientLog       string `json:",omitempty"`
}

var (
	mu            sync.Mutex // res, appClosedEcho
	res           = result{TargetEnds: map[string]int{}, AppEnds: map[string]int{}}
	appClosedEcho bool // the application has closed its interactive streams
)

func violate(f string, a ...any) {
	mu.Lock()
	res.Violations = append(res.Violations, fmt.Sprintf(f, a...))
	mu.Unlock()
}

func count(m map[string]int, k string) { mu.Lock(); m[k]++; mu.Unlock() }

func main() {
	flag.Parse()
	violations, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mitm:", err)
		os.Exit(2)
	}
	if violations {
		os.Exit(1)
	}
}

func listen() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// freeAddr is a loopback address no one listens on (for a moment).
func freeAddr() (string, error) { return testutil.FreeAddr("127.0.0.1") }

// run does one run and prints its result; it says whether there were
// violations.
func run() (bool, error) {
	if !modes[*mode] {
		return false, fmt.Errorf("unknown -mode %q", *mode)
	}
	tamperDir := 0
	switch *dirFlag {
	case "c2s":
	case "s2c":
		tamperDir = 1
	default:
		return false, fmt.Errorf("-dir %q: want c2s or s2c", *dirFlag)
	}
	if *maxSize < 1 {
		return false, fmt.Errorf("-size %d: want at least 1", *maxSize)
	}
	res.Mode, res.Dir, res.Seed = *mode, *dirFlag, *seed
	rng := rand.New(rand.NewPCG(*seed, 77))
	if *atFrame < 0 {
		*atFrame = 10 + rng.IntN(110)
	}
	res.At = *atFrame
	dir := *workdir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "offload-mitm-"); err != nil {
			return false, err
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	if !*keepLogs {
		defer os.RemoveAll(dir)
	}
	offload := *bin
	if offload == "" {
		offload = filepath.Join(dir, "offload")
		if out, err := exec.Command("go", "build", "-o", offload, "./cmd/offload").CombinedOutput(); err != nil {
			return false, fmt.Errorf("go build ./cmd/offload (run from the repository root, or give -bin): %w\n%s", err, out)
		}
	}
	key := filepath.Join(dir, "k.key")
	if out, err := exec.Command(offload, "keygen", "-o", key).CombinedOutput(); err != nil {
		return false, fmt.Errorf("offload keygen: %w: %s", err, out)
	}

	var lns [3]net.Listener // sink, source, echo
	for i := range lns {
		l, err := listen()
		if err != nil {
			return false, err
		}
		defer l.Close()
		lns[i] = l
	}
	go sink(lns[0])
	go source(lns[1])
	go echo(lns[2])
	saddr, err := freeAddr()
	if err != nil {
		return false, err
	}
	var fw [3]string // the client's forwards to sink, source, echo
	for i := range fw {
		if fw[i], err = freeAddr(); err != nil {
			return false, err
		}
	}
	mln, err := listen()
	if err != nil {
		return false, err
	}
	defer mln.Close()
	m := &mitm{ln: mln, upstream: saddr, mode: *mode, dir: tamperDir, at: *atFrame, rng: rand.New(rand.NewPCG(*seed, 99))}
	go m.run()

	extra := strings.ReplaceAll(strings.ReplaceAll(*extraCfg, `\n`, "\n"), "~", " ")
	if err := os.WriteFile(filepath.Join(dir, "server.yaml"), fmt.Appendf(nil, "listen: %s\nkey_file: k.key\nservices:\n  sink: %s\n  source: %s\n  echo: %s\nlog:\n  level: info\n%s\n",
		saddr, lns[0].Addr(), lns[1].Addr(), lns[2].Addr(), extra), 0o600); err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(dir, "client.yaml"), fmt.Appendf(nil, "server: %s\nkey_file: k.key\nforwards:\n  - listen: %s\n    service: sink\n  - listen: %s\n    service: source\n  - listen: %s\n    service: echo\nredial:\n  min: 50ms\n  max: 200ms\nlog:\n  level: info\n%s\n",
		mln.Addr(), fw[0], fw[1], fw[2], extra), 0o600); err != nil {
		return false, err
	}
	srv, err := start(offload, dir, "server")
	if err != nil {
		return false, err
	}
	defer srv.kill()
	time.Sleep(100 * time.Millisecond)
	cli, err := start(offload, dir, "client")
	if err != nil {
		return false, err
	}
	defer cli.kill()
	if !waitLink(fw[2]) {
		return false, fmt.Errorf("the link never came up (logs: -keep)")
	}
	mu.Lock()
	clear(res.TargetEnds) // the probes' ends
	mu.Unlock()

	drive(rng, fw)

	mu.Lock()
	res.Tampered = m.tampered.Load()
	mu.Unlock()
	for _, p := range []*proc{cli, srv} {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			fmt.Fprintf(os.Stderr, "mitm: %s: %v\n", p.name, err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	var errs []error
	for _, c := range []struct {
		name  string
		lines *int
		first *string
	}{{"server", &res.ServerFailLines, &res.ServerLog}, {"client", &res.ClientFailLines, &res.ClientLog}} {
		b, err := os.ReadFile(filepath.Join(dir, c.name+".log"))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "link failed") {
				*c.lines++
				if *c.first == "" {
					*c.first = l
				}
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if res.Tampered && *mode != "cutclean" && *mode != "halfcut" && *mode != "blackhole" && res.ServerFailLines+res.ClientFailLines == 0 {
		violate("tampering (%s) not logged as a link failure", *mode)
	}
	if *mode != "none" && !res.Tampered {
		violate("did not get to tamper (frames %v, epochs %v)", res.Frames, res.Epochs)
	}
	mu.Lock()
	out, err := json.Marshal(res)
	mu.Unlock()
	if err != nil {
		return false, err
	}
	fmt.Println(string(out))
	if len(res.Violations) > 0 && *keepLogs {
		fmt.Println("logs in", dir)
	}
	return len(res.Violations) > 0, nil
}

// proc is a running offload process, its output in dir/NAME.log.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
}

func start(offload, dir, name string) (*proc, error) {
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(offload, name, "-c", filepath.Join(dir, name+".yaml"))
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("offload %s: %w", name, err)
	}
	return &proc{name, cmd, f}, nil
}

// kill ends the process if SIGTERM has not, and reaps it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill() // fails only if it has exited: fine
	_ = p.cmd.Wait()         // killed or terminated: its status says nothing here
	p.log.Close()
}

// waitLink waits up to 10 s for one byte to go through the echo forward.
func waitLink(fw string) bool {
	for dl := time.Now().Add(10 * time.Second); time.Now().Before(dl); time.Sleep(50 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", fw, time.Second)
		if err != nil {
			continue
		}
		err = c.SetDeadline(time.Now().Add(2 * time.Second))
		if err == nil {
			_, err = c.Write([]byte{7})
		}
		if err == nil {
			_, err = io.ReadFull(c, make([]byte, 1))
		}
		_ = c.(*net.TCPConn).SetLinger(0) // a reset, not a FIN: best effort
		c.Close()
		if err == nil {
			return true
		}
	}
	return false
}

// drive runs the application's streams through the client's forwards
// (sink, source, echo) until the bulk streams have ended and the
// interactive ones are closed.
func drive(rng *rand.Rand, fw [3]string) {
	var wg sync.WaitGroup
	stopInter := make(chan struct{})
	size := func() int64 { return int64(rng.IntN(*maxSize) + 1) }
	for i := range *uploads {
		id, total := uint64(1000+i), size()
		wg.Go(func() { upload(fw[0], id, total) })
	}
	for i := range *downs {
		id, total := uint64(2000+i), size()
		wg.Go(func() { download(fw[1], id, total) })
	}
	for i := range *inter {
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
		wg.Go(func() { interactive(fw[2], i, r, stopInter) })
	}
	doneBulk := make(chan struct{})
	go func() { wg.Wait(); close(doneBulk) }()
	time.Sleep(300 * time.Millisecond)
	for dl := time.Now().Add(60 * time.Second); time.Now().Before(dl); time.Sleep(50 * time.Millisecond) {
		// Stop the interactive streams once all bulk streams have ended.
		mu.Lock()
		bulkEnded := 0
		for k, v := range res.AppEnds {
			if strings.HasPrefix(k, "up-") || strings.HasPrefix(k, "down-") {
				bulkEnded += v
			}
		}
		mu.Unlock()
		if bulkEnded >= *uploads+*downs {
			break
		}
	}
	close(stopInter)
	mu.Lock()
	appClosedEcho = true
	mu.Unlock()
	select {
	case <-doneBulk:
	case <-time.After(30 * time.Second):
		violate("streams hung")
	}
	time.Sleep(500 * time.Millisecond)
}

// upload sends total bytes of pat for stream id, half-closes, and waits
// for the sink's ack.
func upload(fw string, id uint64, total int64) {
	c, err := net.Dial("tcp", fw)
	if err != nil {
		count(res.AppEnds, "up-dialfail")
		return
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		count(res.AppEnds, "up-"+endKind(err))
		return
	}
	if _, err := c.Write(header(id, total)); err != nil {
		count(res.AppEnds, "up-"+endKind(err))
		return
	}
	buf := make([]byte, 32<<10)
	for n := int64(0); n < total; {
		k := int(min(int64(len(buf)), total-n))
		for j := range k {
			buf[j] = pat(id, n+int64(j))
		}
		if _, err := c.Write(buf[:k]); err != nil {
			count(res.AppEnds, "up-write-"+endKind(err))
			return
		}
		n += int64(k)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		count(res.AppEnds, "up-write-"+endKind(err))
		return
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		count(res.AppEnds, "up-noack-"+endKind(err))
		return
	}
	count(res.AppEnds, "up-acked")
}

// download asks the source for total bytes of stream id and checks each.
func download(fw string, id uint64, total int64) {
	c, err := net.Dial("tcp", fw)
	if err != nil {
		count(res.AppEnds, "down-dialfail")
		return
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(60 * time.Second)); err != nil {
		count(res.AppEnds, "down-"+endKind(err))
		return
	}
	if _, err := c.Write(header(id, total)); err != nil {
		count(res.AppEnds, "down-"+endKind(err))
		return
	}
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := c.Read(buf)
		for j := range k {
			if buf[j] != pat(id, n+int64(j)) {
				violate("download %d: forged byte at %d", id, n+int64(j))
				return
			}
		}
		n += int64(k)
		if err != nil {
			kind := endKind(err)
			if kind == "eof" && n != total {
				violate("download %d: clean EOF after %d of %d bytes", id, n, total)
				kind = "eof-short"
			}
			count(res.AppEnds, "down-"+kind)
			return
		}
	}
}

// interactive types a line every 2 to 6 ms and checks its echo, until
// stop.
func interactive(fw string, i int, rng *rand.Rand, stop <-chan struct{}) {
	c, err := net.Dial("tcp", fw)
	if err != nil {
		count(res.AppEnds, "inter-dialfail")
		return
	}
	defer func() {
		_ = c.(*net.TCPConn).SetLinger(0) // end with a reset: best effort
		c.Close()
	}()
	for k := 0; ; k++ {
		select {
		case <-stop:
			count(res.AppEnds, "inter-survived")
			return
		default:
		}
		msg := fmt.Appendf(nil, "keystroke %d %d\n", i, k)
		if err := c.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
			count(res.AppEnds, "inter-"+endKind(err))
			return
		}
		if _, err := c.Write(msg); err != nil {
			count(res.AppEnds, "inter-write-"+endKind(err))
			return
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				violate("interactive %d: clean EOF from the tunnel", i)
			}
			count(res.AppEnds, "inter-"+endKind(err))
			return
		}
		if string(got) != string(msg) {
			violate("interactive %d: echo %q want %q", i, got, msg)
			return
		}
		time.Sleep(time.Duration(2+rng.IntN(5)) * time.Millisecond)
	}
}
