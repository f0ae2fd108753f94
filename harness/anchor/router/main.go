// Command router is the two-router anchor's hand inside each emulated
// router (harness/anchor -routers 2): harness/vm starts it as the guest's
// one step, it names the router's two network cards by their MAC addresses
// (lan, wan), gives lan its address, and then does what the host asks over
// one TCP connection on that address, so that every setup and every
// measurement is driven from the host, which alone sees both routers:
//
//	router serve -lan MAC=ADDR/PREFIX -wan MAC -listen PORT
//	router relay [-zerocopy] -listen ADDR:PORT -target ADDR:PORT    (a bare relay hop)
//
// The control protocol is harness/internal/routerctl's. The stall watch
// writes a console line while the router's two cards together move under
// stallBytes in stallQuiet: malta's UART interrupt, through the same i8259
// as the virtio cards and the crypto device, releases a completion that
// waits there (docs/kernel-notes.md), and the host counts the kicks.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"syscall"
	"time"

	"github.com/offload-dev/offload/harness/internal/routerctl"
	"github.com/offload-dev/offload/harness/wgcompare"
)

// ip is where the host's scripts find iproute2's ip (linkIP).
const ip = "/usr/sbin/ip"

const (
	stallQuiet = 3 * time.Second
	stallBytes = 128 << 10
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: router serve|relay [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "relay":
		err = relay(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q (want serve or relay)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "router:", err)
		os.Exit(1)
	}
}

func relay(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to accept on")
	target := fs.String("target", "", "address to forward to")
	zc := fs.Bool("zerocopy", false, "send with MSG_ZEROCOPY (SO_ZEROCOPY, notifications on the error queue) and log each direction's counts")
	seal := fs.String("seal", "", "seal the hop to the target (target) or from the listener (listen) as offload's record layer does (wgcompare.SealedRelay)")
	eng := fs.String("engine", "software", "with -seal: the engine spec, as in a config")
	suite := fs.String("suite", "aes-256-cbc-poly1305", "with -seal: the suite")
	full := fs.Bool("full", false, "with -seal: full 64 KiB frames, each side woken only for a whole one (SO_RCVLOWAT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	var d net.Dialer
	switch *seal {
	case "":
	case "target", "listen":
		return wgcompare.SealedRelay(l, *target, d.DialContext, *seal == "target", wgcompare.SealOptions{Spec: *eng, Suite: *suite, Full: *full,
			Report: func(st wgcompare.SealStats, err error) {
				fmt.Fprintf(os.Stderr, "%s: %v, error %v\n", *target, st, err)
			}})
	default:
		return fmt.Errorf("-seal %q: want target or listen", *seal)
	}
	if *zc {
		return wgcompare.RelayZeroCopy(l, *target, d.DialContext, func(st wgcompare.ZeroCopyStats, err error) {
			fmt.Fprintf(os.Stderr, "to %s: %d sends, %d copied by the kernel, %d waits for a buffer, read outside the poller %v, error %v\n",
				*target, st.Sends, st.Copied, st.Waits, st.Polled, err)
		})
	}
	return wgcompare.Relay(l, *target, d.DialContext)
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	lan := fs.String("lan", "", "MAC=ADDR/PREFIX of the LAN card")
	wan := fs.String("wan", "", "MAC of the WAN card")
	port := fs.Int("listen", 7070, "control port on the LAN address")
	level := fs.Bool("level-irqs", true, "make the virtio devices' i8259 lines level-triggered (ELCR) before anything runs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	mac, cidr, ok := strings.Cut(*lan, "=")
	if !ok || *wan == "" {
		return errors.New("want -lan MAC=ADDR/PREFIX and -wan MAC")
	}
	if err := linkIP(); err != nil {
		return err
	}
	if *level {
		b, err := os.ReadFile("/proc/interrupts")
		if err != nil {
			return err
		}
		if err := setLevel(virtioPICLines(string(b))); err != nil {
			return err
		}
	}
	for _, c := range []struct{ mac, name string }{{mac, "lan"}, {*wan, "wan"}} {
		dev, err := byMAC(c.mac)
		if err != nil {
			return err
		}
		if dev != c.name {
			if err := sh(ip + " link set dev " + dev + " name " + c.name); err != nil {
				return err
			}
		}
		if err := sh(ip + " link set dev " + c.name + " up"); err != nil {
			return err
		}
	}
	if err := sh(ip + " addr add " + cidr + " dev lan"); err != nil {
		return err
	}
	addr, _, _ := strings.Cut(cidr, "/")
	l, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	fmt.Printf("router: lan %s (%s), wan %s; control on %s\n", cidr, mac, *wan, l.Addr())
	a := &agent{procs: map[string]*proc{}}
	defer a.stopAll()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		quit, err := a.session(c)
		if err != nil {
			fmt.Println("router: control session:", err)
		}
		if quit {
			if err := lingerClose(c, quitLinger); err != nil {
				fmt.Println("router: after quit:", err)
			}
			return nil
		}
		c.Close()
	}
}

// quitLinger bounds the wait for the host to close the connection after
// the quit's answer.
const quitLinger = 10 * time.Second

// lingerClose half-closes c and waits (at most d) for the peer to close
// its side before closing: the guest powers off as soon as this command
// exits, which can drop an answer still in its socket (the host of run a4
// of 2026-12-07 never got one); the peer closes once it has read it.
func lingerClose(c net.Conn, d time.Duration) error {
	defer c.Close()
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			return err
		}
	}
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, c); err != nil {
		return fmt.Errorf("the host did not close within %v: %w", d, err)
	}
	return nil
}

// linkIP makes iproute2's ip (harness/vm -deb iproute2 puts Debian's
// /bin/ip in the guest, beside busybox's applet links) answer at ip, the
// one name the host's scripts use.
func linkIP() error {
	if _, err := os.Stat(ip); err == nil {
		return nil
	}
	for _, p := range []string{"/bin/ip", "/sbin/ip", "/usr/bin/ip"} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			if err := os.MkdirAll(filepath.Dir(ip), 0o755); err != nil {
				return err
			}
			return os.Symlink(p, ip)
		}
	}
	return errors.New("no iproute2 ip in the guest (busybox's has no xfrm): give harness/vm -deb iproute2")
}

// virtioPICLines are the i8259 (XT-PIC) lines the virtio devices use, as
// /proc/interrupts lists them: on malta the two network cards share one.
func virtioPICLines(interrupts string) []int {
	var irqs []int
	for _, l := range strings.Split(interrupts, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.Contains(l, "XT-PIC") || !strings.Contains(l, "virtio") {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSuffix(f[0], ":")); err == nil && n < 16 {
			irqs = append(irqs, n)
		}
	}
	return irqs
}

// setLevel marks i8259 lines level-triggered in the PIIX4's ELCR (I/O ports
// 0x4d0 for lines 0-7, 0x4d1 for 8-15). Malta's firmware leaves every line
// edge-triggered, but a PCI device's interrupt is a level: on an edge line
// an interrupt raised while the line is still high (a second device on it,
// or a completion racing the handler's acknowledgement) makes no edge and
// is lost until some other interrupt comes; the two routers' network cards
// stalled for good so. Linux's i8259 handler masks, acknowledges and
// unmasks, which is right for level lines too.
func setLevel(irqs []int) error {
	if len(irqs) == 0 {
		return nil
	}
	f, err := os.OpenFile("/dev/port", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("ELCR: %w", err)
	}
	defer f.Close()
	var elcr [2]byte
	if _, err := f.ReadAt(elcr[:], 0x4d0); err != nil {
		return fmt.Errorf("ELCR: %w", err)
	}
	was := elcr
	for _, n := range irqs {
		elcr[n/8] |= 1 << (n % 8)
	}
	if _, err := f.WriteAt(elcr[:], 0x4d0); err != nil {
		return fmt.Errorf("ELCR: %w", err)
	}
	fmt.Printf("router: i8259 lines %v level-triggered (ELCR %#04x %#04x, was %#04x %#04x)\n", irqs, elcr[0], elcr[1], was[0], was[1])
	return nil
}

// byMAC names the network card with that address.
func byMAC(mac string) (string, error) {
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", e.Name(), "address"))
		if err == nil && strings.EqualFold(strings.TrimSpace(string(b)), mac) {
			return e.Name(), nil
		}
	}
	return "", fmt.Errorf("no network card with address %s (is virtio_net loaded?)", mac)
}

func sh(cmd string) error {
	out, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", cmd, err, out)
	}
	return nil
}

type (
	request = routerctl.Request
	answer  = routerctl.Answer
)

type proc struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

type agent struct {
	procs map[string]*proc
	boot  time.Time // the monotonic clock's origin for mono_ns
	watch func() int
}

// session serves one control connection; quit says the host asked to end.
func (a *agent) session(c net.Conn) (bool, error) {
	if a.boot.IsZero() {
		a.boot = time.Now()
	}
	r := bufio.NewReaderSize(c, 1<<20)
	enc := json.NewEncoder(c)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return false, err
		}
		var req request
		var ans answer
		if err := json.Unmarshal(line, &req); err != nil {
			ans.Err = "bad request: " + err.Error()
		} else {
			ans = a.do(req)
		}
		if err := enc.Encode(ans); err != nil {
			return false, err
		}
		if req.Op == "quit" {
			return true, nil
		}
	}
}

func (a *agent) do(req request) answer {
	fail := func(err error) answer { return answer{Err: err.Error()} }
	switch req.Op {
	case "sh":
		out, err := exec.Command("/bin/sh", "-c", req.Cmd).CombinedOutput()
		if err != nil {
			return answer{Err: fmt.Sprintf("%s: %v", req.Cmd, err), Out: string(out)}
		}
		return answer{OK: true, Out: string(out)}
	case "start":
		if _, ok := a.procs[req.ID]; ok || len(req.Argv) == 0 {
			return fail(fmt.Errorf("start %q: already running, or no argv", req.ID))
		}
		cmd := exec.Command(req.Argv[0], req.Argv[1:]...)
		cmd.Env = append(os.Environ(), req.Env...)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		p := &proc{cmd: cmd, out: out, done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait() }()
		a.procs[req.ID] = p
		return answer{OK: true}
	case "stop":
		p := a.procs[req.ID]
		if p == nil {
			return fail(fmt.Errorf("stop %q: not running", req.ID))
		}
		delete(a.procs, req.ID)
		err := p.stop()
		if err != nil {
			return answer{Err: fmt.Sprintf("%s: %v", req.ID, err), Out: p.out.String()}
		}
		return answer{OK: true, Out: p.out.String()}
	case "write":
		if err := os.MkdirAll(filepath.Dir(req.Path), 0o755); err != nil {
			return fail(err)
		}
		if err := os.WriteFile(req.Path, req.Data, 0o600); err != nil {
			return fail(err)
		}
		return answer{OK: true}
	case "read":
		b, err := os.ReadFile(req.Path)
		if err != nil {
			return fail(err)
		}
		return answer{OK: true, Data: b}
	case "clock":
		now := time.Since(a.boot)
		if req.Watch && a.watch == nil {
			a.watch = watchStalls()
		}
		return answer{OK: true, MonoNS: int64(now)}
	case "unwatch":
		kicks := 0
		if a.watch != nil {
			kicks = a.watch()
			a.watch = nil
		}
		return answer{OK: true, Kicks: kicks}
	case "quit":
		a.stopAll()
		return answer{OK: true}
	}
	return fail(fmt.Errorf("unknown op %q", req.Op))
}

// stop ends a background process with SIGTERM (a kill after 10 s); an
// exit by SIGTERM or with status 0 is a clean stop, anything else, or an
// earlier exit, is the process's own failure.
func (p *proc) stop() error {
	select {
	case err := <-p.done:
		return fmt.Errorf("had exited before the stop: %v", err)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		var exit *exec.ExitError
		if err == nil || errors.As(err, &exit) && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM {
			return nil
		}
		return err
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("did not stop on SIGTERM within 10s: killed")
	}
}

func (a *agent) stopAll() {
	for id, p := range a.procs {
		_ = p.stop()
		delete(a.procs, id)
	}
	if a.watch != nil {
		a.watch()
		a.watch = nil
	}
}

// watchStalls samples the two cards' received bytes every 200 ms and
// writes a console line while they have moved under stallBytes for
// stallQuiet; the returned func stops it and gives the lines written.
func watchStalls() func() int {
	read := func() int64 {
		var sum int64
		for _, dev := range []string{"lan", "wan"} {
			b, _ := os.ReadFile("/sys/class/net/" + dev + "/statistics/rx_bytes")
			v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			sum += v
		}
		return sum
	}
	ctx, cancel := context.WithCancel(context.Background())
	kicks := make(chan int, 1)
	go func() {
		n, last, moved := 0, read(), time.Now()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				kicks <- n
				return
			case now := <-tick.C:
				if v := read(); v-last >= stallBytes {
					last, moved = v, now
				} else if now.Sub(moved) >= stallQuiet {
					_, _ = os.Stdout.WriteString("kick\n")
					n++
				}
			}
		}
	}()
	return func() int { cancel(); return <-kicks }
}

// syncBuffer is a process's output, written by its pipes' copiers and
// read by stop; it keeps the last 64 KiB.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Write(p)
	if s.b.Len() > 64<<10 {
		s.b.Next(s.b.Len() - 64<<10)
	}
	return len(p), nil
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
