package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/internal/buildflags"
	"github.com/offload-dev/offload/measure/method"
)

// sizeTarget is one router target of the size budget.
type sizeTarget struct {
	Name   string   // as printed, e.g. linux/mipsle
	Env    []string // GOOS, GOARCH and GOMIPS/GOARM
	Budget int64    // bytes of the stripped binary; bigger fails
}

// sizeTargets and their budgets (docs/budgets.md, "Binary size"): the
// 6 MiB the routers' flash asks for, on every target. MIPS code is about
// 15 % bigger than ARM's; the router build (internal/buildflags: no
// inlining in cold packages, no pprof) and config/yamlite bring it under.
var sizeTargets = []sizeTarget{
	{"linux/mipsle softfloat", []string{"GOOS=linux", "GOARCH=mipsle", "GOMIPS=softfloat"}, 6 << 20},
	{"linux/mips softfloat", []string{"GOOS=linux", "GOARCH=mips", "GOMIPS=softfloat"}, 6 << 20},
	{"linux/arm GOARM=7", []string{"GOOS=linux", "GOARCH=arm", "GOARM=7"}, 6 << 20},
	{"linux/arm64", []string{"GOOS=linux", "GOARCH=arm64"}, 6 << 20},
}

// xzArgs compress as OpenWrt's squashfs does (xz, its strongest preset),
// the whole file in one stream: squashfs compresses 256 KiB blocks apart,
// so what the image stores is a little more (docs/budgets.md).
var xzArgs = []string{"-9e", "-T1", "-c"}

func runSize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("size", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxFlag := fs.String("max", "", "budget for every stripped binary, instead of each target's own")
	pkg := fs.String("pkg", "./cmd/offload", "command package to build")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "size: unexpected arguments %q\n", fs.Args())
		}
		return errUsage
	}
	targets := slices.Clone(sizeTargets)
	if *maxFlag != "" {
		budget, err := parseBytes(*maxFlag)
		if err != nil {
			return fmt.Errorf("-max: %w", err)
		}
		for i := range targets {
			targets[i].Budget = budget
		}
	}
	if _, err := exec.LookPath("xz"); err != nil {
		return fmt.Errorf("xz (the compressed size column; scripts/deps.sh installs xz-utils): %w", err)
	}
	dir, err := os.MkdirTemp("", "offload-budget-size-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(stdout, "stripped size of %s as packaging/build ships it (CGO_ENABLED=0 %s), and compressed with xz %s (what squashfs stores, near enough)\n\n", *pkg, buildflags.Command("", "BIN", *pkg), strings.Join(xzArgs[:2], " "))
	table := method.Table{Columns: []method.Column{{Title: "target"}, {Title: "bytes", Right: true}, {Title: "MiB", Right: true}, {Title: "budget MiB", Right: true}, {Title: "of budget", Right: true}, {Title: "xz bytes", Right: true}, {Title: "xz MiB", Right: true}}}
	if err := table.WriteMarkdownHeader(stdout); err != nil {
		return fmt.Errorf("size table: %w", err)
	}
	var over []string
	for _, t := range targets {
		out := filepath.Join(dir, strings.NewReplacer("/", "-", " ", "-", "=", "").Replace(t.Name))
		if err := goBuild(ctx, out, *pkg, t.Env, stderr); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		st, err := os.Stat(out)
		if err != nil {
			return err
		}
		n := st.Size()
		xzN, err := xzSize(ctx, out)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		if err := method.WriteMarkdownRow(stdout, t.Name, strconv.FormatInt(n, 10), mib(n), mib(t.Budget), fmt.Sprintf("%.0f%%", 100*float64(n)/float64(t.Budget)), strconv.FormatInt(xzN, 10), mib(xzN)); err != nil {
			return fmt.Errorf("size table: %w", err)
		}
		if n > t.Budget {
			over = append(over, fmt.Sprintf("%s is %s MiB, budget %s MiB", t.Name, mib(n), mib(t.Budget)))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("%w: %s", errOver, strings.Join(over, ", "))
	}
	return nil
}

// xzSize returns the size of path compressed with xz xzArgs.
func xzSize(ctx context.Context, path string) (int64, error) {
	cmd := exec.CommandContext(ctx, "xz", append(slices.Clone(xzArgs), path)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("xz: %w", err)
	}
	n, copyErr := io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return 0, fmt.Errorf("xz %s: %w: %s", strings.Join(cmd.Args[1:], " "), err, strings.TrimSpace(stderr.String()))
	}
	if copyErr != nil {
		return 0, fmt.Errorf("xz output: %w", copyErr)
	}
	return n, nil
}

// goBuild builds a stripped static binary of pkg for env into out.
func goBuild(ctx context.Context, out, pkg string, env []string, stderr io.Writer) error {
	cmd := goBuildCmd(ctx, out, pkg, env)
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("go %s: %w", strings.Join(cmd.Args[1:], " "), err)
		}
		return err
	}
	return nil
}

// goBuildCmd is goBuild's command: the router build of internal/buildflags,
// the one packaging/build ships, without its version stamp (a git describe:
// some 30 bytes).
func goBuildCmd(ctx context.Context, out, pkg string, env []string) *exec.Cmd {
	args := append(append([]string{"build"}, buildflags.Args("")...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
	return cmd
}
