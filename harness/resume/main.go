// Command resume measures sessions that outlive links (issue 30;
// docs/protocol.md section 4) with the built binary: a server and a
// client of -bin on loopback, both with resume_window, an echo service,
// and between them a proxy that stands for the WAN path. It opens -streams
// echo connections through the client's forward (each echoes once), then
// for each outage of -outages: cuts the path (resets both sides, as a
// dead modem or a NAT that forgot the mapping) and refuses new
// connections for the outage, sampling both ends' RSS, then lets the path
// back and has every connection echo again. It reports:
//
//	outage     how long the path refused connections
//	rss        the most VmRSS of server and client during the outage
//	first      from the path's return to the first connection's echo
//	all        from the path's return to the last connection's echo
//	reset      connections that failed (the applications saw the link go)
//
// Run it from the repository root (it builds the binary unless -bin):
//
//	go run ./harness/resume                          # 1,000 streams; outages 3s,10s,30s
//
// Only loopback addresses; every file goes to a temporary directory.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

func main() {
	bin := flag.String("bin", "", "the offload binary (default: go build ./cmd/offload)")
	outages := flag.String("outages", "3s,10s,30s", "outage lengths, comma separated")
	streams := flag.Int("streams", 1000, "echo connections open across the outages")
	flag.Parse()
	if err := run(*bin, *outages, *streams); err != nil {
		fmt.Fprintln(os.Stderr, "resume:", err)
		os.Exit(1)
	}
}

func run(bin, outages string, streams int) error {
	dir, err := os.MkdirTemp("", "offload-resume-")
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
	px, err := newPath(srvAddr)
	if err != nil {
		return err
	}
	defer px.close()
	common := fmt.Sprintf("key_file: %s\nengine: software\nresume_window: 1m\nmax_streams: %d\n", key, 2*streams)
	srvConf, cliConf := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	if err := os.WriteFile(srvConf, []byte(fmt.Sprintf("listen: %s\n%sservices:\n  echo: %s\n", srvAddr, common, echo.Addr())), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(cliConf, []byte(fmt.Sprintf("server: %s\n%sforwards:\n  - listen: %s\n    service: echo\n", px.addr(), common, fwdAddr)), 0o600); err != nil {
		return err
	}
	end := func(role, conf string) *exec.Cmd {
		cmd := exec.Command(bin, role, "-c", conf)
		cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+dir)
		return cmd
	}
	srv, err := testutil.Start("server", end("server", srvConf), 1<<20)
	if err != nil {
		return err
	}
	defer srv.Stop(30 * time.Second)
	cli, err := testutil.Start("client", end("client", cliConf), 1<<20)
	if err != nil {
		return err
	}
	defer cli.Stop(30 * time.Second)

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for deadline := time.Now().Add(time.Minute); len(conns) < streams; {
		c, err := net.Dial("tcp", fwdAddr)
		if err == nil {
			err = roundTrip(c)
		}
		if err != nil {
			if c != nil {
				_ = c.Close()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("stream %d: %w\nclient:\n%s", len(conns), err, cli.Out)
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		conns = append(conns, c)
	}
	fmt.Printf("%d streams open\n%-8s %-22s %-8s %-8s %s\n", streams, "outage", "rss server/client MiB", "first", "all", "reset")
	for _, f := range strings.Split(outages, ",") {
		outage, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-outages: %w", err)
		}
		px.setDown(true)
		px.cut()
		var rssS, rssC int
		for until := time.Now().Add(outage); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
			rssS, rssC = max(rssS, rss(srv.Cmd.Process.Pid)), max(rssC, rss(cli.Cmd.Process.Pid))
		}
		back := time.Now()
		px.setDown(false)
		var mu sync.Mutex
		var first, last time.Time
		failed := 0
		var wg sync.WaitGroup
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
				err := roundTrip(c)
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed++
					return
				}
				if first.IsZero() || now.Before(first) {
					first = now
				}
				if now.After(last) {
					last = now
				}
			}()
		}
		wg.Wait()
		fmt.Printf("%-8v %-22s %-8v %-8v %d of %d\n", outage, fmt.Sprintf("%.1f / %.1f", float64(rssS)/1024, float64(rssC)/1024),
			first.Sub(back).Round(time.Millisecond), last.Sub(back).Round(time.Millisecond), failed, len(conns))
		if failed > 0 {
			return fmt.Errorf("%d connections failed\nclient:\n%s\nserver:\n%s", failed, cli.Out, srv.Out)
		}
	}
	return nil
}

// roundTrip writes 8 bytes and reads them back.
func roundTrip(c net.Conn) error {
	msg := []byte("offload!")
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// rss is a process's VmRSS in KiB (0 if unknown).
func rss(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// path is the WAN between client and server: it carries connections to
// target, and can cut them all and refuse new ones.
type path struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
}

func newPath(target string) (*path, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &path{ln: ln, target: target}
	go p.run()
	return p, nil
}

func (p *path) addr() string { return p.ln.Addr().String() }

func (p *path) close() { _ = p.ln.Close(); p.cut() }

func (p *path) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
}

// cut resets every connection.
func (p *path) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if t, ok := c.(*net.TCPConn); ok {
			_ = t.SetLinger(0)
		}
		_ = c.Close()
	}
	p.conns = nil
}

func (p *path) run() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}
