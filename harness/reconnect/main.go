// Command reconnect measures how soon an offload client serves again after
// its server was killed and restarted (issue 26; docs/tunnel.md,
// "Reconnect after an outage"). It runs a server and a client of the
// binary -bin on loopback, with an echo service, and a load of one short
// echo connection every -every through the client's forward. For each
// outage of -outages it lets the link serve for -up, kills the server
// (SIGKILL: its links drop with no GoAway), waits the outage, starts it
// again, and reports:
//
//	outage   the time the server was away
//	back     from the restart to the server's "listening" log line
//	served   from "listening" to the first echo that completed after it
//	reset    connections that failed (reset or refused) from the kill to
//	         that first served echo, of all that ended in that span
//
// Run it from the repository root (it builds the binary unless -bin):
//
//	go run ./harness/reconnect                       # outages 3s,20s
//	go run ./harness/reconnect -bin /tmp/old-offload # another build, same load
//
// Only loopback addresses; every file goes to a temporary directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

func main() {
	bin := flag.String("bin", "", "the offload binary (default: go build ./cmd/offload)")
	outages := flag.String("outages", "3s,20s", "outage lengths, comma separated")
	up := flag.Duration("up", 6500*time.Millisecond, "how long the link serves before each kill")
	every := flag.Duration("every", 50*time.Millisecond, "a new echo connection this often")
	flag.Parse()
	if err := run(*bin, *outages, *up, *every); err != nil {
		fmt.Fprintln(os.Stderr, "reconnect:", err)
		os.Exit(1)
	}
}

func run(bin, outages string, up, every time.Duration) error {
	dir, err := os.MkdirTemp("", "offload-reconnect-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "offload")
		if out, err := exec.Command("go", "build", "-o", bin, "./cmd/offload").CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %w\n%s", err, out)
		}
	}
	key := filepath.Join(dir, "offload.key")
	if out, err := exec.Command(bin, "keygen", "-o", key).CombinedOutput(); err != nil {
		return fmt.Errorf("keygen: %w\n%s", err, out)
	}
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go testutil.Echo(c)
		}
	}()
	srvAddr, err := testutil.FreeAddr("127.0.0.1")
	if err != nil {
		return err
	}
	fwdAddr, err := testutil.FreeAddr("127.0.0.1")
	if err != nil {
		return err
	}
	srvConf, cliConf := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	if err := os.WriteFile(srvConf, []byte(fmt.Sprintf("listen: %s\nkey_file: %s\nengine: software\nservices:\n  echo: %s\n", srvAddr, key, echo.Addr())), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(cliConf, []byte(fmt.Sprintf("server: %s\nkey_file: %s\nengine: software\nforwards:\n  - listen: %s\n    service: echo\n", srvAddr, key, fwdAddr)), 0o600); err != nil {
		return err
	}
	// The ends' control sockets go to the run's directory, so that the
	// server killed leaves none in root's /var/run/offload.
	end := func(role, conf string) *exec.Cmd {
		cmd := exec.Command(bin, role, "-c", conf)
		cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+dir)
		return cmd
	}
	startServer := func() (*testutil.Proc, time.Time, error) {
		p, err := testutil.Start("server", end("server", srvConf), 1<<20)
		if err != nil {
			return nil, time.Time{}, err
		}
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if strings.Contains(p.Out.String(), "listening") {
				return p, time.Now(), nil
			}
			select {
			case <-p.Done():
				return nil, time.Time{}, fmt.Errorf("server exited: %v\n%s", p.Err(), p.Out)
			default:
			}
		}
		p.Kill()
		return nil, time.Time{}, fmt.Errorf("server did not listen within a minute:\n%s", p.Out)
	}
	srv, _, err := startServer()
	if err != nil {
		return err
	}
	defer func() { srv.Kill() }()
	cli, err := testutil.Start("client", end("client", cliConf), 1<<20)
	if err != nil {
		return err
	}
	defer cli.Stop(30 * time.Second)

	ld := &load{addr: fwdAddr}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); ld.run(ctx, every) }()
	defer func() { stop(); wg.Wait() }()

	fmt.Printf("%-8s %-8s %-8s %s\n", "outage", "back", "served", "reset")
	for _, f := range strings.Split(outages, ",") {
		outage, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-outages: %w", err)
		}
		if !ld.servedSince(time.Now(), time.Minute) {
			return fmt.Errorf("the link does not serve:\nclient:\n%s\nserver:\n%s", cli.Out, srv.Out)
		}
		time.Sleep(up)
		killed := time.Now()
		srv.Kill()
		time.Sleep(outage)
		restart := time.Now()
		if srv, _, err = startServer(); err != nil {
			return err
		}
		back := time.Now() // the "listening" line was seen (within 1 ms)
		if !ld.servedSince(back, 2*time.Minute) {
			return fmt.Errorf("no connection served within 2m of the server's return:\nclient:\n%s", cli.Out)
		}
		served := ld.firstServed(back)
		failed, total := ld.failedBetween(killed, served)
		fmt.Printf("%-8v %-8v %-8v %d of %d\n", outage, back.Sub(restart).Round(time.Millisecond),
			served.Sub(back).Round(time.Millisecond), failed, total)
	}
	return nil
}

// load opens an echo connection through the forward every tick and keeps
// when each ended and whether it echoed.
type load struct {
	addr string
	mu   sync.Mutex
	ends []result
}

type result struct {
	end time.Time
	ok  bool
}

func (l *load) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := testutil.EchoRoundTripWithin(l.addr, 4, 1, 30*time.Second) == nil
			l.mu.Lock()
			l.ends = append(l.ends, result{time.Now(), ok})
			l.mu.Unlock()
		}()
	}
}

// firstServed is when the first echo that completed after t completed
// (zero if none).
func (l *load) firstServed(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, r := range l.ends {
		if r.ok && r.end.After(t) && (first.IsZero() || r.end.Before(first)) {
			first = r.end
		}
	}
	return first
}

// servedSince waits up to d for an echo completed after t.
func (l *load) servedSince(t time.Time, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if !l.firstServed(t).IsZero() {
			return true
		}
	}
	return false
}

// failedBetween counts the connections that ended in [a, b] and those of
// them that failed.
func (l *load) failedBetween(a, b time.Time) (failed, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.ends {
		if r.end.Before(a) || r.end.After(b) {
			continue
		}
		total++
		if !r.ok {
			failed++
		}
	}
	return failed, total
}
