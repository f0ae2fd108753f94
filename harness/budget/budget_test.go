package main

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/buildflags"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1048576", 1 << 20, true},
		{"16KiB", 16 << 10, true},
		{"256KiB", 256 << 10, true},
		{"8MiB", 8 << 20, true},
		{"1GiB", 1 << 30, true},
		{" 4 MiB ", 4 << 20, true},
		{"0", 0, true},
		{"", 0, false},
		{"8MB", 0, false},
		{"-1KiB", 0, false},
		{"1.5MiB", 0, false},
		{"99999999999GiB", 0, false},
	} {
		got, err := parseBytes(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, n := range []int64{1 << 20, 256 << 10, 4 << 20, 1000} {
		back, err := parseBytes(fmtBytes(n))
		if err != nil || back != n {
			t.Errorf("fmtBytes(%d) = %q parses back as %d, %v", n, fmtBytes(n), back, err)
		}
	}
}

func TestParseStatus(t *testing.T) {
	const status = "Name:\toffload\nVmPeak:\t 1264076 kB\nVmHWM:\t   30616 kB\nVmRSS:\t   26740 kB\nThreads:\t9\n"
	m, err := parseStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if m.HWM != 30616<<10 || m.RSS != 26740<<10 {
		t.Errorf("got %+v, want HWM 30616 KiB, RSS 26740 KiB", m)
	}
	for _, bad := range []string{
		"Name:\tx\n",                        // a kernel thread or zombie: no lines
		"VmHWM:\t 1 kB\nVmRSS:\t 2 MB\n",    // unit
		"VmHWM:\t 1 kB\nVmRSS:\t lots kB\n", // number
		"VmHWM:\t 1 kB\nVmSwap:\t 2 kB\n",   // one of two
	} {
		if _, err := parseStatus(strings.NewReader(bad)); err == nil {
			t.Errorf("parseStatus(%q) did not fail", bad)
		}
	}
	// This process has both lines.
	self, err := readStatus(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if self.RSS <= 0 || self.HWM < self.RSS/2 {
		t.Errorf("own status %+v is implausible", self)
	}
}

func TestSetTopLevel(t *testing.T) {
	const in = `# head comment
listen: 192.0.2.1:7000

services:
  web: 127.0.0.1:8080

  ssh: 127.0.0.1:22
# a comment after services
max_streams: 1024       # comment

log:
  level: info
`
	got := setTopLevel(in, "services", "services:\n  sink: 127.0.0.1:9")
	want := `# head comment
listen: 192.0.2.1:7000

services:
  sink: 127.0.0.1:9
# a comment after services
max_streams: 1024       # comment

log:
  level: info
`
	if got != want {
		t.Errorf("replacing services:\n%s\nwant:\n%s", got, want)
	}
	got = setTopLevel(in, "max_streams", "max_streams: 64")
	if !strings.Contains(got, "\nmax_streams: 64\n\nlog:") || strings.Contains(got, "1024") {
		t.Errorf("replacing max_streams:\n%s", got)
	}
	got = setTopLevel(in, "metrics", "metrics: 127.0.0.1:9100\n")
	if !strings.HasSuffix(got, "  level: info\nmetrics: 127.0.0.1:9100\n") || !strings.HasPrefix(got, in) {
		t.Errorf("appending metrics:\n%s", got)
	}
	// A key that is only a prefix of another is not confused with it.
	got = setTopLevel("server_name: a\nserver: b\n", "server", "server: c")
	if got != "server_name: a\nserver: c\n" {
		t.Errorf("prefix key: %q", got)
	}
}

// The examples the rss command starts from must keep the keys it sets, so
// that it changes them in place rather than appending a duplicate.
func TestExamplesHaveKeys(t *testing.T) {
	for file, keys := range map[string][]string{
		"server.yaml": {"listen", "key_file", "services", "yamux_window", "link_buffer"},
		"client.yaml": {"server", "key_file", "forwards", "yamux_window", "link_buffer"},
	} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", file))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(string(b), k+":") && !strings.Contains(string(b), "\n"+k+":") {
				t.Errorf("examples/%s has no top-level %s:", file, k)
			}
		}
	}
}

func TestScenarios(t *testing.T) {
	o := rssOpts{streams: []int{10, 100, 200}, windows: []int64{256 << 10, 1 << 20}, sink: "fast"}
	got := o.scenarios()
	want := []scenario{{10, 1 << 20, false, false}, {100, 1 << 20, false, false}, {200, 1 << 20, false, false}, {100, 256 << 10, false, false}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("default matrix %v, want %v", got, want)
	}
	o.cross, o.sink = true, "both"
	if n := len(o.scenarios()); n != 3*2*2 {
		t.Errorf("-cross -sink both: %d scenarios, want 12", n)
	}
	o.cross, o.sink = false, "stalled"
	for _, s := range o.scenarios() {
		if !s.Stalled {
			t.Errorf("-sink stalled gave %v", s)
		}
	}
}

// The rss table's header is the one budget printed before the table came
// from measure/method: readers of earlier runs compare them.
func TestRSSTableHeader(t *testing.T) {
	var b strings.Builder
	if err := rssTable.WriteMarkdownHeader(&b); err != nil {
		t.Fatal(err)
	}
	want := "| streams | window | sink | MB/s | server idle RSS | server load max RSS | server HWM | client idle RSS | client load max RSS | client HWM |\n" +
		"|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
	if b.String() != want {
		t.Errorf("header:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestXZSize: xzSize is the length of xz's output: small for repetitive
// data, about the input for random data, and an error for a missing file.
func TestXZSize(t *testing.T) {
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("no xz (scripts/deps.sh installs xz-utils)")
	}
	dir := t.TempDir()
	zeros, random := filepath.Join(dir, "zeros"), filepath.Join(dir, "random")
	if err := os.WriteFile(zeros, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 256<<10)
	if _, err := rand.Read(r); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(random, r, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if n, err := xzSize(ctx, zeros); err != nil || n <= 0 || n > 4096 {
		t.Errorf("1 MiB of zeros: %d bytes, %v", n, err)
	}
	if n, err := xzSize(ctx, random); err != nil || n < int64(len(r)) || n > int64(len(r))+4096 {
		t.Errorf("256 KiB of random bytes: %d bytes, %v", n, err)
	}
	if _, err := xzSize(ctx, filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file gave no error")
	}
}

// TestSizeOverBudget: a budget under the binary's size fails the run with
// errOver, naming the target (built for the first target only, to keep it
// short: -max applies to every target, so the first build already fails).
func TestSizeOverBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cmd/offload")
	}
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("no xz (scripts/deps.sh installs xz-utils)")
	}
	saved := sizeTargets
	sizeTargets = sizeTargets[:1]
	defer func() { sizeTargets = saved }()
	var out, errOut strings.Builder
	err := runSize(context.Background(), []string{"-max", "1MiB", "-pkg", "../../cmd/offload"}, &out, &errOut)
	if !errors.Is(err, errOver) || !strings.Contains(err.Error(), sizeTargets[0].Name) {
		t.Fatalf("budget 1 MiB: %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "| "+sizeTargets[0].Name+" |") {
		t.Errorf("no table row for %s:\n%s", sizeTargets[0].Name, out.String())
	}
}

// TestSizeBuildIsPackagingBuild checks that size measures the router
// build packaging/build ships: internal/buildflags' flags, every one, and
// nothing else but the output and the package.
func TestSizeBuildIsPackagingBuild(t *testing.T) {
	cmd := goBuildCmd(context.Background(), "/tmp/x", "./cmd/offload", []string{"GOARCH=mipsle"})
	want := append(append([]string{"go", "build"}, buildflags.Args("")...), "-o", "/tmp/x", "./cmd/offload")
	if !reflect.DeepEqual(cmd.Args, want) {
		t.Errorf("size builds with\n%q\nwant\n%q", cmd.Args, want)
	}
	if !slices.Contains(cmd.Env, "CGO_ENABLED=0") || cmd.Env[len(cmd.Env)-1] != "GOARCH=mipsle" {
		t.Errorf("size's build environment ends %q", cmd.Env[len(cmd.Env)-3:])
	}
}
