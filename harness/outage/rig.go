package main

// The rig: two network namespaces joined by a veth pair, offload's server
// and its targets in one, offload's client and the applications in the
// other.
//
//	server ns (oo<pid>s)                         client ns (oo<pid>c)
//	  echo   127.0.0.1:9001 ┐                      ┌ 127.0.0.1:8080 echo streams
//	  sink   127.0.0.1:9002 ├ offload server       │ 127.0.0.1:8081 upload
//	  source 127.0.0.1:9003 ┘ 10.79.0.1:7000 ─veth─┤ 127.0.0.1:8082 download
//	                                   vs        vc└ offload client 10.79.0.2 (roams to .3)
//
// The targets and the applications run in this process (testutil.ListenIn,
// testutil.DialIn), offload's ends as processes of the binary under test
// (ip netns exec). Addresses exist only inside the two namespaces.
//
// With -proxy (no root) everything is on loopback in this namespace, on
// free ports, and the client reaches the server through a proxy
// (proxy.go) that the outages and cuts reset.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/measure/bench"
)

const (
	serverIP   = "10.79.0.1"
	clientIP   = "10.79.0.2"
	roamIP     = "10.79.0.3" // where the client comes back from in the roam run
	tunnelPort = "7000"
	echoFwd    = "127.0.0.1:8080"
	sinkFwd    = "127.0.0.1:8081"
	sourceFwd  = "127.0.0.1:8082"
	echoAddr   = "127.0.0.1:9001"
	sinkAddr   = "127.0.0.1:9002"
	sourceAddr = "127.0.0.1:9003"
	nsPrefix   = "oo" // oo<pid>s, oo<pid>c: the pid says whose they are
)

type rig struct {
	dir      string
	bin      string
	ns       [2]string // server's, client's ("" with -proxy)
	px       *proxy    // the path with -proxy, else nil
	srv, cli *testutil.Proc
	srvConf  string
	srvRun   string // the server's RUNTIME_DIRECTORY (its control socket)
	lns      []net.Listener
	sunk     atomic.Int64 // bytes the sink has read, all streams
	srcBytes atomic.Int64 // what the source sends each stream
	srcSeed  atomic.Uint64
	clientAt string // the client's address now
	// dial and fwd are how the applications reach the targets: from the
	// client's namespace through the client's forwards (echo, sink,
	// source).
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	fwd  [3]string
}

func ipRun(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// removeStale deletes the namespaces of an earlier run of this harness
// whose process is gone (one killed before it could clean up).
func removeStale() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.HasPrefix(name, nsPrefix) || len(name) < len(nsPrefix)+2 {
			continue
		}
		pid, err := strconv.Atoi(name[len(nsPrefix) : len(name)-1])
		if err != nil {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			_ = ipRun("netns", "del", name)
		}
	}
}

// newRig makes the namespaces and the veth, starts the targets, the
// server and the client, and waits until an echo crosses the tunnel. On
// error what it made is taken down again.
func newRig(ctx context.Context, bin, dir string, o options, extra string) (_ *rig, err error) {
	r := &rig{dir: dir, bin: bin}
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	listen, server := serverIP+":"+tunnelPort, serverIP+":"+tunnelPort
	if o.proxy {
		server, err = r.loopback()
		listen = r.px.target
	} else {
		err = r.namespaces(o.rate)
	}
	if err != nil {
		return nil, err
	}
	r.serveTargets()

	key := filepath.Join(dir, "offload.key")
	if out, err := exec.Command(bin, "keygen", "-o", key).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("keygen: %w\n%s", err, out)
	}
	// Both ends' defaults (keepalive, redial, resume_window: what a user
	// gets), with room for the streams; -set adds lines to both.
	common := fmt.Sprintf("key_file: %s\nengine: software\nmax_streams: %d\nlog:\n  level: info\n%s", key, o.maxStreams, extra)
	r.srvConf = filepath.Join(dir, "server.yaml")
	cliConf := filepath.Join(dir, "client.yaml")
	if err := os.WriteFile(r.srvConf, []byte(fmt.Sprintf("listen: %s\nservices:\n  echo: %s\n  sink: %s\n  source: %s\n%s",
		listen, r.lns[0].Addr(), r.lns[1].Addr(), r.lns[2].Addr(), common)), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(cliConf, []byte(fmt.Sprintf("server: %s\nforwards:\n  - listen: %s\n    service: echo\n  - listen: %s\n    service: sink\n  - listen: %s\n    service: source\n%s",
		server, r.fwd[0], r.fwd[1], r.fwd[2], common)), 0o600); err != nil {
		return nil, err
	}
	r.srvRun = filepath.Join(dir, "server-run")
	if r.srv, err = r.start("server", r.ns[0], r.srvConf, r.srvRun); err != nil {
		return nil, err
	}
	if r.cli, err = r.start("client", r.ns[1], cliConf, filepath.Join(dir, "client-run")); err != nil {
		return nil, err
	}
	up, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := r.probe(up); err != nil {
		return nil, fmt.Errorf("the tunnel does not serve: %w\nserver:\n%s\nclient:\n%s", err, r.srv.Out, r.cli.Out)
	}
	return r, nil
}

// loopback is -proxy's network: the targets and the forwards on free
// loopback ports, the server's too, and the proxy to it; it returns the
// proxy's address, the one the client dials.
func (r *rig) loopback() (string, error) {
	var d net.Dialer
	r.dial = d.DialContext
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		r.lns = append(r.lns, l)
	}
	for i := range r.fwd {
		var err error
		if r.fwd[i], err = testutil.FreeAddr("127.0.0.1"); err != nil {
			return "", err
		}
	}
	listen, err := testutil.FreeAddr("127.0.0.1")
	if err != nil {
		return "", err
	}
	if r.px, err = newProxy(listen); err != nil {
		return "", err
	}
	return r.px.addr(), nil
}

// namespaces makes the two namespaces, the veth between them at rate,
// and the targets' listeners in the server's.
func (r *rig) namespaces(rate string) error {
	removeStale()
	id := strconv.Itoa(os.Getpid())
	r.ns = [2]string{nsPrefix + id + "s", nsPrefix + id + "c"}
	r.clientAt, r.fwd = clientIP, [3]string{echoFwd, sinkFwd, sourceFwd}
	for _, n := range r.ns {
		if err := ipRun("netns", "add", n); err != nil {
			return err
		}
	}
	for _, l := range [][]string{
		{"-n", r.ns[0], "link", "add", "vs", "type", "veth", "peer", "name", "vc", "netns", r.ns[1]},
		{"-n", r.ns[0], "addr", "add", serverIP + "/24", "dev", "vs"},
		{"-n", r.ns[1], "addr", "add", clientIP + "/24", "dev", "vc"},
		{"-n", r.ns[0], "link", "set", "lo", "up"},
		{"-n", r.ns[1], "link", "set", "lo", "up"},
		{"-n", r.ns[0], "link", "set", "vs", "up"},
		{"-n", r.ns[1], "link", "set", "vc", "up"},
	} {
		if err := ipRun(l...); err != nil {
			return err
		}
	}
	// A WAN's rate (tbf, each way), so that the transfers last across
	// the disruptions as they would on a real uplink.
	if rate != "" {
		for i, dev := range []string{"vs", "vc"} {
			if out, err := exec.Command("tc", "-n", r.ns[i], "qdisc", "add", "dev", dev, "root", "tbf",
				"rate", rate, "burst", "64kb", "latency", "100ms").CombinedOutput(); err != nil {
				return fmt.Errorf("tc tbf rate %s on %s (sch_tbf): %w\n%s", rate, dev, err, out)
			}
		}
	}
	r.dial = testutil.DialIn("/run/netns/" + r.ns[1])
	for _, a := range []string{echoAddr, sinkAddr, sourceAddr} {
		l, err := testutil.ListenIn("/run/netns/"+r.ns[0], "tcp", a)
		if err != nil {
			return err
		}
		r.lns = append(r.lns, l)
	}
	return nil
}

// start runs one end in its namespace (in this one if ns is ""). ip netns
// exec execs the binary, so the process is offload itself (its pid is the
// one /proc reports on); it dies with this harness (Pdeathsig) if that is
// killed.
func (r *rig) start(role, ns, conf, run string) (*testutil.Proc, error) {
	if err := os.MkdirAll(run, 0o700); err != nil {
		return nil, err
	}
	if out, err := exec.Command(r.bin, "validate", "-c", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s config: %w\n%s", role, err, out)
	}
	cmd := exec.Command(r.bin, role, "-c", conf)
	if ns != "" {
		cmd = exec.Command("ip", "netns", "exec", ns, r.bin, role, "-c", conf)
	}
	cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+run)
	dieWithHarness(cmd)
	return testutil.Start(role, cmd, 4<<20)
}

// serveTargets serves r.lns (made in the server's namespace): the echo
// service, the bench sink (counting what it reads, for "bytes moving")
// and the source.
func (r *rig) serveTargets() {
	go accept(r.lns[0], func(c net.Conn) { testutil.Echo(c); c.Close() })
	go func() { _ = bench.ServeSink(context.Background(), countingListener{r.lns[1], &r.sunk}, nil) }()
	go accept(r.lns[2], func(c net.Conn) {
		defer c.Close()
		_, _ = copyN(c, testutil.Stream(r.srcSeed.Load()), r.srcBytes.Load(), nil)
	})
}

func accept(l net.Listener, h func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go h(c)
	}
}

// countingListener's connections add what they read to n.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.n}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	k, err := c.Conn.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// CloseWrite passes the sink's half-close on (bench's sink answers, then
// closes).
func (c countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// linkDown takes the client's end of the veth down (both ends lose
// carrier: no packet crosses) or up again; with -proxy, the proxy resets
// the link and refuses new ones, or carries them again.
func (r *rig) linkDown(down bool) error {
	if r.px != nil {
		r.px.setDown(down)
		return nil
	}
	state := "up"
	if down {
		state = "down"
	}
	return ipRun("-n", r.ns[1], "link", "set", "vc", state)
}

// roam moves the client's namespace to another address: the old one is
// gone at once, so the link's packets answered to it are dropped, and
// the next dial leaves from the new one.
func (r *rig) roam() error {
	if r.px != nil {
		return errors.New("roam: needs the namespaces (not -proxy)")
	}
	next := roamIP
	if r.clientAt == roamIP {
		next = clientIP
	}
	// Deleted first: deleting a primary address deletes the secondaries
	// of its subnet with it.
	if err := ipRun("-n", r.ns[1], "addr", "del", r.clientAt+"/24", "dev", "vc"); err != nil {
		return err
	}
	if err := ipRun("-n", r.ns[1], "addr", "add", next+"/24", "dev", "vc"); err != nil {
		return err
	}
	r.clientAt = next
	return nil
}

// cut destroys the link's TCP connection in the client's namespace (ss -K,
// the kernel's SOCK_DESTROY: the client's socket fails, the server gets
// a reset), as a NAT or a proxy in the path dropping it would; with
// -proxy, the proxy resets it. It fails unless a connection was there
// and is gone after.
func (r *rig) cut() error {
	if r.px != nil {
		if r.px.cut() == 0 {
			return errors.New("cut: no link to cut (the proxy carries no connection)")
		}
		return nil
	}
	filter := []string{"dst", serverIP, "dport", "=", tunnelPort}
	list := func() (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", r.ns[1], "ss", "-Htn", "state", "established"}, filter...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	before, err := list()
	if err != nil {
		return fmt.Errorf("ss: %w\n%s", err, before)
	}
	if before == "" {
		return fmt.Errorf("cut: no link to cut (no connection to %s:%s)", serverIP, tunnelPort)
	}
	if out, err := exec.Command("ip", append([]string{"netns", "exec", r.ns[1], "ss", "-K", "state", "established"}, filter...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("ss -K: %w\n%s", err, out)
	}
	after, _ := list()
	for _, l := range strings.Split(after, "\n") {
		if l != "" && strings.Contains(before, l) {
			return fmt.Errorf("cut: ss -K left the link (is CONFIG_INET_DIAG_DESTROY off in this kernel?):\n%s", after)
		}
	}
	return nil
}

// probe makes one fresh echo connection through the tunnel, retrying
// until one succeeds or ctx ends; it returns how many failed first.
func (r *rig) probe(ctx context.Context) (failed int, err error) {
	for i := 0; ; i++ {
		c, err := r.dial(ctx, "tcp", r.fwd[0])
		if err == nil {
			err = echoOnce(c, []byte(fmt.Sprintf("probe %d", i)), 10*time.Second)
			c.Close()
		}
		if err == nil {
			return failed, nil
		}
		failed++
		select {
		case <-ctx.Done():
			return failed, fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// status is the server's `offload status` now (its error if it fails).
func (r *rig) status() string {
	cmd := exec.Command(r.bin, "status", "-c", r.srvConf)
	cmd.Env = append(os.Environ(), "RUNTIME_DIRECTORY="+r.srvRun)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("offload status: %v: %s", err, out)
	}
	return string(out)
}

// close stops both ends and deletes the namespaces (and with them the
// veth); safe on a half-made rig.
func (r *rig) close() {
	for _, p := range []*testutil.Proc{r.cli, r.srv} {
		if p != nil {
			p.Stop(30 * time.Second)
		}
	}
	for _, l := range r.lns {
		l.Close()
	}
	if r.px != nil {
		r.px.close()
	}
	for _, n := range r.ns {
		if n != "" {
			_ = ipRun("netns", "del", n)
		}
	}
}
