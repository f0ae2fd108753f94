//go:build unix

package speed

import (
	"syscall"
	"time"
)

// usage is the process's CPU times and context switches so far.
type usage struct {
	user, sys time.Duration
	switches  int64
}

func readUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{
		user:     time.Duration(ru.Utime.Nano()),
		sys:      time.Duration(ru.Stime.Nano()),
		switches: int64(ru.Nvcsw) + int64(ru.Nivcsw),
	}
}
