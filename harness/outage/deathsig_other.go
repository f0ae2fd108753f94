//go:build !linux

package main

import "os/exec"

// dieWithHarness: elsewhere than Linux there is no Pdeathsig; the harness's
// own clean-up stops the ends (the namespace rig needs Linux anyway, -proxy
// does not).
func dieWithHarness(*exec.Cmd) {}
