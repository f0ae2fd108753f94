package main

import (
	"os/exec"
	"syscall"
)

// dieWithHarness has the kernel kill cmd if the thread that started it
// exits (Pdeathsig is Linux's): a killed harness leaves no end running.
func dieWithHarness(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
