// Command budget measures what offload costs a router: the size of the
// stripped binary per router target, and the resident memory of a real
// server and client under load.
//
//	go run ./harness/budget size            # fails if a binary is over its budget
//	go run ./harness/budget rss             # idle and loaded RSS, streams x window
//	go run ./harness/budget rss -streams 100 -windows 1MiB -env GOMEMLIMIT=20MiB
//	go run ./harness/budget rss -sink held -streams 1000 -chunk 16384 # 1,000 idle streams
//
// size builds cmd/offload as packaging/build ships it (internal/buildflags:
// -trimpath -tags=nopprof -ldflags='-s -w', no inlining in the cold
// packages) for linux mipsle and mips (softfloat), arm (GOARM=7) and arm64
// and compares each with its budget (6 MiB each; -max sets another for
// all): that is deterministic, so it is asserted. It also prints each binary's size
// compressed with xz -9e, about what a squashfs image stores.
//
// rss builds cmd/offload for this machine, writes a key with "offload
// keygen" and configs made from examples/server.yaml and client.yaml (only
// addresses, services, forwards and the window are changed), starts the
// server and the client as two processes on loopback, and reads VmRSS and
// VmHWM from /proc/PID/status: idle after the link is up, then while N
// connections to the client's forward each push data through the tunnel to
// a sink. RSS depends on load, so it is reported, not asserted, except for
// the -sanity bound. docs/budgets.md has the figures and what they mean.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errOver marks a measured value over its asserted budget.
var errOver = errors.New("over budget")

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: go run ./harness/budget size [flags]
       go run ./harness/budget rss [flags]

Run from the repository root. "budget COMMAND -h" lists a command's flags.
`)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "size":
		err = runSize(ctx, args[1:], stdout, stderr)
	case "rss":
		err = runRSS(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	default:
		usage(stderr)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(stderr, "budget: %v\n", err)
		return 1
	}
}

// errUsage: the flag package has already said what is wrong.
var errUsage = errors.New("usage")
