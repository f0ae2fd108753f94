package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel"
)

// proc is a tool process started here, its output kept up to 64 KiB.
type proc = testutil.Proc

func startProc(name string, args ...string) (*proc, error) {
	return testutil.Start(name, exec.Command(args[0], args[1:]...), 64<<10)
}

// stop ends the process: SIGTERM, then SIGKILL after 5 s.
func stop(p *proc) { p.Stop(5 * time.Second) }

// stopClean ends the process with SIGTERM, as a service manager would,
// and fails unless it exits 0 within 10 s (offload drains and exits 0).
func stopClean(p *proc) error {
	if !p.Stop(10 * time.Second) {
		return fmt.Errorf("%s did not exit within 10s of SIGTERM", p.Name)
	}
	if code := p.ExitCode(); code != 0 {
		return fmt.Errorf("%s exited %d after SIGTERM:\n%s", p.Name, code, p.Out)
	}
	return nil
}

func freePort() (string, error) { return testutil.FreeAddr("127.0.0.1") }

// freePorts is n loopback addresses, each free when picked.
func freePorts(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		a, err := freePort()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// toolVersion runs a version command and keeps its first line.
func toolVersion(args ...string) string {
	out, _ := exec.Command(args[0], args[1:]...).CombinedOutput()
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

func setupDirect(_ context.Context, _, sink string) (*tunnelUnderTest, toolInfo, error) {
	return &tunnelUnderTest{name: "direct", addr: sink}, toolInfo{Name: "direct", How: "no tunnel: the load generator to the sink", Version: runtime.Version()}, nil
}

func setupSocat(_ context.Context, _, sink string) (*tunnelUnderTest, toolInfo, error) {
	info := toolInfo{Name: "socat", Version: toolVersion("socat", "-V")}
	if _, err := exec.LookPath("socat"); err != nil {
		return nil, info, fmt.Errorf("%w (apt-get install socat; scripts/deps.sh)", err)
	}
	addr, err := freePort()
	if err != nil {
		return nil, info, err
	}
	args := []string{"socat", "TCP-LISTEN:" + port(addr) + ",bind=127.0.0.1,reuseaddr,fork,backlog=256", "TCP:" + sink}
	info.How = strings.Join(args, " ")
	p, err := startProc("socat", args...)
	if err != nil {
		return nil, info, err
	}
	return &tunnelUnderTest{name: "socat", addr: addr, procs: []*proc{p}}, info, nil
}

// setupSSH starts a private sshd that allows only cipher (and mac, if
// given: an AEAD cipher such as aes128-gcm@openssh.com has its own) and
// ssh -L through it, each tool its own sshd so that its CPU is its own.
func setupSSH(ctx context.Context, dir, sink, name, cipher, mac string) (*tunnelUnderTest, toolInfo, error) {
	info := toolInfo{Name: name, Version: toolVersion("ssh", "-V")}
	const sshd = "/usr/sbin/sshd"
	for _, b := range []string{sshd, "ssh", "ssh-keygen"} {
		if _, err := exec.LookPath(b); err != nil {
			return nil, info, fmt.Errorf("%w (apt-get install openssh-server openssh-client; scripts/deps.sh)", err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, info, err
	}
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, info, fmt.Errorf("sshd needs /run/sshd: %w", err)
	}
	hostKey, userKey := filepath.Join(dir, "host_ed25519"), filepath.Join(dir, "id_ed25519")
	for _, k := range []string{hostKey, userKey} {
		if out, err := exec.CommandContext(ctx, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			return nil, info, fmt.Errorf("ssh-keygen: %w\n%s", err, out)
		}
	}
	pub, err := os.ReadFile(userKey + ".pub")
	if err != nil {
		return nil, info, err
	}
	auth := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(auth, pub, 0o600); err != nil {
		return nil, info, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, info, err
	}
	sshdAddr, err := freePort()
	if err != nil {
		return nil, info, err
	}
	macLine, macHow, macArgs := "", "", []string(nil)
	if mac != "" {
		macLine, macHow, macArgs = "MACs "+mac+"\n", ", MACs "+mac, []string{"-m", mac}
	}
	conf := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`Port %s
ListenAddress 127.0.0.1
HostKey %s
AuthorizedKeysFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
PidFile none
Ciphers %s
%sCompression no
LogLevel ERROR
`, port(sshdAddr), hostKey, auth, cipher, macLine)), 0o600); err != nil {
		return nil, info, err
	}
	d, err := startProc("sshd", sshd, "-f", conf, "-D", "-e")
	if err != nil {
		return nil, info, err
	}
	t := &tunnelUnderTest{name: name, procs: []*proc{d}}
	if err := waitListen(ctx, sshdAddr, d); err != nil {
		return t, info, fmt.Errorf("sshd: %w", err)
	}
	fwd, err := freePort()
	if err != nil {
		return t, info, err
	}
	args := []string{"ssh", "-F", "/dev/null", "-N", "-T", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
		"-o", "UserKnownHostsFile=/dev/null", "-o", "ExitOnForwardFailure=yes", "-o", "Compression=no", "-o", "LogLevel=ERROR",
		"-c", cipher}
	args = append(args, macArgs...)
	args = append(args, "-i", userKey, "-p", port(sshdAddr), "-L", "127.0.0.1:"+port(fwd)+":"+sink, u.Username+"@127.0.0.1")
	info.How = "sshd -f CONFIG -D -e (Ciphers " + cipher + macHow + "); " + strings.Join(args[:len(args)-1], " ") + " USER@127.0.0.1"
	c, err := startProc("ssh", args...)
	if err != nil {
		return t, info, err
	}
	t.procs = append(t.procs, c)
	t.addr = fwd
	return t, info, waitListen(ctx, fwd, c)
}

func setupSpiped(ctx context.Context, dir, sink string) (*tunnelUnderTest, toolInfo, error) {
	info := toolInfo{Name: "spiped", Version: toolVersion("spiped", "-v")}
	if _, err := exec.LookPath("spiped"); err != nil {
		return nil, info, fmt.Errorf("%w (apt-get install spiped; scripts/deps.sh)", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, info, err
	}
	key := filepath.Join(dir, "spiped.key")
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	if err := os.WriteFile(key, k, 0o600); err != nil {
		return nil, info, err
	}
	addrs, err := freePorts(2)
	if err != nil {
		return nil, info, err
	}
	encAddr, decAddr := addrs[0], addrs[1]
	bracket := func(a string) string { return "[127.0.0.1]:" + port(a) }
	dec := []string{"spiped", "-d", "-F", "-n", "1000", "-s", bracket(decAddr), "-t", bracket(sink), "-k", key}
	enc := []string{"spiped", "-e", "-F", "-n", "1000", "-s", bracket(encAddr), "-t", bracket(decAddr), "-k", key}
	info.How = strings.Join(enc, " ") + "; " + strings.Join(dec, " ")
	t := &tunnelUnderTest{name: "spiped", addr: encAddr}
	for _, args := range [][]string{dec, enc} {
		p, err := startProc("spiped "+args[1], args...)
		if err != nil {
			return t, info, err
		}
		t.procs = append(t.procs, p)
		a := decAddr
		if args[1] == "-e" {
			a = encAddr
		}
		if err := waitListen(ctx, a, p); err != nil {
			return t, info, err
		}
	}
	return t, info, nil
}

// offloadConfig is one offload pair to start.
type offloadConfig struct {
	name, bin, suite string
	maxFrame         string // "" for the default
	maxProcs         int    // 0 for the default
	profileDir       string // "" for no CPU profiles
	streams          int    // the most streams a run opens at once
}

// setupOffload starts an offload server and client with configs as
// examples/*.yaml: loopback addresses, the sink as service, the software
// engine and c's suite.
func setupOffload(ctx context.Context, dir, sink string, c offloadConfig) (*tunnelUnderTest, toolInfo, error) {
	info := toolInfo{Name: c.name, Version: toolVersion(c.bin, "version")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, info, err
	}
	key := filepath.Join(dir, "offload.key")
	if out, err := exec.CommandContext(ctx, c.bin, "keygen", "-o", key).CombinedOutput(); err != nil {
		return nil, info, fmt.Errorf("offload keygen: %w\n%s", err, out)
	}
	addrs, err := freePorts(2)
	if err != nil {
		return nil, info, err
	}
	srvAddr, fwd := addrs[0], addrs[1]
	// link_buffer caps a link's streams at link_buffer / (window + 256
	// KiB); the memory run needs room for all of its streams at once.
	def := tunnel.DefaultOptions()
	linkBuffer := int64(max(def.LinkBuffer, tunnel.LinkBufferFor(c.streams, def.YamuxWindow)))
	common := fmt.Sprintf("key_file: offload.key\nsuite: %s\nengine: software\nlink_buffer: %d\nlog:\n  level: warn\n", c.suite, linkBuffer)
	how := fmt.Sprintf("link_buffer %d MiB for %d streams, defaults otherwise", linkBuffer>>20, c.streams)
	if c.maxFrame != "" {
		common += "max_frame: " + c.maxFrame + "\n"
		how = "max_frame " + c.maxFrame + ", " + how
	}
	if c.maxProcs != 0 {
		common += fmt.Sprintf("max_procs: %d\n", c.maxProcs)
		how = fmt.Sprintf("max_procs %d, ", c.maxProcs) + how
	}
	srvConf, cliConf := filepath.Join(dir, "server.yaml"), filepath.Join(dir, "client.yaml")
	if err := os.WriteFile(srvConf, []byte(fmt.Sprintf("listen: %s\nservices:\n  sink: %s\n%s", srvAddr, sink, common)), 0o600); err != nil {
		return nil, info, err
	}
	if err := os.WriteFile(cliConf, []byte(fmt.Sprintf("server: %s\nforwards:\n  - listen: %s\n    service: sink\n%s", srvAddr, fwd, common)), 0o600); err != nil {
		return nil, info, err
	}
	info.How = "offload server -c server.yaml; offload client -c client.yaml (" + c.suite + ", engine software, " + how + ")"
	t := &tunnelUnderTest{name: c.name, addr: fwd}
	args := func(end, conf string) []string {
		a := []string{c.bin, end, "-c", conf}
		if c.profileDir != "" {
			f := filepath.Join(c.profileDir, end+".pprof")
			a = append(a, "-cpuprofile", f)
			t.profiles = append(t.profiles, f)
		}
		return a
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return nil, info, err
		}
		info.How += ", -cpuprofile " + c.profileDir + "/{server,client}.pprof"
	}
	s, err := startProc("server", args("server", srvConf)...)
	if err != nil {
		return t, info, err
	}
	t.procs = append(t.procs, s)
	if err := waitListen(ctx, srvAddr, s); err != nil {
		return t, info, err
	}
	cl, err := startProc("client", args("client", cliConf)...)
	if err != nil {
		return t, info, err
	}
	t.procs = append(t.procs, cl)
	return t, info, waitListen(ctx, fwd, cl)
}

// waitListen waits up to 10 s for addr to accept connections, and fails
// early if p exits.
func waitListen(ctx context.Context, addr string, p *proc) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("%s exited (%v) before listening on %s:\n%s", p.Name, p.Cmd.ProcessState, addr, p.Out.String())
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("%s not listening on %s within 10s", p.Name, addr), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
