package treecheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package map: docs/architecture.md's "Packages" section is the one
// map of the module (README's Layout was a second one, and went stale).
// Every package `go list ./...` prints must be named in it, in its picture
// or in code spans, and every path it names must still exist.

// codeText returns the code of a Markdown section: its fenced blocks and
// its `code spans`, one string per block or span.
func codeText(section string) []string {
	var out []string
	var block []string
	inFence := false
	for _, line := range strings.Split(section, "\n") {
		if fence.MatchString(line) {
			if inFence {
				out = append(out, strings.Join(block, "\n"))
				block = nil
			}
			inFence = !inFence
			continue
		}
		if inFence {
			block = append(block, line)
			continue
		}
		for _, m := range inlineCode.FindAllString(line, -1) {
			out = append(out, strings.Trim(m, "`"))
		}
	}
	return out
}

// sectionOf returns the text of the "## heading" section of a Markdown
// page, up to the next heading of that level.
func sectionOf(page, heading string) (string, bool) {
	_, rest, ok := strings.Cut(page, "\n## "+heading+"\n")
	if !ok {
		return "", false
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest, true
}

// mapHint is what a missing package asks of the page.
const mapHint = "give it a row in the table of \"## Packages\""

// treePath is a path into the module's tree as the map writes one: a top
// directory of the module, then path elements.
var treePath = regexp.MustCompile(`(?:^|[^\w/.-])((?:cmd|config|engine|harness|internal|measure|packaging|selector|tunnel|third_party)(?:/[\w.-]+)+)`)

// mapProblems checks a package map against the module: every package must
// be named as a whole path (not a prefix of a longer one), and every path
// the map names must exist under root (a package, a file or a directory).
func mapProblems(page string, code []string, pkgs []string, exists func(string) bool) []string {
	var problems []string
	for _, p := range pkgs {
		named := regexp.MustCompile(`(?:^|[^\w/.-])` + regexp.QuoteMeta(p) + `(?:$|[^\w/-])`)
		found := false
		for _, c := range code {
			if named.MatchString(c) {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, page+" does not name package "+p+" in its package map: "+mapHint)
		}
	}
	seen := map[string]bool{}
	for _, c := range code {
		for _, m := range treePath.FindAllStringSubmatch(c, -1) {
			path := strings.TrimRight(m[1], ".")
			if !seen[path] && !exists(path) {
				problems = append(problems, page+" names "+path+", which is not in the tree")
			}
			seen[path] = true
		}
	}
	return problems
}

// modulePackages lists the module's packages, relative to its root.
func modulePackages(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		if rel, ok := relative(p); ok && rel != "" {
			pkgs = append(pkgs, rel)
		}
	}
	return pkgs
}

// TestArchitectureNamesEveryPackage: docs/architecture.md's package map
// names every package of the module and no path that is gone.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to list the packages")
	}
	pkgs := modulePackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: %v", len(pkgs), pkgs)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	section, ok := sectionOf(string(page), "Packages")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## Packages" section`)
	}
	exists := func(path string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(path)))
		return err == nil
	}
	for _, p := range mapProblems("docs/architecture.md", codeText(section), pkgs, exists) {
		t.Error(p)
	}
}

// TestArchitectureNamesEveryPackageCatch: a package named only as the
// prefix of a longer path, or only in prose, is missing; a path that is
// gone is reported; a file path, a path ending a sentence and a package
// named in the picture pass.
func TestArchitectureNamesEveryPackageCatch(t *testing.T) {
	page := "# A\n\n## Packages\n\n```\ntunnel ──> tunnel/record (frames)\n```\n\n" +
		"`tunnel/muxer` is gone; `tunnel/record/writer.go` has the pipeline; see `measure/speed`.\n" +
		"measure/bench is named in prose only.\n\n## Data path\n\n`tunnel/mux`\n"
	section, ok := sectionOf(page, "Packages")
	if !ok {
		t.Fatal("no Packages section")
	}
	exists := func(p string) bool {
		return map[string]bool{"tunnel/record": true, "tunnel/record/writer.go": true, "measure/speed": true}[p]
	}
	got := mapProblems("a.md", codeText(section), []string{"tunnel", "tunnel/record", "tunnel/mux", "measure/speed", "measure/bench"}, exists)
	want := []string{
		"a.md does not name package tunnel/mux in its package map: " + mapHint,
		"a.md does not name package measure/bench in its package map: " + mapHint,
		"a.md names tunnel/muxer, which is not in the tree",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
