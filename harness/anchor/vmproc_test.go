package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeQEMUEnv makes the test binary a process that waits for good: a
// qemu its harness/vm left behind.
const fakeQEMUEnv = "ANCHOR_TEST_FAKE_QEMU"

func TestMain(m *testing.M) {
	if os.Getenv(fakeQEMUEnv) == "1" {
		time.Sleep(time.Hour)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// watchdog is how long a test lets a wait run that an event should have
// ended at once: only a hang reaches it.
const watchdog = 2 * time.Minute

// fakeRouter is one router as the host sees it: an agent on loopback
// that answers every request but quit with {"ok":true}, and a harness/vm
// that exits with exitErr when the agent exits. With lose, the agent's
// answer to quit never leaves (the guest powered off under it, run a4):
// the agent exits without answering and its connection stays open, as a
// guest that is gone leaves it.
type fakeRouter struct {
	ctl  *control
	vm   *vmProc
	exit chan struct{}
	got  chan string // the ops the agent received
}

func newFakeRouter(t *testing.T, name string, lose bool, exitErr error) *fakeRouter {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &fakeRouter{exit: make(chan struct{}), got: make(chan string, 100)}
	accepted := make(chan net.Conn, 1)
	t.Cleanup(func() {
		select {
		case c := <-accepted:
			c.Close()
		default:
		}
	})
	f.vm = watchVM("router "+name+"'s harness/vm", func() error { <-f.exit; return exitErr }, func(os.Signal) error { return nil })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		accepted <- c
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				return
			}
			var req request
			_ = json.Unmarshal(line, &req)
			f.got <- req.Op
			if req.Op == "quit" {
				if !lose {
					_, _ = c.Write([]byte(`{"ok":true}` + "\n"))
					_, _ = io.Copy(io.Discard, r) // until the host closes
				}
				close(f.exit) // powered off; the connection is left as it is
				return
			}
			if req.Op == "hang" {
				continue // a request the agent never answers
			}
			_, _ = c.Write([]byte(`{"ok":true}` + "\n"))
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f.ctl = newControl(name, c)
	t.Cleanup(f.ctl.close)
	return f
}

func fakeRig(t *testing.T, ctx context.Context, a, b *fakeRouter) (*routersRig, context.Context) {
	r := &routersRig{logf: t.Logf}
	ctx, r.cancel = context.WithCancelCause(ctx)
	t.Cleanup(func() { r.cancel(nil) })
	for i, f := range []*fakeRouter{a, b} {
		r.vms[i] = f.vm
		go r.watch(f.vm)
		r.attach(ctx, i, f.ctl)
	}
	return r, ctx
}

// result waits for a function's error, failing the test if only the
// watchdog ends the wait.
func result(t *testing.T, what string, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(watchdog):
		t.Fatalf("%s still waits %v after the event that should have ended it (run a4's hang)", what, watchdog)
		return nil
	}
}

// Run a4 of 2026-12-07: router B's agent took the quit and powered off,
// its answer lost; the host waited on the connection (10 min) although
// both harness/vm had exited. A clean exit after the quit is a clean stop,
// answered or not; an exit with an error is the boot's failure.
func TestShutdownQuitAnswerLost(t *testing.T) {
	a, b := newFakeRouter(t, "A", false, nil), newFakeRouter(t, "B", true, nil)
	r, ctx := fakeRig(t, context.Background(), a, b)
	errc := make(chan error, 1)
	go func() { errc <- r.shutdown(ctx) }()
	if err := result(t, "shutdown", errc); err != nil {
		t.Fatalf("shutdown: %v, want a clean stop", err)
	}
	if ctx.Err() != nil {
		t.Errorf("the expected exits ended the boot: %v", context.Cause(ctx))
	}

	a, b = newFakeRouter(t, "A", false, nil), newFakeRouter(t, "B", true, errors.New("exit status 1"))
	r, ctx = fakeRig(t, context.Background(), a, b)
	go func() { errc <- r.shutdown(ctx) }()
	err := result(t, "shutdown", errc)
	if err == nil || !strings.Contains(err.Error(), "router B's harness/vm exited: exit status 1") {
		t.Fatalf("shutdown with B's harness/vm failing: %v, want its exit named", err)
	}
}

// A request waiting on an agent ends as soon as its harness/vm exits,
// naming that exit; the unexpected exit ends the boot's context too, and
// the other router's requests with it.
func TestRequestEndsWhenVMExits(t *testing.T) {
	a, b := newFakeRouter(t, "A", false, nil), newFakeRouter(t, "B", false, nil)
	r, ctx := fakeRig(t, context.Background(), a, b)
	if _, err := r.ctl[1].do(request{Op: "clock"}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 2)
	go func() {
		_, err := r.ctl[1].do(request{Op: "hang"})
		errc <- err
	}()
	go func() {
		_, err := r.ctl[0].do(request{Op: "hang"})
		errc <- err
	}()
	for _, op := range []string{<-b.got, <-b.got, <-a.got} { // clock, hang; hang
		t.Log("agent got", op)
	}
	close(b.exit) // B's harness/vm exits (status 0, but unasked)
	for range 2 {
		err := result(t, "a request to a router", errc)
		if err == nil || !strings.Contains(err.Error(), "router B's harness/vm exited") {
			t.Errorf("request: %v, want B's exit named", err)
		}
	}
	if !strings.Contains(fmt.Sprint(context.Cause(ctx)), "router B's harness/vm exited") {
		t.Errorf("the boot's context: %v, want it ended by B's exit", context.Cause(ctx))
	}
}

// An interrupt (the command's context) ends a request at once and says so.
func TestRequestEndsOnInterrupt(t *testing.T) {
	ctx, interrupt := context.WithCancelCause(context.Background())
	a, b := newFakeRouter(t, "A", false, nil), newFakeRouter(t, "B", false, nil)
	r, _ := fakeRig(t, ctx, a, b)
	errc := make(chan error, 1)
	go func() {
		_, err := r.ctl[0].do(request{Op: "hang"})
		errc <- err
	}()
	<-a.got
	interrupt(errors.New("interrupt"))
	if err := result(t, "a request", errc); err == nil || !strings.Contains(err.Error(), "interrupt") {
		t.Errorf("request: %v, want the interrupt named", err)
	}
}

// A boot that fails (here interrupted) still leaves its spans and the
// table of what was measured, headed INCOMPLETE; the command fails and
// no later boot starts.
func TestPoolBootsPrintsWhatItHas(t *testing.T) {
	dir := t.TempDir()
	o := &options{boots: 3, rounds: 1, mib: 1}
	var booted []int
	boot := func(ctx context.Context, b int) ([]routerRun, error) {
		booted = append(booted, b)
		runs := []routerRun{run2(b, "wireguard", 0.1, 0.1, 1, 1), run2(b, "relay", 0.05, 0.05, 1, 1)}
		if b == 1 {
			return runs[:1], errors.New("relay (round 1): interrupt")
		}
		return runs, nil
	}
	var out bytes.Buffer
	err := poolBoots(context.Background(), o, dir, boot, &out)
	if err == nil || !strings.Contains(err.Error(), "boot 2: relay (round 1): interrupt") {
		t.Errorf("poolBoots: %v, want boot 2's failure", err)
	}
	if len(booted) != 2 {
		t.Errorf("booted %v, want boots 1 and 2 only", booted)
	}
	s := out.String()
	for _, want := range []string{"INCOMPLETE: boot 2: relay (round 1): interrupt; the table is over the 3 run(s) of 2 boot(s)", "| kernel WireGuard", "| 2 | "} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	for b := 1; b <= 2; b++ {
		runs, err := readRouterSpans(filepath.Join(dir, fmt.Sprintf("routers2-spans-%d.jsonl", b)), b-1)
		if err != nil || len(runs) != 3-b {
			t.Errorf("boot %d's spans: %d runs, %v", b, len(runs), err)
		}
	}
}

// A qemu its harness/vm left (a killed harness/vm) is killed by its pid
// file; a pid file naming a process that is not that qemu is left alone.
func TestKillQEMU(t *testing.T) {
	dir := t.TempDir()
	start := func(arg string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], arg)
		cmd.Env = append(os.Environ(), fakeQEMUEnv+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd
	}
	pidfile := filepath.Join(dir, "qemu-A-1.pid")
	qemu := start(pidfile)
	other := start("-not-the-pidfile")
	for !runsWith(qemu.Process.Pid, pidfile) {
		time.Sleep(10 * time.Millisecond) // until it has exec'd
	}

	// A pid file naming another process: nothing is killed.
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := killQEMU(pidfile, watchdog); err != nil {
		t.Errorf("killQEMU of a pid that is not the qemu: %v", err)
	}
	if !runsWith(other.Process.Pid, "-not-the-pidfile") {
		t.Fatal("killQEMU killed a process its pid file names but that is not the qemu")
	}

	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(qemu.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := killQEMU(pidfile, watchdog)
	if err == nil || !strings.Contains(err.Error(), "outlived its harness/vm: killed") {
		t.Errorf("killQEMU: %v, want it to say it killed the qemu", err)
	}
	werr := qemu.Wait()
	var exit *exec.ExitError
	if !errors.As(werr, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("the left qemu ended with %v, want SIGKILL", werr)
	}
	if err := killQEMU(filepath.Join(dir, "none.pid"), watchdog); err != nil {
		t.Errorf("killQEMU without a pid file: %v", err)
	}
}
