package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Free ports and child processes, for the end-to-end tests (cmd/offload)
// and the harnesses that run offload and other tools as processes
// (harness/compare, harness/budget, harness/mitm): one way to pick a
// port and to start, watch and stop a process.

// FreeAddr returns host:port for a TCP port on host that was free a
// moment ago. Another process may take it before the caller binds it, so
// the port is drawn at random from below the kernel's ephemeral range
// (ip_local_port_range): a port that listen(:0) or connect hands out
// never lands there, and the tests that run beside it (go test runs
// packages in parallel) open thousands of those. A port from listen(:0)
// came back "address already in use" to a test that bound it a moment
// later. Only another FreeAddr caller can take it now, 1 in thousands.
func FreeAddr(host string) (string, error) {
	lo, hi := staticPorts()
	for i := 0; hi > 0 && i < 64; i++ {
		port := lo + rand.IntN(hi-lo+1)
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			ln.Close()
			return ln.Addr().String(), nil
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// staticPorts is the range FreeAddr draws from: the 8,192 ports below the
// ephemeral range (Linux's default 32768–60999), never under 1024; 0, 0
// when there are none (FreeAddr then takes listen(:0)'s).
func staticPorts() (lo, hi int) {
	first := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				first = v
			}
		}
	}
	hi = first - 1
	lo = max(hi-8191, 1024)
	if hi < lo { // an ephemeral range that starts at the bottom: nothing to draw from
		return 0, 0
	}
	return lo, hi
}

// FreePort is FreeAddr("127.0.0.1") in a test, which it fails on error.
func FreePort(t testing.TB) string {
	t.Helper()
	return FreePortOn(t, "127.0.0.1")
}

// FreePortOn is FreeAddr(host) in a test ("::1" for IPv6 loopback).
func FreePortOn(t testing.TB, host string) string {
	t.Helper()
	a, err := FreeAddr(host)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Proc is a started process with its stdout and stderr in Out.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	Out  *SyncBuffer
	done chan struct{}
	err  error
}

// Start starts cmd with its output going to Out, keeping at most limit
// bytes of it (0: all), and waits for it in the background.
func Start(name string, cmd *exec.Cmd, limit int) (*Proc, error) {
	p := &Proc{Name: name, Cmd: cmd, Out: &SyncBuffer{Limit: limit}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// StartProc starts bin with args for the test: it fails t if the start
// fails, and when the test ends kills the process if it still runs and,
// if the test failed, logs its output.
func StartProc(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p, err := Start(name, exec.Command(bin, args...), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Kill()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", p.Name, p.Out)
		}
	})
	return p
}

// Done is closed once the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is Wait's error, once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// ExitCode is the process's exit code, once Done is closed (-1 if a
// signal ended it).
func (p *Proc) ExitCode() int {
	<-p.done
	return p.Cmd.ProcessState.ExitCode()
}

// Stop sends SIGTERM and waits up to grace for the process to exit; past
// that it kills it and returns false.
func (p *Proc) Stop(grace time.Duration) bool {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}

// Kill kills the process and waits for it to exit.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}
