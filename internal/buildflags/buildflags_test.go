package buildflags

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// match reports whether the go list pattern p matches the import path
// pkg: exactly, or, for "x/...", x and every package under it.
func match(p, pkg string) bool {
	if base, ok := strings.CutSuffix(p, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return p == pkg
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, pkg string
		want   bool
	}{
		{"net", "net", true},
		{"net", "net/url", false},
		{"net/...", "net", true},
		{"net/...", "net/url", true},
		{"net/...", "netip", false},
		{"go.uber.org/zap/...", "go.uber.org/zapx", false},
	} {
		if got := match(c.p, c.pkg); got != c.want {
			t.Errorf("match(%q, %q) = %v", c.p, c.pkg, got)
		}
	}
}

// TestColdPackages checks the cold list against what cmd/offload links on
// linux/mipsle: every Cold pattern names a package of it (a stale entry
// is an error, it would hide the list's real extent), and none names a
// package of the data path (Hot), whose speed depends on inlining.
func TestColdPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list")
	}
	cmd := exec.Command("go", "list", "-deps", "-tags="+Tags, "../../cmd/offload")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=mipsle", "GOMIPS=softfloat")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, p := range Cold {
		n := 0
		for _, d := range deps {
			if !match(p, d) {
				continue
			}
			n++
			for _, h := range Hot {
				if match(h, d) {
					t.Errorf("cold pattern %q matches %s, a data-path package (Hot %q)", p, d, h)
				}
			}
		}
		if n == 0 {
			t.Errorf("cold pattern %q matches no package of cmd/offload", p)
		}
	}
	for _, cut := range []string{"runtime/pprof", "compress/gzip"} {
		if slices.Contains(deps, cut) {
			t.Errorf("the router build links %s", cut)
		}
	}
	for _, h := range []string{"runtime", "net", "syscall", "time", "crypto/cipher", module + "/engine", module + "/tunnel/record", module + "/tunnel/mux", module + "/tunnel/stream", module + "/selector"} {
		if !slices.ContainsFunc(Hot, func(p string) bool { return match(p, h) }) {
			t.Errorf("%s is not in Hot", h)
		}
	}
}

func TestArgs(t *testing.T) {
	a := Args("v1.2.3")
	if a[0] != "-trimpath" || a[1] != "-tags=nopprof" || a[2] != "-ldflags=-s -w -X main.buildVersion=v1.2.3" {
		t.Errorf("Args = %q", a[:3])
	}
	if got := Args("")[2]; got != "-ldflags=-s -w" {
		t.Errorf("Args(\"\") ldflags = %q", got)
	}
	for _, p := range Cold {
		if !slices.Contains(a, "-gcflags="+p+"=-l") {
			t.Errorf("Args lacks -gcflags=%s=-l", p)
		}
	}
	if want := 3 + len(Cold); len(a) != want {
		t.Errorf("Args has %d flags, want %d", len(a), want)
	}
}

// TestRoutersDoc checks that docs/routers.md's build by hand is this
// build, flag for flag.
func TestRoutersDoc(t *testing.T) {
	data, err := os.ReadFile("../../docs/routers.md")
	if err != nil {
		t.Fatal(err)
	}
	// Join shell continuation lines and collapse blanks.
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(data), " ")
	text = regexp.MustCompile(`[ \t]+`).ReplaceAllString(text, " ")
	want := Command("", "offload", "./cmd/offload")
	if !strings.Contains(text, want) {
		t.Errorf("docs/routers.md does not give the router build by hand; want the line\n%s", want)
	}
}
