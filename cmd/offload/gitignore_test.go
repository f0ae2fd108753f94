package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build outputs stay out of git anywhere in the tree (.gitignore): the
// binary `go build` makes in each main package's directory is ignored,
// while that directory's sources and the packaging directory named
// offload stay tracked, and no tracked file is an executable.
func TestBuildOutputsIgnored(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("no git:", err)
	}
	root := filepath.Join("..", "..")
	if err := exec.Command(git, "-C", root, "rev-parse", "--is-inside-work-tree").Run(); err != nil {
		t.Skip("not a git checkout:", err)
	}
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.Dir}}{{end}}`, "github.com/offload-dev/offload/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	var ignored []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(mustAbs(t, root), dir)
		if err != nil {
			t.Fatal(err)
		}
		ignored = append(ignored, filepath.Join(rel, filepath.Base(dir)))
	}
	if len(ignored) < 2 {
		t.Fatalf("found %d main packages, want cmd/offload and more: %q", len(ignored), out)
	}
	ignored = append(ignored, "offload", "tunnel/tunnel.test", "cpu.prof", "harness/x.pprof")
	for _, p := range ignored {
		if err := exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", p).Run(); err != nil {
			t.Errorf("%s: not ignored (%v)", p, err)
		}
	}
	for _, p := range []string{"cmd/offload/main.go", "packaging/openwrt/offload/Makefile", "harness/vm/main.go", "examples/loopback/server.yaml"} {
		if exec.Command(git, "-C", root, "check-ignore", "-q", "--no-index", p).Run() == nil {
			t.Errorf("%s: ignored, want it tracked", p)
		}
	}
	files, err := exec.Command(git, "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		head := make([]byte, 4)
		fh, err := os.Open(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree
		}
		n, _ := fh.Read(head)
		fh.Close()
		if bytes.Equal(head[:n], []byte("\x7fELF")) {
			t.Errorf("%s: an ELF binary is tracked; git rm it", f)
		}
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
