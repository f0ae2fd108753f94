//go:build !nopprof

package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts a CPU profile into file (nothing when file is
// empty); the returned func stops it and closes the file, reporting a
// failure to stderr. bench profiles its runs; server and client profile
// their whole life, so a comparison can break an end's cost down. The
// router build (internal/buildflags, tag nopprof) leaves runtime/pprof
// out: cpuprofile_nopprof.go.
func startCPUProfile(file string, stderr io.Writer) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "offload: -cpuprofile: %v\n", err)
		}
	}, nil
}
