package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// goPkg is one package as go list sees it for the guest's GOOS/GOARCH.
type goPkg struct {
	ImportPath string
	Dir        string
	Name       string
	HasTests   bool
}

// goList expands patterns (./engine, ./..., an import path) for the guest
// target.
func goList(ctx context.Context, env []string, patterns []string) ([]goPkg, error) {
	args := append([]string{"list", "-f",
		"{{.ImportPath}}\t{{.Dir}}\t{{.Name}}\t{{len .TestGoFiles}}\t{{len .XTestGoFiles}}"}, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(patterns, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var pkgs []goPkg
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		pkgs = append(pkgs, goPkg{ImportPath: f[0], Dir: f[1], Name: f[2],
			HasTests: f[3] != "0" || f[4] != "0"})
	}
	return pkgs, nil
}

// guestBinary is a binary built for the guest.
type guestBinary struct {
	Pkg      goPkg
	Name     string // file name in the guest
	HostFile string
	Testdata string // host testdata folder of the package, or ""
}

// uniqueName returns base, or base-2, base-3... if taken.
func uniqueName(base string, taken map[string]bool) string {
	name := base
	for i := 2; taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	taken[name] = true
	return name
}

func goBuild(ctx context.Context, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// buildTests compiles each package's test binary (go test -c) for the
// guest. A package named explicitly must have tests; packages that a
// pattern with "..." matched are skipped when they have none.
func buildTests(ctx context.Context, a *archSpec, patterns []string, outDir string, logf func(string, ...any)) ([]guestBinary, error) {
	env := a.goEnv()
	taken := map[string]bool{}
	seen := map[string]bool{}
	var bins []guestBinary
	claim := func(pat, name string) error {
		if taken[name] {
			return fmt.Errorf("-bin %s: two commands would be /bin/%s", pat, name)
		}
		taken[name] = true
		return nil
	}
	for _, pat := range patterns {
		// A file is a binary built elsewhere (another branch's tree, say),
		// copied in as it is.
		if fi, err := os.Stat(pat); err == nil && fi.Mode().IsRegular() {
			if err := claim(pat, filepath.Base(pat)); err != nil {
				return nil, err
			}
			bins = append(bins, guestBinary{Name: filepath.Base(pat), HostFile: pat})
			continue
		}
		pkgs, err := goList(ctx, env, []string{pat})
		if err != nil {
			return nil, fmt.Errorf("-test: %w", err)
		}
		for _, p := range pkgs {
			if seen[p.ImportPath] {
				continue
			}
			seen[p.ImportPath] = true
			if !p.HasTests {
				if !strings.Contains(pat, "...") {
					return nil, fmt.Errorf("-test %s: package %s has no test files", pat, p.ImportPath)
				}
				continue
			}
			name := uniqueName(path.Base(p.ImportPath), taken)
			out := filepath.Join(outDir, name+".test")
			logf("building test binary %s for %s", p.ImportPath, a.Name)
			if err := goBuild(ctx, env, "test", "-c", "-o", out, p.ImportPath); err != nil {
				return nil, fmt.Errorf("-test %s: %w", pat, err)
			}
			b := guestBinary{Pkg: p, Name: name, HostFile: out}
			if fi, err := os.Stat(filepath.Join(p.Dir, "testdata")); err == nil && fi.IsDir() {
				b.Testdata = filepath.Join(p.Dir, "testdata")
			}
			bins = append(bins, b)
		}
	}
	if len(bins) == 0 && len(patterns) > 0 {
		return nil, fmt.Errorf("-test %s: no package with tests", strings.Join(patterns, " "))
	}
	return bins, nil
}

// buildBins compiles each main package statically for the guest; the
// binary goes to /bin/<last element of the import path>.
func buildBins(ctx context.Context, a *archSpec, patterns []string, outDir string, logf func(string, ...any)) ([]guestBinary, error) {
	env := a.goEnv()
	taken := map[string]bool{}
	var bins []guestBinary
	claim := func(pat, name string) error {
		if taken[name] {
			return fmt.Errorf("-bin %s: two commands would be /bin/%s", pat, name)
		}
		taken[name] = true
		return nil
	}
	for _, pat := range patterns {
		// A file is a binary built elsewhere (another branch's tree, say),
		// copied in as it is.
		if fi, err := os.Stat(pat); err == nil && fi.Mode().IsRegular() {
			if err := claim(pat, filepath.Base(pat)); err != nil {
				return nil, err
			}
			bins = append(bins, guestBinary{Name: filepath.Base(pat), HostFile: pat})
			continue
		}
		pkgs, err := goList(ctx, env, []string{pat})
		if err != nil {
			return nil, fmt.Errorf("-bin: %w", err)
		}
		for _, p := range pkgs {
			if p.Name != "main" {
				if !strings.Contains(pat, "...") {
					return nil, fmt.Errorf("-bin %s: %s is package %s, not a command", pat, p.ImportPath, p.Name)
				}
				continue
			}
			name := path.Base(p.ImportPath)
			if err := claim(pat, name); err != nil {
				return nil, err
			}
			out := filepath.Join(outDir, name)
			logf("building %s for %s", p.ImportPath, a.Name)
			if err := goBuild(ctx, env, "build", "-o", out, p.ImportPath); err != nil {
				return nil, fmt.Errorf("-bin %s: %w", pat, err)
			}
			bins = append(bins, guestBinary{Pkg: p, Name: name, HostFile: out})
		}
	}
	return bins, nil
}
