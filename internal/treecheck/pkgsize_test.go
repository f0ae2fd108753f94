package treecheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The flat tunnel package was the crowded room (issue 29: 27 files, 6,108
// lines): whatever never needs a Server, a Client or a link (the stream
// layer, the live view, the redial policy and dial schedule, the engine
// checks, the handshake slot table) lives in a package of its own, where
// it is read and tested alone. This test holds the flat package to a size
// a newcomer can read; a change that crosses it moves a mechanism out.

// pkgLimits cap the non-test Go lines of a package's directory (its
// subpackages not counted).
var pkgLimits = []docLimit{
	{"tunnel", 5000, "the flat tunnel package holds the server, the client and their links; " +
		"a mechanism that needs none of them (a wire format, a listener wrapper, a slot table, " +
		"the stream layer) goes in its own package below tunnel/ (issue 29, docs/architecture.md)"},
}

// goLines returns the lines of the non-test Go files directly in dir.
func goLines(dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0, err
		}
		n += lineCount(b)
	}
	return n, nil
}

// TestPackageSizes: the packages with a cap stay within it.
func TestPackageSizes(t *testing.T) {
	problems, err := overLimits(root, pkgLimits, goLines, "lines of Go outside its tests")
	report(t, problems, err)
}

// TestPackageSizesCatch: a package one line over its cap is named, with
// why; its tests, its subpackages and other files do not count, and one at
// its cap passes.
func TestPackageSizesCatch(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a/a.go":          "package a\n\nvar x = 1\n",
		"a/b.go":          "package a",
		"a/a_test.go":     strings.Repeat("x\n", 100),
		"a/notes.md":      strings.Repeat("x\n", 100),
		"a/sub/sub.go":    strings.Repeat("x\n", 100),
		"fits/fits.go":    "package fits\n\nvar x = 1\n",
		"fits/fits_2.go":  "package fits\n",
		"fits/x_test.go":  strings.Repeat("x\n", 100),
		"fits/sub/sub.go": strings.Repeat("x\n", 100),
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := overLimits(dir, []docLimit{{"a", 3, "because"}, {"fits", 4, "fits"}}, goLines, "lines of Go outside its tests")
	if err != nil {
		t.Fatal(err)
	}
	want := "a has 4 lines of Go outside its tests, over its 3: because"
	if len(problems) != 1 || problems[0] != want {
		t.Errorf("got %q, want [%q]", problems, want)
	}
}
