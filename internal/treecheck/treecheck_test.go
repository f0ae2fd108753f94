package treecheck

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the module root, two levels above this package.
const root = "../.."

// git runs git in the module root, skipping the test where the tree is not
// a git checkout (a release tarball) or git is missing.
func git(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		t.Skipf("not a git checkout (%v): nothing to check", err)
	}
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = errors.New(strings.TrimSpace(string(ee.Stderr)))
		}
		t.Skipf("git %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// objectKinds are the leading bytes of the build outputs Go makes for the
// targets this project builds (linux, darwin; windows for completeness).
var objectKinds = []struct {
	magic []byte
	kind  string
}{
	{[]byte("\x7fELF"), "an ELF executable or object"},
	{[]byte{0xcf, 0xfa, 0xed, 0xfe}, "a Mach-O executable"},
	{[]byte{0xce, 0xfa, 0xed, 0xfe}, "a Mach-O executable"},
	{[]byte("MZ"), "a Windows executable"},
	{[]byte("!<arch>\n"), "an archive (.a)"},
}

// TestNoBuildOutputsInGit: no file git tracks is a binary a build made.
func TestNoBuildOutputsInGit(t *testing.T) {
	out := git(t, "ls-files", "-z")
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		f, err := os.Open(filepath.Join(root, name))
		if err != nil {
			continue // deleted in the work tree, not yet committed
		}
		head := make([]byte, 8)
		n, _ := io.ReadFull(f, head)
		f.Close()
		for _, k := range objectKinds {
			if bytes.HasPrefix(head[:n], k.magic) {
				t.Errorf("%s is tracked by git and is %s: git rm --cached it, and make .gitignore cover it", name, k.kind)
			}
		}
		if strings.HasSuffix(name, ".test") {
			t.Errorf("%s is tracked by git and is a test binary (go test -c)", name)
		}
	}
}

// TestBuildOutputsIgnored: `go build` in any command's directory writes a
// binary named after it there; .gitignore must cover each, so that
// `git add .` can't commit one.
func TestBuildOutputsIgnored(t *testing.T) {
	git(t, "rev-parse", "--git-dir") // skips outside a checkout
	// go test puts its own toolchain's bin first in PATH.
	out, err := exec.Command("go", "list", "-f", `{{if eq .Name "main"}}{{.Dir}}{{end}}`, root+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var cmds int
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(abs, dir)
		if err != nil {
			t.Fatal(err)
		}
		bin := filepath.ToSlash(filepath.Join(rel, filepath.Base(dir)))
		cmds++
		// check-ignore exits 1 for a path that is not ignored.
		if err := exec.Command("git", "-C", root, "check-ignore", "-q", "--no-index", bin).Run(); err != nil {
			t.Errorf("%s (the output of go build in %s) is not covered by .gitignore", bin, rel)
		}
	}
	if cmds == 0 {
		t.Fatal("go list found no commands: the check checks nothing")
	}
}
