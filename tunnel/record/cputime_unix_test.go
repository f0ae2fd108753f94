//go:build unix

package record

import (
	"syscall"
	"time"
)

// cpuTime is the process's user and system CPU time so far: what a
// benchmark on a shared machine compares, where wall time depends on the
// neighbours.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
