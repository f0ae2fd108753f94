// Package sysinfo reports facts about the running system that measurements
// are tied to: a profile or a speed table is only meaningful for the kernel
// and CPU features it was taken on.
package sysinfo

import (
	"runtime"
	"time"
)

// Kernel is the OS and kernel release, e.g. "linux 6.1.0-57-amd64".
func Kernel() string {
	if r := kernelRelease(); r != "" {
		return runtime.GOOS + " " + r
	}
	return runtime.GOOS
}

// UserCPU is the user CPU time the whole process has used so far, or false
// where the platform cannot tell.
func UserCPU() (time.Duration, bool) { return userCPU() }
