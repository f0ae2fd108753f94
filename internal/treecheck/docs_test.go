package treecheck

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The guide grew by appending (issue 29): a page that keeps growing stops
// being read, and the reader who needs the limits first never reaches
// them. These tests hold the pages to the jobs they were split into.

// docLimit caps one page's length (or a package's: pkgsize_test.go), with
// the reason the failure gives.
type docLimit struct {
	path  string
	lines int
	why   string
}

var docLimits = []docLimit{
	{"README.md", 200, "it says what offload is, for whom, its limits and the two commands; " +
		"the rest belongs in docs/, and the package map only in docs/architecture.md"},
	{"docs/tunnel.md", 600, "it is the walk-through; defences and limits go in docs/defences.md, " +
		"metrics and status in docs/observability.md, the wire format in docs/protocol.md, " +
		"dated runs in docs/lab/"},
}

// lineCount is the number of lines of a text, a last line without its
// newline included.
func lineCount(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// overLimits returns a problem for every path of limits whose count
// (what: "lines" for a page) is over its cap.
func overLimits(root string, limits []docLimit, count func(path string) (int, error), what string) ([]string, error) {
	var problems []string
	for _, l := range limits {
		n, err := count(filepath.Join(root, l.path))
		if err != nil {
			return nil, err
		}
		if n > l.lines {
			problems = append(problems, fmt.Sprintf("%s has %d %s, over its %d: %s", l.path, n, what, l.lines, l.why))
		}
	}
	return problems, nil
}

// fileLines counts the lines of one file.
func fileLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	return lineCount(b), err
}

// report fails t with err or each of problems.
func report(t *testing.T, problems []string, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestDocSizes: the pages with a cap stay within it.
func TestDocSizes(t *testing.T) {
	problems, err := overLimits(root, docLimits, fileLines, "lines")
	report(t, problems, err)
}

// TestDocSizesCatch: a page one line over its cap is named, with why; one
// at its cap passes.
func TestDocSizesCatch(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte(strings.Repeat("x\n", 3)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.md"), []byte("x\nx\nx"), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err := overLimits(dir, []docLimit{{"a.md", 2, "because"}, {"b.md", 3, "fits"}}, fileLines, "lines")
	if err != nil {
		t.Fatal(err)
	}
	want := "a.md has 3 lines, over its 2: because"
	if len(problems) != 1 || problems[0] != want {
		t.Errorf("got %q, want [%q]", problems, want)
	}
}

// attackTest is the declaration of an attack test: the tests named
// TestAttack* each play one attack against the tunnel.
var attackTest = regexp.MustCompile(`(?m)^func (TestAttack\w+)\(`)

// attackTests returns the attack tests declared in the module's _test.go
// files, third_party/ aside.
func attackTests(root string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "third_party" || n == "testdata" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range attackTest.FindAllSubmatch(b, -1) {
			names = append(names, string(m[1]))
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}

// attackProblems compares the attack tests with a page: each must be
// named there, and the page must name none that does not exist.
func attackProblems(page string, doc []byte, tests []string) []string {
	var problems []string
	exists := map[string]bool{}
	for _, n := range tests {
		exists[n] = true
		if !regexp.MustCompile(`\b` + n + `\b`).Match(doc) {
			problems = append(problems, page+" does not name "+n+": every attack test has a row in its attack list")
		}
	}
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bTestAttack\w+`).FindAll(doc, -1) {
		n := string(m)
		if !exists[n] && !seen[n] {
			seen[n] = true
			problems = append(problems, page+" names "+n+", which no test declares")
		}
	}
	return problems
}

// TestDefencesNameAttacks: docs/defences.md's attack list names every
// TestAttack* test of the module and no test that is gone.
func TestDefencesNameAttacks(t *testing.T) {
	tests, err := attackTests(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(tests) < 10 {
		t.Fatalf("found only %d attack tests: the walk misses the module's tests", len(tests))
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "defences.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range attackProblems("docs/defences.md", doc, tests) {
		t.Error(p)
	}
}

// TestDefencesNameAttacksCatch: a test missing from the page and a name the
// page keeps after its test went are both reported.
func TestDefencesNameAttacksCatch(t *testing.T) {
	doc := []byte("| flood | `TestAttackFlood` |\n| gone | `TestAttackGone` |\n| `TestAttackFloodLong` |\n")
	got := attackProblems("d.md", doc, []string{"TestAttackFlood", "TestAttackFloodLong", "TestAttackPing"})
	want := []string{
		"d.md does not name TestAttackPing: every attack test has a row in its attack list",
		"d.md names TestAttackGone, which no test declares",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
