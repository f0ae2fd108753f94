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
//	go run ./harness/resume -veth                    # root: the path is a veth taken down
//
// With -veth (root) the server runs in a network namespace of its own
// (offload-resume, 10.77.0.2) behind a veth pair, and an outage takes the
// host's end down: nothing is reset, the path just goes silent (TCP rides
// out a short outage by itself; a link silent for keepalive + 10 s is
// given up and the session resumed).
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
	veth := flag.Bool("veth", false, "the path is a veth pair to a network namespace, taken down (root)")
	flag.Parse()
	if err := run(*bin, *outages, *streams, *veth); err != nil {
		fmt.Fprintln(os.Stderr, "resume:", err)
		os.Exit(1)
	}
}

func run(bin, outages string, streams int, veth bool) error {
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
	srvAddr, echoAt := "", "127.0.0.1:0"
	var px outage
	if veth {
		v, err := newVeth()
		if err != nil {
			return err
		}
		defer v.close()
		px, srvAddr, echoAt = v, vethServer+":7100", vethHost+":0"
	}
	echo, err := net.Listen("tcp", echoAt)
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
	if srvAddr == "" {
		if srvAddr, err = testutil.FreeAddr("127.0.0.1"); err != nil {
			return err
		}
	}
	fwdAddr, err := testutil.FreeAddr("127.0.0.1")
	if err != nil {
		return err
	}
	dialAt := srvAddr
	if px == nil {
		p, err := newPath(srvAddr)
		if err != nil {
			return err
		}
		defer p.close()
		px, dialAt = p, p.addr()
	}
	common := fmt.Sprintf("key_file: %s\nengine: software\nresume_window: 1m\nmax_streams: %d\n", key, 2*streams)
	srvConf, cliConf := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	if err := os.WriteFile(srvConf, []byte(fmt.Sprintf("listen: %s\n%sservices:\n  echo: %s\n", srvAddr, common, echo.Addr())), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(cliConf, []byte(fmt.Sprintf("server: %s\n%sforwards:\n  - listen: %s\n    service: echo\n", dialAt, common, fwdAddr)), 0o600); err != nil {
		return err
	}
	end := func(role, conf string) *exec.Cmd {
		cmd := exec.Command(bin, role, "-c", conf)
		if veth && role == "server" {
			cmd = exec.Command("ip", "netns", "exec", vethNS, bin, role, "-c", conf)
		}
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
		if err := px.down(); err != nil {
			return err
		}
		var rssS, rssC int
		for until := time.Now().Add(outage); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
			rssS, rssC = max(rssS, rss(srv.Cmd.Process.Pid)), max(rssC, rss(cli.Cmd.Process.Pid))
		}
		back := time.Now()
		if err := px.up(); err != nil {
			return err
		}
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

// outage takes the path down and brings it back.
type outage interface {
	down() error
	up() error
}

// The -veth network: the host's end and the server's namespace.
const (
	vethNS     = "offload-resume"
	vethHost   = "10.77.0.1"
	vethServer = "10.77.0.2"
)

// vethPath is a veth pair to the namespace vethNS.
type vethPath struct{}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func newVeth() (*vethPath, error) {
	for _, a := range [][]string{
		{"netns", "add", vethNS},
		{"link", "add", "orv0", "type", "veth", "peer", "name", "orv1"},
		{"link", "set", "orv1", "netns", vethNS},
		{"addr", "add", vethHost + "/24", "dev", "orv0"},
		{"link", "set", "orv0", "up"},
		{"-n", vethNS, "addr", "add", vethServer + "/24", "dev", "orv1"},
		{"-n", vethNS, "link", "set", "orv1", "up"},
		{"-n", vethNS, "link", "set", "lo", "up"},
	} {
		if err := ip(a...); err != nil {
			(&vethPath{}).close()
			return nil, err
		}
	}
	return &vethPath{}, nil
}

func (*vethPath) down() error { return ip("link", "set", "orv0", "down") }
func (*vethPath) up() error   { return ip("link", "set", "orv0", "up") }

func (*vethPath) close() {
	_ = ip("link", "del", "orv0")
	_ = ip("netns", "del", vethNS)
}

// down cuts every connection and refuses new ones.
func (p *path) down() error { p.setDown(true); p.cut(); return nil }
func (p *path) up() error   { p.setDown(false); return nil }

// path is the WAN between client and server: it carries connections to
// target, and can cut them all and refuse new ones.
type path struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	closed bool // refusing new connections
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
	p.closed = down
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
		down := p.closed
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
