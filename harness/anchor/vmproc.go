package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// vmProc is one router's harness/vm child. Its exit is an event that every
// wait of the rig selects on: done is closed, never sent on, so any number
// of waiters see it, before or after it happens (run a4 of 2026-12-07
// waited 10 min for an answer from a router that had powered off, because
// nothing but the request's own deadline ended that wait).
type vmProc struct {
	name    string // "router A's harness/vm", for errors
	done    chan struct{}
	err     error // Wait's result; read only after done is closed
	signal  func(os.Signal) error
	pidfile string // qemu's -pidfile: the qemu to kill if harness/vm leaves it
}

// startVM starts cmd and watches it.
func startVM(name string, cmd *exec.Cmd, pidfile string) (*vmProc, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	v := watchVM(name, cmd.Wait, cmd.Process.Signal)
	v.pidfile = pidfile
	return v, nil
}

// watchVM makes a vmProc of a process that wait waits for and signal
// signals.
func watchVM(name string, wait func() error, signal func(os.Signal) error) *vmProc {
	v := &vmProc{name: name, done: make(chan struct{}), signal: signal}
	go func() {
		v.err = wait()
		close(v.done)
	}()
	return v
}

// exited says whether harness/vm has exited, and how.
func (v *vmProc) exited() (bool, error) {
	select {
	case <-v.done:
		return true, v.err
	default:
		return false, nil
	}
}

// exitError is what a wait that the exit ended reports.
func (v *vmProc) exitError() error {
	if v.err == nil {
		return fmt.Errorf("%s exited (status 0)", v.name)
	}
	return fmt.Errorf("%s exited: %w (its output above says why)", v.name, v.err)
}

// stop ends harness/vm if it still runs: an interrupt (it stops its qemu
// and exits), a kill after grace; then it kills the qemu a killed
// harness/vm left behind. Every wait in it is bounded.
func (v *vmProc) stop(grace time.Duration, logf func(string, ...any)) {
	if ok, _ := v.exited(); !ok {
		_ = v.signal(os.Interrupt)
		select {
		case <-v.done:
		case <-time.After(grace):
			logf("%s did not exit within %v of an interrupt: killed", v.name, grace)
			_ = v.signal(os.Kill)
			select {
			case <-v.done:
			case <-time.After(grace):
				logf("%s: still not reaped %v after a kill", v.name, grace)
			}
		}
	}
	if v.pidfile != "" {
		if err := killQEMU(v.pidfile, grace); err != nil {
			logf("%s: %v", v.name, err)
		}
	}
}

// killQEMU kills the process pidfile names if it is still the qemu that
// wrote it (its command line names pidfile: a pid reused since is left
// alone), and waits up to grace for it to go.
func killQEMU(pidfile string, grace time.Duration) error {
	b, err := os.ReadFile(pidfile)
	if err != nil {
		return nil // qemu never started, or exited and removed it
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil
	}
	if !runsWith(pid, pidfile) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("qemu %d left running: kill: %w", pid, err)
	}
	for deadline := time.Now().Add(grace); runsWith(pid, pidfile); {
		if time.Now().After(deadline) {
			return fmt.Errorf("qemu %d left running: still there %v after a kill", pid, grace)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("qemu %d outlived its harness/vm: killed", pid)
}

// runsWith says whether process pid is alive (not a zombie) with arg among
// its arguments.
func runsWith(pid int, arg string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, a := range bytes.Split(cmdline, []byte{0}) {
		if string(a) == arg {
			return true
		}
	}
	return false
}
