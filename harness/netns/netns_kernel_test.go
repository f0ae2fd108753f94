//go:build linux

package netns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/measure/bench"
)

// The link between the two "hosts": netem on both ends of the veth, so
// the round trip is twice the delay and both data and ACKs can be lost.
const (
	netemDelay = "20ms"
	netemLoss  = "1%"

	serverAddr = "10.77.0.1" // in namespace A, with the server and the sink
	clientAddr = "10.77.0.2" // in namespace B, with the client and the load

	payload = 8 << 20
	streams = 4
	// transferBound is the most the 8 MiB may take. One TCP link with a
	// 40 ms RTT and 1% loss carries a few hundred KB/s (Mathis:
	// MSS/RTT·1.22/√p ≈ 450 KB/s), so about 20 s; the VM is emulated.
	transferBound = 150 * time.Second
)

const ipCmd = "/usr/sbin/ip"

// proc is a process started by the test, stopped in its cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  testutil.SyncBuffer // stdout and stderr
	done chan struct{}
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(args[0], args[1:]...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", p.name, p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and fails t unless the process exits 0 in time.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not exit within 30s of SIGTERM", p.name)
		return
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited %d after SIGTERM", p.name, code)
	}
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestKernelTwoHosts: offload server in namespace A, offload client in
// namespace B, a veth between them with netem delay and loss; 8 MiB over 4
// streams from B through the tunnel to a sink in A, checked with SHA-256.
func TestKernelTwoHosts(t *testing.T) {
	if os.Getenv("OFFLOAD_VM") != "1" {
		t.Skip("creates network namespaces and addresses: runs in the VM only (go run ./harness/vm -netns -bin ./cmd/offload -test ./harness/netns)")
	}
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := os.Stat(ipCmd); err != nil {
		t.Skipf("no iproute2 (%v): run the VM harness with -netns", err)
	}
	offload := os.Getenv("OFFLOAD_BIN")
	if offload == "" {
		var err error
		if offload, err = exec.LookPath("offload"); err != nil {
			t.Skipf("no offload binary (%v): give the VM harness -bin ./cmd/offload, or set OFFLOAD_BIN", err)
		}
	}
	t.Cleanup(func() { goleak.VerifyNone(t) })

	id := fmt.Sprint(os.Getpid())
	nsA, nsB := "ofa"+id, "ofb"+id
	sh(t, ipCmd, "netns", "add", nsA)
	t.Cleanup(func() { _ = exec.Command(ipCmd, "netns", "del", nsA).Run() })
	sh(t, ipCmd, "netns", "add", nsB)
	t.Cleanup(func() { _ = exec.Command(ipCmd, "netns", "del", nsB).Run() })
	sh(t, ipCmd, "-n", nsA, "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", nsB)
	for _, s := range []struct{ ns, dev, addr string }{{nsA, "va", serverAddr}, {nsB, "vb", clientAddr}} {
		sh(t, ipCmd, "-n", s.ns, "addr", "add", s.addr+"/24", "dev", s.dev)
		sh(t, ipCmd, "-n", s.ns, "link", "set", s.dev, "up")
		sh(t, ipCmd, "-n", s.ns, "link", "set", "lo", "up")
		out, err := exec.Command("/usr/sbin/tc", "-n", s.ns, "qdisc", "add", "dev", s.dev, "root", "netem",
			"delay", netemDelay, "loss", netemLoss).CombinedOutput()
		if err != nil {
			if bytes.Contains(out, []byte("unknown")) {
				t.Skipf("no sch_netem in this kernel: %s", out)
			}
			t.Fatalf("tc netem on %s: %v\n%s", s.dev, err, out)
		}
	}

	dir := t.TempDir()
	keyFile := filepath.Join(dir, "offload.key")
	sh(t, offload, "keygen", "-o", keyFile)
	// Adapted from examples/server.yaml and examples/client.yaml: the
	// same fields, with the namespaces' addresses and the bench sink as
	// the one service.
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	srvConf := write("server.yaml", fmt.Sprintf(`listen: %s:7000
key_file: offload.key
suite: aes-256-ctr-hmac-sha256
engine: software
services:
  sink: 127.0.0.1:9000
drain_timeout: 2s
log:
  level: info
`, serverAddr))
	cliConf := write("client.yaml", fmt.Sprintf(`server: %s:7000
key_file: offload.key
suite: aes-256-ctr-hmac-sha256
engine: software
forwards:
  - listen: 127.0.0.1:8080
    service: sink
redial:
  min: 200ms
  max: 2s
drain_timeout: 2s
log:
  level: info
`, serverAddr))
	for _, c := range []string{srvConf, cliConf} {
		sh(t, offload, "validate", "-c", c)
	}

	sink := start(t, "sink (A)", ipCmd, "netns", "exec", nsA, offload, "bench", "-sink", "127.0.0.1:9000")
	server := start(t, "server (A)", ipCmd, "netns", "exec", nsA, offload, "server", "-c", srvConf)
	client := start(t, "client (B)", ipCmd, "netns", "exec", nsB, offload, "client", "-c", cliConf)

	dial := testutil.DialIn("/run/netns/" + nsB)
	fwd := "127.0.0.1:8080"
	// Warm-up: the first verified byte says the sink, server, client and
	// link are all up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	for {
		_, err = bench.Run(ctx, bench.Load{Addr: fwd, Dial: dial, Bytes: 1, Digest: bench.SHA256})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("tunnel not up within 30s: %v", err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), transferBound)
	defer cancel()
	res, err := bench.Run(ctx, bench.Load{Addr: fwd, Dial: dial, Streams: streams, Bytes: payload, Digest: bench.SHA256, Seed: 42})
	if ctx.Err() != nil {
		t.Fatalf("%d MiB over %d streams did not finish within %v (%d bytes sent): %v", payload>>20, streams, transferBound, res.Bytes, err)
	}
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if !res.Verified || res.Bytes != payload {
		t.Fatalf("transfer %+v: want %d bytes, verified by SHA-256", res, payload)
	}
	t.Logf("%d MiB over %d streams through netem delay %s loss %s on each veth end: SHA-256 verified, %.2fs, %.2f MB/s",
		payload>>20, streams, netemDelay, netemLoss, res.Elapsed.Seconds(), res.MBps())

	client.stop(t)
	server.stop(t)
	sink.stop(t)
	for _, p := range []*proc{client, server} {
		if out := p.out.String(); strings.Contains(out, "ERROR") || strings.Contains(out, "panic") {
			t.Errorf("%s logged errors:\n%s", p.name, out)
		}
	}
}
