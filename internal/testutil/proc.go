package testutil

import (
	"fmt"
	"net"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Free ports and child processes, for the end-to-end tests (cmd/offload)
// and the harnesses that run offload and other tools as processes
// (harness/compare, harness/budget, harness/mitm): one way to pick a
// port and to start, watch and stop a process.

// FreeAddr returns host:port for a TCP port on host that was free a
// moment ago (it listens on port 0 and closes). Another process may take
// it before the caller binds it; on loopback in a test that is rare
// enough, and the caller's bind then fails loudly.
func FreeAddr(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
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
