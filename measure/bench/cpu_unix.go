//go:build unix

package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

func processCPU() (CPUTime, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return CPUTime{}, false
	}
	return CPUTime{User: time.Duration(ru.Utime.Nano()), System: time.Duration(ru.Stime.Nano())}, true
}
