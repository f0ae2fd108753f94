//go:build linux

package wgcompare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// TestMain also runs the anchor's helper processes: the test binary re-runs
// itself inside a namespace as the sink or as one of the two relays, so the
// guest needs no other program for them.
func TestMain(m *testing.M) {
	role := os.Getenv("OFFLOAD_ANCHOR_ROLE")
	if role == "" {
		os.Exit(m.Run())
	}
	logger := log.New(os.Stderr, role+": ", 0)
	// SIGTERM is the test's way to end a helper: exit 0, as a service does.
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() { <-term; os.Exit(0) }()
	l, err := net.Listen("tcp", os.Getenv("OFFLOAD_ANCHOR_LISTEN"))
	if err != nil {
		logger.Fatal(err)
	}
	var d net.Dialer
	switch role {
	case "sink":
		err = Sink(l, logger.Printf)
	case "relay":
		err = Relay(l, os.Getenv("OFFLOAD_ANCHOR_TARGET"), d.DialContext)
	default:
		err = fmt.Errorf("unknown OFFLOAD_ANCHOR_ROLE %q", role)
	}
	logger.Fatal(err)
}

// helper starts the test binary as a helper process in namespace n.
func helper(t *testing.T, n *netns, role, listen, target string) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return start(t, role+" ("+n.name+")", n.cmd(self, "-test.run", "^$"),
		"OFFLOAD_ANCHOR_ROLE="+role, "OFFLOAD_ANCHOR_LISTEN="+listen, "OFFLOAD_ANCHOR_TARGET="+target)
}

// iproute2 finds iproute2's ip (from -deb iproute2): busybox's has no xfrm.
func iproute2(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Fatal("no iproute2 ip (busybox's has no xfrm): give the VM harness -deb iproute2")
	return ""
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "0x" + hex.EncodeToString(b)
}

// setupESP adds manual ESP SAs in transport mode between the ESP-only
// addresses (cbc(aes) with a 256-bit key, hmac(sha256) truncated to 128
// bits, both directions) and policies that require them for that pair only,
// so no other path's traffic is touched.
func setupESP(t *testing.T, ip string, a, b *netns) {
	t.Helper()
	type sa struct{ src, dst, spi, reqid, enc, auth string }
	ab := sa{espAddrB, espAddrA, "0x1001", "1", randHex(t, 32), randHex(t, 32)}
	ba := sa{espAddrA, espAddrB, "0x1002", "2", randHex(t, 32), randHex(t, 32)}
	for _, n := range []*netns{a, b} {
		for _, s := range []sa{ab, ba} {
			n.run(t, ip, "xfrm", "state", "add", "src", s.src, "dst", s.dst, "proto", "esp", "spi", s.spi,
				"reqid", s.reqid, "mode", "transport", "auth-trunc", "hmac(sha256)", s.auth, "128", "enc", "cbc(aes)", s.enc)
		}
		for _, s := range []sa{ab, ba} {
			dir := "in"
			if (n == a) == (s.src == espAddrA) {
				dir = "out"
			}
			n.run(t, ip, "xfrm", "policy", "add", "src", s.src+"/32", "dst", s.dst+"/32", "dir", dir,
				"tmpl", "src", s.src, "dst", s.dst, "proto", "esp", "reqid", s.reqid, "mode", "transport")
		}
	}
}

// espDrivers returns the drivers /proc/crypto lists for ESP's transform
// (authenc of hmac(sha256) and cbc(aes), under its IV generator).
func espDrivers(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/crypto")
	if err != nil {
		t.Fatal(err)
	}
	var drivers []string
	for _, block := range strings.Split(string(b), "\n\n") {
		var name, driver string
		for _, l := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch strings.TrimSpace(k) {
			case "name":
				name = strings.TrimSpace(v)
			case "driver":
				driver = strings.TrimSpace(v)
			}
		}
		if strings.Contains(name, "authenc(hmac(sha256),cbc(aes))") {
			drivers = append(drivers, name+" = "+driver)
		}
	}
	return drivers
}

var espBytes = regexp.MustCompile(`(\d+)\(bytes\)`)

// espTx is the payload bytes B's outgoing SA has carried.
func espTx(t *testing.T, ip string, b *netns) int64 {
	t.Helper()
	out := b.run(t, ip, "-s", "xfrm", "state", "get", "src", espAddrB, "dst", espAddrA, "proto", "esp", "spi", "0x1001")
	m := espBytes.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ip -s xfrm state: no byte counter in\n%s", out)
	}
	v, _ := strconv.ParseInt(m[1], 10, 64)
	return v
}

// setupSSH starts Debian's sshd in A (root by key only, aes256-ctr and
// hmac-sha2-256 only) and ssh -N -L in B forwarding sshForward to the sink.
func setupSSH(t *testing.T, dir string, a, b *netns) {
	t.Helper()
	for _, p := range []string{"/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("no %s (%v): give the VM harness -deb openssh-server -deb openssh-client", p, err)
		}
	}
	// Privilege separation: Debian's sshd wants user sshd and /run/sshd.
	pw, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pw), "\nsshd:") {
		f, err := os.OpenFile("/etc/passwd", os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteString("sshd:x:100:65534::/run/sshd:/bin/false\n")
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	hostKey, userKey := filepath.Join(dir, "ssh_host_ed25519_key"), filepath.Join(dir, "id_ed25519")
	for _, k := range []string{hostKey, userKey} {
		run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k)
	}
	pub, err := os.ReadFile(userKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "sshd_config")
	body := SSHDConfig(net.JoinHostPort(addrA, sshPort), dir)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, "/usr/sbin/sshd", "-t", "-f", conf)
	sshd := start(t, "sshd (A)", a.cmd("/usr/sbin/sshd", "-D", "-e", "-f", conf))
	t.Cleanup(func() { _ = sshd.cmd.Process.Kill() })
	// ssh gives up at once if sshd is not listening yet.
	dial := testutil.DialIn(b.file)
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := dial(context.Background(), "tcp", net.JoinHostPort(addrA, sshPort))
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-sshd.done:
			t.Fatalf("sshd exited:\n%s", sshd.out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sshd not listening within 90s: %v\n%s", err, sshd.out.String())
		}
		time.Sleep(250 * time.Millisecond)
	}
	ssh := start(t, "ssh -L (B)", b.cmd("ssh", "-N", "-T", "-i", userKey, "-L", sshForward+":127.0.0.1:"+sinkPort,
		"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
		"-o", "ExitOnForwardFailure=yes", "-o", "Ciphers=aes256-ctr", "-o", "MACs=hmac-sha2-256",
		"-o", "Compression=no", "-o", "LogLevel=ERROR", "-p", sshPort, "root@"+addrA))
	t.Cleanup(func() {
		select {
		case <-ssh.done:
			t.Logf("ssh -L had exited:\n%s", ssh.out.String())
		default:
		}
	})
}

// TestKernelRouterAnchor measures the paths of Paths in one boot; see
// doc.go. The figures are the host's (harness/vm spans, by qemu's CPU);
// this test checks that each run carried its stream intact over the path
// it names and logs the guest's view.
func TestKernelRouterAnchor(t *testing.T) {
	if os.Getenv("OFFLOAD_VM") != "1" {
		t.Skip("makes network namespaces, WireGuard links, ESP SAs and loads a crypto device: runs in the VM only " +
			"(go run ./harness/anchor)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	// From here on a missing piece is a failure: this is the VM run.
	mib := envInt(t, "OFFLOAD_ANCHOR_MIB", 32)
	rounds := envInt(t, "OFFLOAD_ANCHOR_ROUNDS", 3)
	payload := int64(mib) << 20
	if _, err := exec.LookPath(Offload); err != nil {
		t.Fatalf("no offload binary (%v): give the VM harness -bin ./cmd/offload", err)
	}
	if _, err := exec.LookPath("wg"); err != nil {
		t.Fatalf("no wg (%v): give the VM harness -deb wireguard-tools", err)
	}
	for _, m := range []string{"wireguard", "esp4", "xfrm_user", "authenc", "echainiv"} {
		if _, err := os.Stat("/sys/module/" + m); err != nil {
			t.Fatalf("no %s module loaded (%v): give the VM harness -modules with it", m, err)
		}
	}
	crypto, err := os.ReadFile("/proc/crypto")
	if err != nil || !strings.Contains(string(crypto), DeviceDriver) {
		t.Fatalf("no %s in /proc/crypto (%v): give the VM harness -virtio-crypto", DeviceDriver, err)
	}
	_, errDev := os.Stat("/dev/crypto")
	haveCryptodev := errDev == nil
	if os.Getenv("OFFLOAD_ANCHOR_CRYPTODEV") == "1" && !haveCryptodev {
		t.Fatalf("OFFLOAD_ANCHOR_CRYPTODEV=1 but no /dev/crypto (%v): the cryptodev module did not load", errDev)
	}
	var only []string
	if v := os.Getenv("OFFLOAD_ANCHOR_PATHS"); v != "" {
		only = strings.Split(v, ",")
	}
	// OFFLOAD_ANCHOR_PROFILE names the offload paths whose two ends write
	// CPU profiles into OFFLOAD_ANCHOR_PROFILE_DIR (harness/anchor -profile).
	var profiled []string
	if v := os.Getenv("OFFLOAD_ANCHOR_PROFILE"); v != "" {
		profiled = strings.Split(v, ",")
	}
	profileDir := os.Getenv("OFFLOAD_ANCHOR_PROFILE_DIR")
	// OFFLOAD_ANCHOR_KICK (a duration) writes a short console line that
	// often during every run: the UART's interrupt goes through malta's
	// i8259 and releases a virtio completion that waits there
	// (docs/kernel-notes.md), as the hung-task report does for offload's
	// waits but not for ESP's.
	var kick time.Duration
	if v := os.Getenv("OFFLOAD_ANCHOR_KICK"); v != "" {
		if kick, err = time.ParseDuration(v); err != nil || kick <= 0 {
			t.Fatalf("OFFLOAD_ANCHOR_KICK=%q: want a positive duration", v)
		}
	}
	if len(profiled) > 0 {
		if profileDir == "" {
			t.Fatal("OFFLOAD_ANCHOR_PROFILE without OFFLOAD_ANCHOR_PROFILE_DIR")
		}
		if err := os.MkdirAll(profileDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ip := iproute2(t)
	vmID := os.Getenv("OFFLOAD_VM_ID")
	t.Logf("%d MiB per run, %d rounds, %d CPU(s), /dev/crypto %v, vm id %q", mib, rounds, runtime.NumCPU(), haveCryptodev, vmID)

	// Two namespaces and the veth between them.
	a, b := newNetns(t, "anchor-a"), newNetns(t, "anchor-b")
	va, peer := vethPair(t, "va")
	a.adopt(t, va)
	b.adopt(t, peer)
	b.run(t, "ip", "link", "set", peer, "name", "vb")
	for _, s := range []struct {
		n              *netns
		dev, addr, esp string
	}{{a, "va", addrA, espAddrA}, {b, "vb", addrB, espAddrB}} {
		s.n.run(t, "ip", "link", "set", "lo", "up")
		s.n.run(t, "ip", "addr", "add", s.addr+"/24", "dev", s.dev)
		s.n.run(t, "ip", "addr", "add", s.esp+"/24", "dev", s.dev)
		s.n.run(t, "ip", "link", "set", s.dev, "up")
	}
	dir := t.TempDir()
	setupWireGuard(t, dir, a, b)
	setupESP(t, ip, a, b)
	// ESP must reach the device: the kernel binds cbc(aes) by priority
	// when the SA is made, and the device's driver has the highest.
	drivers := espDrivers(t)
	t.Logf("ESP's transforms: %s", strings.Join(drivers, "; "))
	if !slices.ContainsFunc(drivers, func(d string) bool { return strings.Contains(d, "= ") && strings.Contains(d, DeviceDriver) }) {
		t.Fatalf("ESP's cbc(aes) is not the device's (%s): /proc/crypto has %q", DeviceDriver, drivers)
	}
	setupSSH(t, dir, a, b)

	// One sink in A for every path, and the two relays.
	pattern := filepath.Join(dir, "pattern")
	if err := WritePatternFile(pattern); err != nil {
		t.Fatal(err)
	}
	sink := helper(t, a, "sink", "0.0.0.0:"+sinkPort, "")
	helper(t, a, "relay", net.JoinHostPort(addrA, relayPort), "127.0.0.1:"+sinkPort)
	helper(t, b, "relay", relayFwd, net.JoinHostPort(addrA, relayPort))
	keyFile := filepath.Join(dir, "offload.key")
	run(t, Offload, "keygen", "-o", keyFile)
	dial := testutil.DialIn(b.file)

	// waitUp sends one checked byte until it arrives: the first says
	// every process and the link are up.
	waitUp := func(addr string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var err error
		for ctx.Err() == nil {
			if _, err = Send(ctx, dial, addr, pattern, 1); err == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Fatalf("%s not reachable within 90s: %v\nsink: %s", addr, err, sink.out.String())
	}
	addrs := map[string]string{
		"plain":     net.JoinHostPort(addrA, sinkPort),
		"wireguard": net.JoinHostPort(wgAddrA, sinkPort),
		"relay":     relayFwd,
		"ssh":       sshForward,
		"ipsec":     net.JoinHostPort(espAddrA, sinkPort),
		"offload":   forward,
	}
	for k, addr := range addrs {
		if k != "offload" {
			waitUp(addr)
		}
	}

	runs := map[string]int{}
	measure := func(p Path) {
		t.Helper()
		var stops []*proc
		if p.Kind == "offload" {
			offload, err := exec.LookPath(p.Command())
			if err != nil {
				t.Fatalf("%s: no %s in the guest (%v): harness/anchor -baseline REV builds it", p.Name, p.Command(), err)
			}
			srv, cli := writeConfigs(t, dir, p)
			for _, c := range []string{srv, cli} {
				run(t, offload, "validate", "-c", c)
			}
			var srvProf, cliProf []string
			// The last round's run of a profiled path writes each end's
			// profile where harness/anchor's -pprof fetches it.
			if profileDir != "" && slices.Contains(profiled, p.Name) && runs[p.Name] == rounds-1 {
				srvProf = []string{"-cpuprofile", filepath.Join(profileDir, p.Name+"-server.prof")}
				cliProf = []string{"-cpuprofile", filepath.Join(profileDir, p.Name+"-client.prof")}
			}
			server := start(t, p.Name+" server (A)", a.cmd(append([]string{offload, "server", "-c", srv}, srvProf...)...), p.Env...)
			client := start(t, p.Name+" client (B)", b.cmd(append([]string{offload, "client", "-c", cli}, cliProf...)...), p.Env...)
			stops = []*proc{client, server}
			waitUp(forward)
		}
		veth0, irq0 := rxBytes(t, a, "va"), deviceIRQs(t)
		retrans0, kthread0 := tcpRetrans(t, b), kthreadTicks(t)
		var wg0, esp0 int64
		switch p.Kind {
		case "wireguard":
			wg0 = wgTx(t, b)
		case "ipsec":
			esp0 = espTx(t, ip, b)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		fmt.Printf("@@offload-vm span-begin name=%s ref=%d id=%s\n", p.Name, b2i(p.Kind == "wireguard"), vmID)
		// The host samples qemu's CPU when it reads a marker off the
		// console; on a busy host that reader can lag. An idle second after
		// each marker (idle costs qemu no CPU) lets it catch up before the
		// work starts, and before the next run's setup.
		time.Sleep(MarkerSettle)
		stopKick := kickConsole(kick)
		stopWatch := rescueStalls(t, sink, "va", kick)
		c0 := readCPUStat(t)
		res, err := Send(ctx, dial, addrs[p.Kind], pattern, payload)
		c1 := readCPUStat(t)
		stopKick()
		rescues := stopWatch()
		irqs := deviceIRQs(t) - irq0
		kthread := kthreadTicks(t) - kthread0
		// At least one tick, so that a run the tick missed does not
		// divide by zero.
		busy := float64(max(c1.busy-c0.busy, 1)) / userHZ
		fmt.Printf("@@offload-vm span-end name=%s bytes=%d guest_s=%.3f guest_busy_s=%.2f irq=%d softirq_s=%.2f kthread_s=%.2f rescue_kicks=%d id=%s\n",
			p.Name, res.Bytes, res.Elapsed.Seconds(), busy, irqs, float64(c1.softirq-c0.softirq)/userHZ, float64(kthread)/userHZ, rescues, vmID)
		if rescues > 0 {
			t.Logf("%s: under %d KiB reached A's veth in %v, so %d console kicks released the run (a late virtio completion: docs/kernel-notes.md)", p.Name, stallBytes>>10, stallQuiet, rescues)
		}
		time.Sleep(MarkerSettle)
		// Retransmissions by B's TCP (every path's sender is in B): a
		// late device completion that holds an ESP packet past the RTO
		// shows here. Read after the span: it runs a program.
		t.Logf("%s: B retransmitted %d TCP segments, guest softirq %.2fs, crypto and virtio kernel threads %.2fs",
			p.Name, tcpRetrans(t, b)-retrans0, float64(c1.softirq-c0.softirq)/userHZ, float64(kthread)/userHZ)
		if err != nil {
			var ends strings.Builder
			for _, s := range stops {
				fmt.Fprintf(&ends, "\n%s:\n%s", s.name, s.out.String())
			}
			t.Fatalf("%s: %v\nsink: %s%s", p.Label, err, sink.out.String(), ends.String())
		}
		// The stream must have crossed the path it names.
		if d := rxBytes(t, a, "va") - veth0; d < payload {
			t.Fatalf("%s: the veth in A received %d bytes for a %d-byte stream: the data took another way", p.Label, d, payload)
		}
		switch p.Kind {
		case "wireguard":
			if d := wgTx(t, b) - wg0; d < payload {
				t.Fatalf("%s: wg0 in B sent %d bytes for a %d-byte stream", p.Label, d, payload)
			}
		case "ipsec":
			if d := espTx(t, ip, b) - esp0; d < payload {
				t.Fatalf("%s: B's ESP SA carried %d bytes for a %d-byte stream", p.Label, d, payload)
			}
		}
		// One device request per 64 KiB frame and direction at least;
		// each completes with an interrupt unless the driver batched them.
		if p.Device && irqs < payload/(64<<10) {
			t.Fatalf("%s: the device raised %d interrupts for %d bytes: it did not do the work", p.Label, irqs, payload)
		}
		if p.Kind == "offload" {
			// Bytes per frame say how large the engine's requests were
			// (device interrupts per MB follow from them).
			for _, e := range []struct {
				name string
				n    *netns
			}{{"server", a}, {"client", b}} {
				t.Logf("%s %s frames: %s", p.Name, e.name, frameSizes(t, testutil.DialIn(e.n.file)))
			}
		}
		for _, s := range stops {
			s.stop(t)
		}
		runs[p.Name]++
		t.Logf("round %d %-14s %7.2f MB/s by the guest's clock, %6.2fs, guest busy %.2fs, %d samples checked, %d device interrupts",
			runs[p.Name], p.Name, res.MBps(), res.Elapsed.Seconds(), busy, res.Samples, irqs)
	}

	var others []Path
	for _, p := range Paths {
		switch {
		case p.Name == WireGuard:
		case only != nil && !slices.Contains(only, p.Name):
		case only == nil && p.Extra:
		case p.Kind == "relay-zc" || p.Kind == "relay-seal":
			t.Logf("%s left out: the two-router rig's path (harness/anchor -routers 2)", p.Name)
		case p.Cryptodev() && !haveCryptodev:
			t.Logf("%s left out: no /dev/crypto in this boot (harness/anchor loads the module when scripts/cryptodev-ko.sh builds it)", p.Name)
		default:
			others = append(others, p)
		}
	}
	wg, _ := PathByName(WireGuard)
	for r := range rounds {
		// Each round starts one path later, and WireGuard runs between
		// every other run, so drift in the emulator hits every path alike.
		for i := range others {
			measure(others[(i+r)%len(others)])
			measure(wg)
		}
	}
	sink.stop(t)
}

// setupWireGuard makes one wg0 per namespace, keys from wg genkey, as
// WireGuard's quick start does.
func setupWireGuard(t *testing.T, dir string, a, b *netns) {
	t.Helper()
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
func writeConfigs(t *testing.T, dir string, p Path) (string, string) {
	t.Helper()
	common := fmt.Sprintf("key_file: offload.key\nsuite: %s\nengine: %s\nmax_frame: %s\ndrain_timeout: 2s\nmetrics: %s\nlog:\n  level: warn\n",
		p.Suite, p.Eng, p.Frame, metricsAddr)
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

// metricsAddr is each offload end's /metrics, on loopback in its own
// namespace; an idle listener costs the run nothing.
const metricsAddr = "127.0.0.1:9100"

var frameMetric = regexp.MustCompile(`^offload_(frames|bytes)_total\{engine="([^"]*)",dir="([^"]*)"\} (\d+)$`)

// frameSizes reads an end's /metrics and says, per engine and direction,
// how many frames it sealed or opened and their mean ciphertext size.
func frameSizes(t *testing.T, dial func(context.Context, string, string) (net.Conn, error)) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := dial(ctx, "tcp", metricsAddr)
	if err != nil {
		return fmt.Sprintf("no /metrics: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", metricsAddr); err != nil {
		return fmt.Sprintf("/metrics: %v", err)
	}
	body, err := io.ReadAll(c)
	if err != nil {
		return fmt.Sprintf("/metrics: %v", err)
	}
	type key struct{ engine, dir string }
	frames, bytes := map[key]int64{}, map[key]int64{}
	var keys []key
	for _, l := range strings.Split(string(body), "\n") {
		m := frameMetric.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		k := key{m[2], m[3]}
		v, _ := strconv.ParseInt(m[4], 10, 64)
		if m[1] == "frames" {
			if _, ok := frames[k]; !ok {
				keys = append(keys, k)
			}
			frames[k] = v
		} else {
			bytes[k] = v
		}
	}
	var parts []string
	for _, k := range keys {
		if frames[k] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s %d frames, %d bytes, %d bytes/frame", k.engine, k.dir, frames[k], bytes[k], bytes[k]/frames[k]))
	}
	if len(parts) == 0 {
		return "no frames counted"
	}
	return strings.Join(parts, "; ")
}

// tcpRetrans is RetransSegs of n's TCP (/proc/net/snmp is per namespace).
func tcpRetrans(t *testing.T, n *netns) int64 {
	t.Helper()
	var names []string
	for _, l := range strings.Split(n.run(t, "cat", "/proc/net/snmp"), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Tcp:" {
			continue
		}
		if names == nil {
			names = f
			continue
		}
		for i, name := range names {
			if name == "RetransSegs" && i < len(f) {
				v, _ := strconv.ParseInt(f[i], 10, 64)
				return v
			}
		}
	}
	t.Fatalf("/proc/net/snmp in %s: no Tcp RetransSegs", n.name)
	return 0
}

// kthreadTicks sums utime+stime (USER_HZ ticks) of the named kernel threads
// that serve the device: crypto_engine's worker, which virtio_crypto queues
// every request to, is named after the device, and cryptd's.
func kthreadTicks(t *testing.T) int64 {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at the
		// last ')'; utime and stime are fields 14 and 15.
		open, end := strings.IndexByte(string(b), '('), strings.LastIndexByte(string(b), ')')
		if open < 0 || end < open {
			continue
		}
		comm := string(b[open+1 : end])
		// kworkers rename themselves after the workqueue they serve
		// (WireGuard's wg-crypt among them), so they would come and go
		// between two reads: only named kthreads count.
		if strings.HasPrefix(comm, "kworker") ||
			!strings.Contains(comm, "virtio") && !strings.Contains(comm, "crypt") && !strings.Contains(comm, "engine") {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		sum += u + st
	}
	return sum
}

// rescueStalls watches A's receive counter of dev (from the sink's
// /proc/PID/net/dev: a file read, no program started, so it costs every run
// the same little) and, while it has moved less than stallBytes for
// stallQuiet, writes a console line every 200 ms. Without it a run whose ESP packet waits for a
// late virtio completion can wait for ever (one CI anchor hung for its whole
// timeout); with it the run finishes, and the table marks it by its
// rescue_kicks. The returned func stops the watch and gives the kicks it
// wrote. With always-on kicks (kick > 0) it watches nothing.
func rescueStalls(t *testing.T, sink *proc, dev string, kick time.Duration) func() int {
	if kick > 0 {
		return func() int { return 0 }
	}
	file := fmt.Sprintf("/proc/%d/net/dev", sink.cmd.Process.Pid)
	read := func() int64 {
		b, err := os.ReadFile(file)
		if err != nil {
			return -1 // the sink is gone: the run fails on its own
		}
		if v, ok := devRx(string(b), dev); ok {
			return v
		}
		return -1
	}
	if read() < 0 {
		t.Fatalf("%s has no %s: the stall watch cannot see the run", file, dev)
	}
	done := make(chan struct{})
	kicks := make(chan int, 1)
	go func() {
		n, w := 0, newStallWatch(time.Now(), read())
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				kicks <- n
				return
			case now := <-tick.C:
				if w.stalled(now, read()) {
					_, _ = os.Stdout.WriteString("kick\n")
					n++
				}
			}
		}
	}()
	return func() int { close(done); return <-kicks }
}

// kickConsole writes a line to the console every d until the returned func
// is called (nothing when d is 0).
func kickConsole(d time.Duration) func() {
	if d <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				_, _ = os.Stdout.WriteString("kick\n")
			}
		}
	}()
	return func() { close(done); <-stopped }
}
