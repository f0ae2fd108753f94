package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/offload-dev/offload/internal/buildflags"
)

// target is one OpenWrt package architecture and the Go build for it.
type target struct {
	Arch   string   // OpenWrt's name (opkg's Architecture, apk's arch)
	GOARCH string   // GOOS is linux
	Env    []string // GOMIPS, GOARM
}

// targets are the OpenWrt architectures offload ships for: MT7621 and
// other MIPS32 routers (little and big endian, no FPU), Cortex-A7 boards,
// 64-bit ARM and x86_64 (also what CI installs on this machine).
var targets = []target{
	{"mipsel_24kc", "mipsle", []string{"GOMIPS=softfloat"}},
	{"mips_24kc", "mips", []string{"GOMIPS=softfloat"}},
	{"arm_cortex-a7_neon-vfpv4", "arm", []string{"GOARM=7"}},
	{"aarch64_cortex-a53", "arm64", nil},
	{"x86_64", "amd64", nil},
}

const (
	pkgName = "offload"
	// pkgRelease is OpenWrt's PKG_RELEASE: a new packaging of the same
	// source raises it.
	pkgRelease = 1
	license    = "Apache-2.0"
	// maintainer is the project's maintainers as its commits name them.
	maintainer = "offload maintainers <maintainers@users.noreply.a-seed-3a346ff6.example>"
	homepage   = "https://github.com/offload-dev/offload"
	// filesDir holds the files the packages install (and the feed
	// Makefile installs from the source tarball): one source for both.
	filesDir = "packaging/openwrt/offload/files"
)

type options struct {
	out     string
	arches  []target
	version string // overrides git describe (and the package version)
	formats map[string]bool
	source  bool
	luci    bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: go run ./packaging/build [-o dist] [-arch LIST] [-format ipk,apk] [-version V]

Builds offload's OpenWrt packages (.ipk for 24.10's opkg, .apk for 25.12's
apk-tools v3) for each target from this tree, and the feed package's source
tarball and Makefile. Run from the repository. Flags:
`)
		fs.PrintDefaults()
	}
	o := &options{}
	var arch, format string
	fs.StringVar(&o.out, "o", "dist", "output `DIR`")
	fs.StringVar(&arch, "arch", "all", "comma-separated OpenWrt `ARCHES`: "+archNames()+" (all: every one)")
	fs.StringVar(&format, "format", "ipk,apk", "package `FORMATS`: ipk, apk")
	fs.StringVar(&o.version, "version", "", "the package `VERSION` (apk syntax, e.g. 1.2.0-r1) and the version stamped in the binary, instead of the tree's git describe")
	fs.BoolVar(&o.source, "source", true, "also write the source tarball and the feed Makefile")
	fs.BoolVar(&o.luci, "luci", true, "also write luci-app-offload (all/ and noarch/)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return nil, errors.New("unexpected arguments")
	}
	o.formats = map[string]bool{}
	for _, f := range strings.Split(format, ",") {
		if f != "ipk" && f != "apk" {
			fmt.Fprintf(stderr, "build: -format: %q is not ipk or apk\n", f)
			return nil, errors.New("bad -format")
		}
		o.formats[f] = true
	}
	for _, a := range strings.Split(arch, ",") {
		found := false
		for _, t := range targets {
			if a == "all" || a == t.Arch {
				o.arches = append(o.arches, t)
				found = true
			}
		}
		if !found {
			fmt.Fprintf(stderr, "build: -arch: unknown %q (want %s)\n", a, archNames())
			return nil, errors.New("bad -arch")
		}
	}
	if o.version != "" && !apkVersion.MatchString(o.version) {
		fmt.Fprintf(stderr, "build: -version %q: want a version apk and opkg both order, such as 1.2.0-r1 or 0_git20261207~abc123-r2\n", o.version)
		return nil, errors.New("bad -version")
	}
	return o, nil
}

func archNames() string {
	var n []string
	for _, t := range targets {
		n = append(n, t.Arch)
	}
	return strings.Join(n, ", ")
}

// tree is what the packages say about the source they come from.
type tree struct {
	Root     string
	Describe string    // git describe --tags --always --dirty: the binary's version
	Time     time.Time // the commit's time: every archive entry's mtime
	Version  string    // the package version, apk's syntax (opkg orders it alike)
}

// apkVersion is apk-tools' version syntax (digits{.digits}{letter}
// {_suffix{N}}{~hash}{-rN}), which opkg orders the same way.
var apkVersion = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*[a-z]?(_(alpha|beta|pre|rc|cvs|svn|git|hg|p)[0-9]*)*(~[0-9a-f]+)?(-r[0-9]+)?$`)

// longRE is git describe --tags --long --always: the nearest tag, the
// commits since and the commit ("v1.2.0-5-gabc123"), or, with no tag, the
// commit alone (which may be all digits); -dirty for changes.
var (
	longRE   = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]+)(-dirty)?$`)
	commitRE = regexp.MustCompile(`^([0-9a-f]+)(-dirty)?$`)
	tagRE    = regexp.MustCompile(`^v?([0-9]+(?:\.[0-9]+)*)$`)
)

// packageVersion turns git describe --long into a package version: the
// tag v1.2.0 is 1.2.0-r1, 5 commits later 1.2.0_p5~HASH-r1; before the
// first tag (or after a tag that is no version) 0_gitDATETIME~HASH-r1,
// the commit's UTC time, so later commits order higher, as OpenWrt's
// PKG_SOURCE_DATE versions do.
func packageVersion(long string, commitTime time.Time) (string, error) {
	rel := "-r" + strconv.Itoa(pkgRelease)
	hash := ""
	if m := longRE.FindStringSubmatch(long); m != nil {
		if t := tagRE.FindStringSubmatch(m[1]); t != nil {
			if m[2] == "0" {
				return t[1] + rel, nil
			}
			return t[1] + "_p" + m[2] + "~" + m[3] + rel, nil
		}
		hash = m[3]
	} else if m := commitRE.FindStringSubmatch(long); m != nil {
		hash = m[1]
	} else {
		return "", fmt.Errorf("git describe --long gave %q, which is no TAG-N-gCOMMIT and no commit", long)
	}
	return "0_git" + commitTime.UTC().Format("20060102150405") + "~" + hash + rel, nil
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// readTree finds the repository around the working directory and what
// git says of it.
func readTree(ctx context.Context, version string) (*tree, error) {
	root, err := git(ctx, ".", "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("run from the repository: %w", err)
	}
	t := &tree{Root: root}
	if t.Describe, err = git(ctx, root, "describe", "--tags", "--always", "--dirty", "--abbrev=12"); err != nil {
		return nil, err
	}
	ct, err := git(ctx, root, "log", "-1", "--format=%ct")
	if err != nil {
		return nil, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("commit time %q: %w", ct, err)
	}
	t.Time = time.Unix(sec, 0).UTC()
	if version != "" {
		t.Version, t.Describe = version, version
		return t, nil
	}
	long, err := git(ctx, root, "describe", "--tags", "--long", "--always", "--dirty", "--abbrev=12")
	if err != nil {
		return nil, err
	}
	t.Version, err = packageVersion(long, t.Time)
	return t, err
}

func build(ctx context.Context, o *options, stdout, stderr io.Writer) error {
	t, err := readTree(ctx, o.version)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "build: %s at %s: package version %s, binary version %s\n",
		t.Root, t.Time.Format(time.RFC3339), t.Version, t.Describe)
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "offload-packaging-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	files, err := packageFiles(t)
	if err != nil {
		return err
	}
	var made []string
	if o.source {
		paths, err := writeSource(ctx, t, o.out)
		if err != nil {
			return fmt.Errorf("source tarball: %w", err)
		}
		made = append(made, paths...)
	}
	for i, a := range o.arches {
		fmt.Fprintf(stderr, "build: [%d/%d] %s: go build ./cmd/offload (GOARCH=%s %s)\n",
			i+1, len(o.arches), a.Arch, a.GOARCH, strings.Join(a.Env, " "))
		bin := filepath.Join(work, a.Arch, "offload")
		if err := goBuild(ctx, t, a, bin); err != nil {
			return fmt.Errorf("%s: %w", a.Arch, err)
		}
		for _, f := range []string{"ipk", "apk"} {
			if !o.formats[f] {
				continue
			}
			p, err := writePackage(t, a, f, bin, files, filepath.Join(work, a.Arch), o.out)
			if err != nil {
				return fmt.Errorf("%s %s: %w", a.Arch, f, err)
			}
			made = append(made, p)
		}
	}
	if o.luci {
		fl, err := luciFiles(t)
		if err != nil {
			return fmt.Errorf("%s: %w", luciName, err)
		}
		for _, f := range []string{"ipk", "apk"} {
			if !o.formats[f] {
				continue
			}
			p, err := writeLuciPackage(t, f, fl, work, o.out)
			if err != nil {
				return fmt.Errorf("%s %s: %w", luciName, f, err)
			}
			made = append(made, p)
		}
	}
	return writeSums(o.out, made, stdout)
}

// goBuild builds cmd/offload for a target as the packages ship it.
func goBuild(ctx context.Context, t *tree, a target, out string) error {
	cmd := goBuildCmd(ctx, t, a, out)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// goBuildCmd is goBuild's command: the flags of internal/buildflags, the
// ones harness/budget measures, with the tree's version stamped in.
func goBuildCmd(ctx context.Context, t *tree, a target, out string) *exec.Cmd {
	args := append(append([]string{"build"}, buildflags.Args(t.Describe)...), "-o", out, "./cmd/offload")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = t.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+a.GOARCH)
	cmd.Env = append(cmd.Env, a.Env...)
	return cmd
}

// writeSums prints and writes dist/SHA256SUMS for what this run made.
func writeSums(dir string, paths []string, stdout io.Writer) error {
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s  %s\n", hex.EncodeToString(sum[:]), filepath.ToSlash(rel))
		fmt.Fprintf(stdout, "%s  %9d  %s\n", hex.EncodeToString(sum[:])[:16], len(data), p)
	}
	return os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(b.String()), 0o644)
}
