package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

const qbootROM = "/usr/share/qemu/qboot.rom"

// vmConfig is one qemu invocation.
type vmConfig struct {
	Arch         *archSpec
	SMP          int
	MemMB        int
	Kernel       *kernel
	Initrd       string
	VirtioCrypto bool
	KernelArgs   string   // appended to the kernel command line (-kernel-args)
	Extra        []string // appended to qemu's command line (-qemu-arg)
}

// qemuArgs returns the qemu command line (without the binary). The console
// is the first serial port on stdio; -no-reboot turns poweroff and panics
// into a qemu exit.
func qemuArgs(c vmConfig) []string {
	a := c.Arch
	args := append([]string{}, a.Machine...)
	args = append(args,
		"-smp", strconv.Itoa(c.SMP), "-m", strconv.Itoa(c.MemMB),
		"-no-reboot", "-nodefaults", "-display", "none", "-serial", "stdio",
		// Named threads ("CPU 0/TCG"), so that spans can tell the guest's
		// CPU from qemu's other threads (device emulation, I/O).
		"-name", "offload-vm,debug-threads=on")
	if c.Kernel.Vmlinux != "" {
		args = append(args, "-bios", qbootROM, "-kernel", c.Kernel.Vmlinux)
	} else {
		args = append(args, "-kernel", c.Kernel.Image)
	}
	args = append(args, "-initrd", c.Initrd,
		"-append", strings.TrimSpace("console="+a.Console+" quiet panic=-1 random.trust_cpu=on "+c.KernelArgs))
	if c.VirtioCrypto {
		args = append(args,
			"-object", "cryptodev-backend-builtin,id=cryptodev0",
			"-device", a.VirtioDevice+",id=crypto0,cryptodev=cryptodev0")
		args = append(args, a.VirtioArgs...)
	}
	args = append(args, a.ExtraQEMUArgs...)
	return append(args, c.Extra...)
}

// errTimeout is returned when the VM had to be killed.
var errTimeout = errors.New("VM timed out and was killed")

// consoleSink receives the guest console, line by line.
type consoleSink struct {
	Stream io.Writer // where lines are echoed, or nil
	Prefix string
	Log    io.Writer // the whole console, or nil
	Report *report
	PID    int // qemu's, once it runs
}

func (s *consoleSink) line(l string) {
	l = strings.TrimRight(l, "\r\n")
	l = strings.ReplaceAll(l, "\r", "")
	if s.Log != nil {
		fmt.Fprintln(s.Log, l)
	}
	// A fetched file's base64 lines go to the log only.
	quiet := s.Report.capturing()
	s.Report.feed(l)
	if s.Stream != nil && (!quiet || !s.Report.capturing()) {
		fmt.Fprintln(s.Stream, s.Prefix+l)
	}
}

// runQEMU runs qemu until it exits or timeout passes, feeding every console
// line to sink. qemu's own stderr goes to stderr and the log.
func runQEMU(ctx context.Context, bin string, args []string, timeout time.Duration, sink *consoleSink, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = nil // /dev/null: qemu must not put a terminal into raw mode
	cmd.WaitDelay = 5 * time.Second
	errw := stderr
	if sink.Log != nil {
		errw = io.MultiWriter(stderr, sink.Log)
	}
	cmd.Stderr = errw
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	pid := cmd.Process.Pid
	sink.PID = pid
	sink.Report.sample = func() cpuSample {
		at := cpuSample{Wall: time.Now()}
		if c, err := qemuCPU(pid); err == nil {
			at.CPU, at.CPUOK = c, true
		}
		if c, err := vcpuCPU(pid); err == nil {
			at.VCPU, at.VCPUOK = c, true
		}
		return at
	}
	r := bufio.NewReaderSize(out, 64<<10)
	for {
		l, err := r.ReadString('\n')
		if l != "" {
			sink.line(l)
		}
		if err != nil {
			break
		}
	}
	err = cmd.Wait()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w after %v", errTimeout, timeout)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("qemu: %w", ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	return nil
}

// lookQEMU finds the qemu binary or says which package brings it.
func lookQEMU(a *archSpec) (string, error) {
	p, err := exec.LookPath(a.QEMU)
	if err != nil {
		return "", fmt.Errorf("%s not found: install %s (bash scripts/deps.sh)", a.QEMU, a.QEMUPkg)
	}
	return p, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
