//go:build nopprof

package main

import (
	"errors"
	"io"
)

// errNoPprof is -cpuprofile's answer in the router build: runtime/pprof
// and its gzip writer are 192 KiB of the MIPS binary, which the packages'
// 6 MiB budget has no room for (docs/budgets.md).
var errNoPprof = errors.New("-cpuprofile: this offload is a router build, without runtime/pprof (tag nopprof, docs/budgets.md); profile a build of go build ./cmd/offload")

// startCPUProfile refuses a profile: see errNoPprof.
func startCPUProfile(file string, _ io.Writer) (stop func(), err error) {
	if file == "" {
		return func() {}, nil
	}
	return nil, errNoPprof
}
