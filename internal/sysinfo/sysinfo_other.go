//go:build !unix

package sysinfo

import "time"

func kernelRelease() string { return "" }

func userCPU() (time.Duration, bool) { return 0, false }
