package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// profile is the CPU profile of one offload end.
type profile struct {
	Tool  string `json:"tool"`
	Suite string `json:"suite"`
	End   string `json:"end"`
	File  string `json:"file"`
	Bytes int64  `json:"bytes"`
	// Top is `go tool pprof -top -nodecount=15 FILE`, or "" where go is
	// not on PATH or pprof failed (TopErr).
	Top    string `json:"top,omitempty"`
	TopErr string `json:"top_error,omitempty"`
}

// stopProfiled stops the ends of an offload pair started with
// -cpuprofile (client first, then server), which writes their profiles at
// exit, and checks that each exited 0 and wrote a profile.
func stopProfiled(ctx context.Context, t *tunnelUnderTest, suite string, log io.Writer) ([]profile, error) {
	var out []profile
	var errs []error
	for i, p := range slices.Backward(t.procs) {
		if err := stopClean(p); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", t.name, p.Name, err))
			continue
		}
		if i >= len(t.profiles) {
			continue
		}
		n, err := checkProfile(t.profiles[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", t.name, p.Name, err))
			continue
		}
		pr := profile{Tool: t.name, Suite: suite, End: p.Name, File: t.profiles[i], Bytes: n}
		fmt.Fprintf(log, "compare: %s %s: CPU profile %s (%d bytes)\n", t.name, p.Name, pr.File, n)
		pr.Top, err = pprofTop(ctx, pr.File)
		if err != nil {
			pr.TopErr = err.Error()
		}
		out = append(out, pr)
	}
	// Server first, as the tables list the ends.
	slices.Reverse(out)
	return out, errors.Join(errs...)
}

// checkProfile returns the size of the profile file, which must exist and
// not be empty.
func checkProfile(file string) (int64, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return 0, fmt.Errorf("CPU profile: %w", err)
	}
	if fi.Size() == 0 {
		return 0, fmt.Errorf("CPU profile %s is empty", file)
	}
	return fi.Size(), nil
}

// pprofTop is the top 15 functions of a profile, if go is on PATH.
func pprofTop(ctx context.Context, file string) (string, error) {
	if _, err := exec.LookPath("go"); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=15", file).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof -top %s: %w", file, err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}
