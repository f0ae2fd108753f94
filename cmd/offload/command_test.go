package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/offload-dev/offload/config"
)

// Help that was asked for goes to stdout with exit 0; a mistake's usage
// goes to stderr with exit 2.
func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"validate", "-h"}, {"server", "-help"}, {"bench", "--help"}} {
		code, stdout, stderr := runCmd(t, args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "usage: offload") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 0 and the usage on stdout", args, code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{}, {"nosuch"}, {"validate", "-nosuch"}, {"validate"}} {
		code, stdout, stderr := runCmd(t, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "usage: offload") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and the usage on stderr", args, code, stdout, stderr)
		}
	}
}

func TestVersionBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-12-01T22:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	var b bytes.Buffer
	printVersion(&b, bi)
	want := regexp.MustCompile(`^offload devel-0123456789ab\+dirty go\S+ \S+/\S+\n` +
		`revision: 0123456789abcdef0123456789abcdef01234567, committed 2026-12-01T22:00:00Z, modified \(`)
	if !want.MatchString(b.String()) {
		t.Errorf("with VCS settings:\n%s", b.String())
	}
	b.Reset()
	printVersion(&b, &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}})
	if !strings.HasPrefix(b.String(), "offload v1.2.3 ") || !strings.Contains(b.String(), "revision: none in the build info") {
		t.Errorf("without VCS settings:\n%s", b.String())
	}
}

// A binary built in this checkout says which revision it is.
func TestVersionOfABuiltBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	// The go command stamps the revision only where .git is a directory:
	// not in a git worktree or submodule, whose .git is a file.
	if fi, err := os.Stat(filepath.Join("..", "..", ".git")); err != nil || !fi.IsDir() {
		t.Skip("not a plain git checkout (worktree, submodule or export): the go command stamps no revision")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git:", err)
	}
	bin := filepath.Join(t.TempDir(), "offload")
	build := exec.Command("go", "build", "-o", bin, ".")
	// GOFLAGS may say -buildvcs=false (CI sets it for reproducible
	// builds); this test is about the stamp.
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^revision: [0-9a-f]{40}, committed \d{4}-\d\d-\d\dT\S+, (clean|modified)`).Match(out) {
		t.Errorf("version of a build from a checkout:\n%s", out)
	}
}

// Durations in logs are rounded to the millisecond (microseconds below
// one), in both formats.
func TestLogDurationsRounded(t *testing.T) {
	for _, format := range []string{config.LogConsole, config.LogJSON} {
		var b bytes.Buffer
		log := newLogger(config.Log{Level: zapcore.InfoLevel, Format: format}, &b)
		log.Info("x", zap.Duration("long", 1234567891*time.Nanosecond), zap.Duration("short", 345678*time.Nanosecond))
		_ = log.Sync()
		s := b.String()
		if !strings.Contains(s, "1.235s") || !strings.Contains(s, "346µs") || strings.Contains(s, "1.234567891s") {
			t.Errorf("%s: %s", format, s)
		}
	}
}
