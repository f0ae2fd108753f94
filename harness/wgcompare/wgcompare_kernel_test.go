//go:build linux

package wgcompare

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/offload-dev/offload/internal/testutil"
)

// Addresses exist only inside the two namespaces the test makes.
const (
	addrA   = "10.77.0.1" // namespace A on the veth: sink, offload server
	addrB   = "10.77.0.2" // namespace B on the veth: load, offload client
	wgAddrA = "10.78.0.1" // namespace A on wg0
	wgAddrB = "10.78.0.2" // namespace B on wg0

	espAddrA = "10.79.0.1" // namespace A on the veth, ESP only
	espAddrB = "10.79.0.2" // namespace B on the veth, ESP only

	sinkPort   = "9000"
	tunnelPort = "7000"
	relayPort  = "7100"
	sshPort    = "22"
	forward    = "127.0.0.1:8080" // the offload client's forward, in B
	sshForward = "127.0.0.1:8081" // ssh -L, in B
	relayFwd   = "127.0.0.1:8082" // the client relay, in B
	wgPort     = "51820"
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

func start(t *testing.T, name string, args []string, env ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if len(env) > 0 {
		p.cmd.Env = append(os.Environ(), env...)
	}
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
type cpuStat struct{ busy, total, softirq int64 }

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
		if i == 6 {
			s.softirq = n
		}
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
	v, ok := devRx(n.run(t, "cat", "/proc/net/dev"), dev)
	if !ok {
		t.Fatalf("/proc/net/dev in %s has no %s (or no counter for it)", n.name, dev)
	}
	return v
}

// devRx is dev's receive byte counter in a /proc/net/dev text.
func devRx(procNetDev, dev string) (int64, bool) {
	for _, line := range strings.Split(procNetDev, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || name != dev {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		return v, err == nil
	}
	return 0, false
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

// TestDevRx reads a device's receive bytes out of /proc/net/dev's text.
func TestDevRx(t *testing.T) {
	const text = `Inter-|   Receive                            |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     120       2    0    0    0     0          0         0      120       2    0    0    0     0       0          0
    va: 33558024   23070    0    0    0     0          0         0  1226480   11590    0    0    0     0       0          0
`
	if v, ok := devRx(text, "va"); !ok || v != 33558024 {
		t.Errorf("va: %d, %v; want 33558024", v, ok)
	}
	if _, ok := devRx(text, "vb"); ok {
		t.Error("vb, which the text lacks: found")
	}
}
