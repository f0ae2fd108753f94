//go:build linux

package wgcompare

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/offload-dev/offload/internal/bench"
	"github.com/offload-dev/offload/internal/testutil"
)

// Addresses exist only inside the two namespaces the test makes.
const (
	addrA   = "10.77.0.1" // namespace A on the veth: sink, offload server
	addrB   = "10.77.0.2" // namespace B on the veth: load, offload client
	wgAddrA = "10.78.0.1" // namespace A on wg0
	wgAddrB = "10.78.0.2" // namespace B on wg0

	sinkPort   = "9000"
	tunnelPort = "7000"
	forward    = "127.0.0.1:8080" // the offload client's forward, in B
	wgPort     = "51820"

	deviceDriver = "virtio_crypto_aes_cbc"
)

// path is one way of carrying the stream from B to the sink in A.
type path struct {
	Name  string // span and table name
	Label string // what the row means
	Kind  string // "plain", "wireguard" or "offload"
	Suite string // offload only
	Eng   string
	Frame string
}

func (p path) device() bool { return strings.Contains(p.Eng, deviceDriver) }

var (
	plaintext = path{Name: "plaintext", Label: "plaintext TCP over veth", Kind: "plain"}
	wireguard = path{Name: "wireguard", Label: "kernel WireGuard (chacha20-poly1305)", Kind: "wireguard"}
	offloads  = []path{
		{Name: "ctr-sw-64k", Label: "offload aes-256-ctr-poly1305, software, 64 KiB frames", Kind: "offload",
			Suite: "aes-256-ctr-poly1305", Eng: "software", Frame: "64KiB"},
		{Name: "cbc-sw-64k", Label: "offload aes-256-cbc-poly1305, software, 64 KiB", Kind: "offload",
			Suite: "aes-256-cbc-poly1305", Eng: "software", Frame: "64KiB"},
		{Name: "cbc-dev-64k", Label: "offload aes-256-cbc-poly1305, virtio-crypto device, 64 KiB", Kind: "offload",
			Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + deviceDriver, Frame: "64KiB"},
		{Name: "cbc-dev-16k", Label: "offload same, device, 16 KiB", Kind: "offload",
			Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + deviceDriver, Frame: "16KiB"},
		// Whole frames in one kernel request: the device's AES-CBC and the
		// kernel's HMAC-SHA256 (authenc); needs the authenc module.
		{Name: "hmac-aead-64k", Label: "offload aes-256-cbc-hmac-sha256, device + kernel HMAC (afalg-aead), 64 KiB", Kind: "offload",
			Suite: "aes-256-cbc-hmac-sha256", Eng: "afalg-aead:" + deviceDriver, Frame: "64KiB"},
	}
)

// envInt reads a positive integer setting, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// netns is a named network namespace bound at /run/netns/NAME (what
// ip netns add makes), set up with busybox's unshare: the mipsel guest has
// busybox's ip, which has no "netns" subcommand.
type netns struct{ name, file string }

func newNetns(t *testing.T, name string) *netns {
	t.Helper()
	n := &netns{name: name, file: "/run/netns/" + name}
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(n.file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "unshare", "--net="+n.file, "true")
	t.Cleanup(func() {
		_ = unix.Unmount(n.file, unix.MNT_DETACH)
		_ = os.Remove(n.file)
	})
	return n
}

// cmd returns argv run inside the namespace; nsenter -F execs the program
// itself, so a signal to the returned process reaches it.
func (n *netns) cmd(args ...string) []string {
	return append([]string{"nsenter", "-F", "--net=" + n.file}, args...)
}

func (n *netns) run(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, n.cmd(args...)...)
}

// adopt moves interface dev of the current namespace into n: busybox's
// ip link set takes "netns PID" only, so a process sits in n meanwhile.
func (n *netns) adopt(t *testing.T, dev string) {
	t.Helper()
	args := n.cmd("sleep", "60")
	holder := exec.Command(args[0], args[1:]...)
	if err := holder.Start(); err != nil {
		t.Fatalf("holder in %s: %v", n.name, err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	// nsenter -F has entered the namespace once sleep runs in it.
	self, _ := os.Readlink("/proc/self/ns/net")
	deadline := time.Now().Add(10 * time.Second)
	for {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid))
		if err == nil && ns != self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder never entered %s", n.name)
		}
		time.Sleep(20 * time.Millisecond)
	}
	run(t, "ip", "link", "set", dev, "netns", strconv.Itoa(holder.Process.Pid))
}

// vethPair makes a veth pair in the current namespace and returns both
// names: busybox's ip cannot name the peer, the kernel does.
func vethPair(t *testing.T, name string) (string, string) {
	t.Helper()
	run(t, "ip", "link", "add", name, "type", "veth")
	b, err := os.ReadFile("/sys/class/net/" + name + "/iflink")
	if err != nil {
		t.Fatalf("veth %s: %v", name, err)
	}
	peerIdx := strings.TrimSpace(string(b))
	ents, _ := os.ReadDir("/sys/class/net")
	for _, e := range ents {
		idx, err := os.ReadFile("/sys/class/net/" + e.Name() + "/ifindex")
		if err == nil && strings.TrimSpace(string(idx)) == peerIdx && e.Name() != name {
			return name, e.Name()
		}
	}
	t.Fatalf("veth %s: no interface with the peer's ifindex %s", name, peerIdx)
	return "", ""
}

// proc is a process the test runs, stopped in its cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  testutil.SyncBuffer
	done chan struct{}
}

func start(t *testing.T, name string, args []string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends SIGTERM and fails t unless the process exits 0 in time and
// logged no error.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not exit within 60s of SIGTERM\n%s", p.name, p.out.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("%s exited %d after SIGTERM\n%s", p.name, code, p.out.String())
	}
	if out := p.out.String(); strings.Contains(out, "ERROR") || strings.Contains(out, "panic") {
		t.Fatalf("%s logged errors:\n%s", p.name, out)
	}
}

// cpuStat is the first line of /proc/stat in USER_HZ ticks.
type cpuStat struct{ busy, total int64 }

func readCPUStat(t *testing.T) cpuStat {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	var s cpuStat
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("/proc/stat: %q: %v", line, err)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice:
		// guest time is already counted in user.
		if i >= 8 {
			break
		}
		s.total += n
		if i != 3 && i != 4 {
			s.busy += n
		}
	}
	return s
}

// userHZ is the unit of /proc/stat.
const userHZ = 100

// deviceIRQs sums the /proc/interrupts counts of the virtio lines (the
// crypto device's virtqueues).
func deviceIRQs(t *testing.T) int64 {
	t.Helper()
	f, err := os.Open("/proc/interrupts")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var sum int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "virtio") {
			continue
		}
		fs := strings.Fields(line)
		// "IRQ: count [count...] chip ... name"; one CPU here, but sum them.
		for _, v := range fs[1:] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				break
			}
			sum += n
		}
	}
	return sum
}

// rxBytes is the receive byte counter of dev in namespace n.
func rxBytes(t *testing.T, n *netns, dev string) int64 {
	t.Helper()
	for _, line := range strings.Split(n.run(t, "cat", "/proc/net/dev"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != dev {
			continue
		}
		f := strings.Fields(rest)
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("/proc/net/dev %s: %q", dev, line)
		}
		return v
	}
	t.Fatalf("/proc/net/dev in %s has no %s", n.name, dev)
	return 0
}

// wgTx is the bytes wg0 in namespace n has sent to its one peer.
func wgTx(t *testing.T, n *netns) int64 {
	t.Helper()
	f := strings.Fields(n.run(t, "wg", "show", "wg0", "transfer"))
	if len(f) != 3 {
		t.Fatalf("wg show wg0 transfer in %s: %q, want one peer", n.name, f)
	}
	v, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		t.Fatalf("wg show wg0 transfer: %q", f)
	}
	return v
}

// sample is one measured run.
type sample struct {
	mbps     float64
	guestS   float64
	busyS    float64
	busyFrac float64
}

// TestKernelWireGuardAnchor measures the paths of the package comment in
// one boot and prints the table; see doc.go.
func TestKernelWireGuardAnchor(t *testing.T) {
	if os.Getenv("OFFLOAD_VM") != "1" {
		t.Skip("makes network namespaces, WireGuard links and loads a crypto device: runs in the VM only " +
			"(go run ./harness/vm -arch mipsle -smp 1 -virtio-crypto -modules veth,wireguard -deb wireguard-tools -bin ./cmd/offload -test ./harness/wgcompare)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	// From here on a missing piece is a failure: this is the VM run.
	mib := envInt(t, "OFFLOAD_ANCHOR_MIB", 32)
	rounds := envInt(t, "OFFLOAD_ANCHOR_ROUNDS", 3)
	payload := int64(mib) << 20
	offload, err := exec.LookPath("offload")
	if err != nil {
		t.Fatalf("no offload binary (%v): give the VM harness -bin ./cmd/offload", err)
	}
	if _, err := exec.LookPath("wg"); err != nil {
		t.Fatalf("no wg (%v): give the VM harness -deb wireguard-tools", err)
	}
	if _, err := os.Stat("/sys/module/wireguard"); err != nil {
		t.Fatalf("no wireguard module loaded (%v): give the VM harness -modules wireguard", err)
	}
	crypto, err := os.ReadFile("/proc/crypto")
	if err != nil || !strings.Contains(string(crypto), deviceDriver) {
		t.Fatalf("no %s in /proc/crypto (%v): give the VM harness -virtio-crypto", deviceDriver, err)
	}
	vmID := os.Getenv("OFFLOAD_VM_ID")
	t.Logf("%d MiB per run, %d rounds, %d CPU(s), vm id %q", mib, rounds, runtime.NumCPU(), vmID)

	// Two namespaces and the veth between them.
	a, b := newNetns(t, "anchor-a"), newNetns(t, "anchor-b")
	va, peer := vethPair(t, "va")
	a.adopt(t, va)
	b.adopt(t, peer)
	b.run(t, "ip", "link", "set", peer, "name", "vb")
	for _, s := range []struct {
		n         *netns
		dev, addr string
	}{{a, "va", addrA}, {b, "vb", addrB}} {
		s.n.run(t, "ip", "link", "set", "lo", "up")
		s.n.run(t, "ip", "addr", "add", s.addr+"/24", "dev", s.dev)
		s.n.run(t, "ip", "link", "set", s.dev, "up")
	}

	// WireGuard: one wg0 per namespace, keys from wg genkey, as its
	// quick start does.
	dir := t.TempDir()
	keys := map[*netns][2]string{}
	for _, n := range []*netns{a, b} {
		priv := filepath.Join(dir, n.name+".wgkey")
		if err := os.WriteFile(priv, []byte(run(t, "wg", "genkey")), 0o600); err != nil {
			t.Fatal(err)
		}
		pc := exec.Command("wg", "pubkey")
		pc.Stdin, _ = os.Open(priv)
		pub, err := pc.Output()
		if err != nil {
			t.Fatalf("wg pubkey: %v", err)
		}
		keys[n] = [2]string{priv, strings.TrimSpace(string(pub))}
		n.run(t, "ip", "link", "add", "wg0", "type", "wireguard")
	}
	for _, s := range []struct {
		n, other     *netns
		wg, peerWG   string
		peerEndpoint string
	}{{a, b, wgAddrA, wgAddrB, addrB}, {b, a, wgAddrB, wgAddrA, addrA}} {
		s.n.run(t, "wg", "set", "wg0", "listen-port", wgPort, "private-key", keys[s.n][0],
			"peer", keys[s.other][1], "allowed-ips", s.peerWG+"/32", "endpoint", s.peerEndpoint+":"+wgPort)
		s.n.run(t, "ip", "addr", "add", s.wg+"/24", "dev", "wg0")
		s.n.run(t, "ip", "link", "set", "wg0", "up")
	}

	// One sink in A for every path: the bench sink of the offload binary,
	// which answers each stream with its byte count and CRC-32C.
	sink := start(t, "sink (A)", a.cmd(offload, "bench", "-sink", "0.0.0.0:"+sinkPort))
	t.Cleanup(func() { sink.stop(t) })
	keyFile := filepath.Join(dir, "offload.key")
	run(t, offload, "keygen", "-o", keyFile)
	dial := testutil.DialIn(b.file)

	// waitUp sends one verified byte until it arrives: the first says
	// every process and the link are up.
	waitUp := func(addr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var err error
		for ctx.Err() == nil {
			if _, err = bench.Run(ctx, bench.Load{Addr: addr, Dial: dial, Bytes: 1, Digest: bench.CRC32C}); err == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Fatalf("%s not reachable within 90s: %v", addr, err)
	}
	waitUp(net.JoinHostPort(addrA, sinkPort))
	waitUp(net.JoinHostPort(wgAddrA, sinkPort))

	results := map[string][]sample{}
	measure := func(p path) {
		t.Helper()
		addr := net.JoinHostPort(addrA, sinkPort)
		var stops []*proc
		switch p.Kind {
		case "wireguard":
			addr = net.JoinHostPort(wgAddrA, sinkPort)
		case "offload":
			srv, cli := writeConfigs(t, dir, p)
			for _, c := range []string{srv, cli} {
				run(t, offload, "validate", "-c", c)
			}
			server := start(t, p.Name+" server (A)", a.cmd(offload, "server", "-c", srv))
			client := start(t, p.Name+" client (B)", b.cmd(offload, "client", "-c", cli))
			stops = []*proc{client, server}
			addr = forward
			waitUp(addr)
		}
		veth0, irq0 := rxBytes(t, a, "va"), deviceIRQs(t)
		var wg0 int64
		if p.Kind == "wireguard" {
			wg0 = wgTx(t, b)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		fmt.Printf("@@offload-vm span-begin name=%s ref=%d id=%s\n", p.Name, b2i(p.Kind == "wireguard"), vmID)
		c0 := readCPUStat(t)
		res, err := bench.Run(ctx, bench.Load{Addr: addr, Dial: dial, Bytes: payload, Digest: bench.CRC32C, Seed: uint64(len(results[p.Name]) + 1)})
		c1 := readCPUStat(t)
		// At least one tick, so that a run the tick missed does not
		// divide by zero below.
		busy := float64(max(c1.busy-c0.busy, 1)) / userHZ
		frac := float64(c1.busy-c0.busy) / float64(max(c1.total-c0.total, 1))
		fmt.Printf("@@offload-vm span-end name=%s bytes=%d guest_s=%.3f guest_busy_s=%.2f id=%s\n",
			p.Name, res.Bytes, res.Elapsed.Seconds(), busy, vmID)
		if err != nil {
			t.Fatalf("%s: %d of %d bytes: %v", p.Label, res.Bytes, payload, err)
		}
		if !res.Verified || res.Bytes != payload {
			t.Fatalf("%s: %+v: want %d bytes with the sink's CRC-32C matching", p.Label, res, payload)
		}
		// The stream must have crossed the path it names.
		if d := rxBytes(t, a, "va") - veth0; d < payload {
			t.Fatalf("%s: the veth in A received %d bytes for a %d-byte stream: the data took another way", p.Label, d, payload)
		}
		if p.Kind == "wireguard" {
			if d := wgTx(t, b) - wg0; d < payload {
				t.Fatalf("%s: wg0 in B sent %d bytes for a %d-byte stream", p.Label, d, payload)
			}
		}
		if p.device() {
			// One request per frame and direction at least; each completes
			// with an interrupt unless the driver batched them.
			if d := deviceIRQs(t) - irq0; d < payload/(64<<10) {
				t.Fatalf("%s: the device raised %d interrupts for %d bytes: it did not do the work", p.Label, d, payload)
			}
		}
		for _, s := range stops {
			s.stop(t)
		}
		s := sample{mbps: res.MBps(), guestS: res.Elapsed.Seconds(), busyS: busy, busyFrac: frac}
		results[p.Name] = append(results[p.Name], s)
		t.Logf("round %d %-12s %7.2f MB/s  %6.2fs  guest busy %.2fs (%.0f%%)", len(results[p.Name]), p.Name, s.mbps, s.guestS, busy, 100*frac)
	}

	others := append([]path{plaintext}, offloads...)
	// paired holds each run's MB/s over that of the WireGuard run right
	// after it: a slow stretch of the emulator (or of the host it shares)
	// then hits both sides of a ratio.
	paired := map[string][]float64{}
	last := func(p path) float64 { return results[p.Name][len(results[p.Name])-1].mbps }
	for r := range rounds {
		// Each round starts one path later, and WireGuard runs between
		// every other run, so drift in the emulator hits every path alike.
		for i := range others {
			p := others[(i+r)%len(others)]
			measure(p)
			measure(wireguard)
			paired[p.Name] = append(paired[p.Name], last(p)/last(wireguard))
		}
	}
	printTable(t, mib, rounds, append([]path{plaintext, wireguard}, offloads...), results, paired)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeConfigs writes server and client configs for path p, adapted from
// examples/server.yaml and examples/client.yaml: the same fields, with the
// namespaces' addresses, the path's suite, engine and frame size, and the
// sink as the one service. Every other setting keeps its default, as a new
// user would run it.
func writeConfigs(t *testing.T, dir string, p path) (string, string) {
	t.Helper()
	common := fmt.Sprintf("key_file: offload.key\nsuite: %s\nengine: %s\nmax_frame: %s\ndrain_timeout: 2s\nlog:\n  level: warn\n", p.Suite, p.Eng, p.Frame)
	srv := filepath.Join(dir, p.Name+"-server.yaml")
	cli := filepath.Join(dir, p.Name+"-client.yaml")
	files := map[string]string{
		srv: fmt.Sprintf("listen: %s:%s\n%sservices:\n  sink: 127.0.0.1:%s\n", addrA, tunnelPort, common, sinkPort),
		cli: fmt.Sprintf("server: %s:%s\n%sforwards:\n  - listen: %s\n    service: sink\nredial:\n  min: 200ms\n  max: 2s\n",
			addrA, tunnelPort, common, forward),
	}
	for f, body := range files {
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return srv, cli
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printTable prints medians per path and the ratio to WireGuard's median.
// "added" is the guest CPU a run took beyond plaintext's: what the path
// itself costs, without the load generator, the sink and TCP over the veth,
// which every path pays alike.
func printTable(t *testing.T, mib, rounds int, paths []path, results map[string][]sample, paired map[string][]float64) {
	t.Helper()
	col := func(p path, f func(sample) float64) float64 {
		var v []float64
		for _, s := range results[p.Name] {
			v = append(v, f(s))
		}
		return median(v)
	}
	mbps := func(s sample) float64 { return s.mbps }
	busy := func(s sample) float64 { return s.busyS }
	wg, plainBusy := col(wireguard, mbps), col(plaintext, busy)
	wgAdded := col(wireguard, busy) - plainBusy
	var b strings.Builder
	fmt.Fprintf(&b, "\nRouter-class anchor: one TCP stream of %d MiB per run, %d rounds, medians by the guest's clock (%s, %d CPU)\n",
		mib, rounds, runtime.GOARCH, runtime.NumCPU())
	fmt.Fprintf(&b, "| %-58s | %4s | %8s | %7s | %9s | %10s | %5s | %11s | %8s |\n", "path", "runs", "MB/s", "vs WG",
		"paired", "CPU s/run", "busy", "added CPU s", "vs WG")
	fmt.Fprintf(&b, "|%s|-----:|---------:|--------:|----------:|-----------:|------:|------------:|---------:|\n", strings.Repeat("-", 60))
	for _, p := range paths {
		m, bs := col(p, mbps), col(p, busy)
		added, vs, pair := "-", "-", "1.00x"
		if p != wireguard {
			pair = fmt.Sprintf("%.2fx", median(paired[p.Name]))
		}
		if p != plaintext {
			added = fmt.Sprintf("%.2f", bs-plainBusy)
			if wgAdded > 0 {
				vs = fmt.Sprintf("%.2fx", (bs-plainBusy)/wgAdded)
			}
		}
		fmt.Fprintf(&b, "| %-58s | %4d | %8.2f | %6.2fx | %9s | %10.2f | %4.0f%% | %11s | %8s |\n", p.Label, len(results[p.Name]),
			m, m/wg, pair, bs, 100*col(p, func(s sample) float64 { return s.busyFrac }), added, vs)
	}
	fmt.Fprintf(&b, "MB/s: 10^6 payload bytes per second; vs WG: median over median; paired: median of each run's MB/s over the "+
		"WireGuard run right after it; CPU s/run: guest CPU busy (all processes and the kernel) during a run; "+
		"added CPU s: CPU s/run beyond plaintext's (the load generator, sink and TCP over the veth, which every path pays); "+
		"the last column is that cost against WireGuard's, so 5.00x costs five times the CPU.\n")
	fmt.Print(b.String())
}
