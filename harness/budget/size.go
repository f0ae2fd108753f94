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
	"strconv"
	"strings"

	"github.com/offload-dev/offload/internal/benchmethod"
)

// sizeTarget is one router target of the size budget.
type sizeTarget struct {
	Name string   // as printed, e.g. linux/mipsle
	Env  []string // GOOS, GOARCH and GOMIPS/GOARM
}

var sizeTargets = []sizeTarget{
	{"linux/mipsle softfloat", []string{"GOOS=linux", "GOARCH=mipsle", "GOMIPS=softfloat"}},
	{"linux/mips softfloat", []string{"GOOS=linux", "GOARCH=mips", "GOMIPS=softfloat"}},
	{"linux/arm GOARM=7", []string{"GOOS=linux", "GOARCH=arm", "GOARM=7"}},
	{"linux/arm64", []string{"GOOS=linux", "GOARCH=arm64"}},
}

// stripFlags are the build flags of a router binary (docs/routers.md).
var stripFlags = []string{"-trimpath", "-ldflags=-s -w"}

func runSize(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("size", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxFlag := fs.String("max", "8MiB", "budget per stripped binary; a bigger one fails")
	pkg := fs.String("pkg", "./cmd/offload", "command package to build")
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		if err == nil {
			fmt.Fprintf(stderr, "size: unexpected arguments %q\n", fs.Args())
		}
		return errUsage
	}
	budget, err := parseBytes(*maxFlag)
	if err != nil {
		return fmt.Errorf("-max: %w", err)
	}
	dir, err := os.MkdirTemp("", "offload-budget-size-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(stdout, "stripped size of %s (CGO_ENABLED=0 go build %s), budget %s MiB\n\n", *pkg, strings.Join(quoteArgs(stripFlags), " "), mib(budget))
	table := benchmethod.Table{Columns: []benchmethod.Column{{Title: "target"}, {Title: "bytes", Right: true}, {Title: "MiB", Right: true}, {Title: "of budget", Right: true}}}
	if err := table.WriteMarkdownHeader(stdout); err != nil {
		return fmt.Errorf("size table: %w", err)
	}
	var over []string
	for _, t := range sizeTargets {
		out := filepath.Join(dir, strings.NewReplacer("/", "-", " ", "-", "=", "").Replace(t.Name))
		if err := goBuild(ctx, out, *pkg, t.Env, stderr); err != nil {
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		st, err := os.Stat(out)
		if err != nil {
			return err
		}
		n := st.Size()
		if err := benchmethod.WriteMarkdownRow(stdout, t.Name, strconv.FormatInt(n, 10), mib(n), fmt.Sprintf("%.0f%%", 100*float64(n)/float64(budget))); err != nil {
			return fmt.Errorf("size table: %w", err)
		}
		if n > budget {
			over = append(over, fmt.Sprintf("%s is %s MiB", t.Name, mib(n)))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("%w: %s (budget %s MiB)", errOver, strings.Join(over, ", "), mib(budget))
	}
	return nil
}

// goBuild builds a stripped static binary of pkg for env into out.
func goBuild(ctx context.Context, out, pkg string, env []string, stderr io.Writer) error {
	args := append([]string{"build", "-o", out}, stripFlags...)
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Env = append(append(os.Environ(), "CGO_ENABLED=0"), env...)
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

// quoteArgs quotes arguments with spaces, for printing a command line.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t") {
			if k, v, ok := strings.Cut(a, "="); ok {
				a = k + "='" + v + "'"
			} else {
				a = "'" + a + "'"
			}
		}
		out[i] = a
	}
	return out
}
