package config

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// docs/settings.md is the settings reference: one table row per setting,
// under "Both ends", "Server" or "Client". The decoder's fieldSpec lists
// are the settings, so the test takes them from the decoder itself
// (decoder.schema) rather than from a second list that could drift.

const settingsPage = "../docs/settings.md"

// Skeletons that reach every object of a config: object reports its
// specs whether or not the fields are present, so an empty mapping or a
// list of one empty mapping is enough. A new object the skeletons do not
// reach fails TestSettingsWalkReachesEveryObject.
var settingsSkeletons = map[string]string{
	"server": "log: {}\nclients: {NAME: {}}\n",
	"client": "log: {}\nredial: {}\nforwards: [{}]\nudp_forwards: [{}]\nreverse: [{}]\n",
}

var listIndex = regexp.MustCompile(`\[\d+\]`)

// settingsOf walks the decoder for one end and returns its settings'
// paths (forwards[].listen, clients.NAME.key_file) and the call sites of
// object it went through (file:line).
func settingsOf(t *testing.T, end string) (paths, sites map[string]bool) {
	t.Helper()
	paths, sites = map[string]bool{}, map[string]bool{}
	d := &decoder{file: end + ".yaml"}
	d.schema = func(path string, specs []fieldSpec) {
		// 0 is this function, 1 object, 2 the call of object.
		if _, file, line, ok := runtime.Caller(2); ok {
			sites[fmt.Sprintf("%s:%d", filepath.Base(file), line)] = true
		}
		for _, s := range specs {
			paths[listIndex.ReplaceAllString(join(path, s.name), "[]")] = true
		}
	}
	body := d.parse([]byte(settingsSkeletons[end]))
	if body == nil {
		t.Fatalf("skeleton %s: %v", end, d.result())
	}
	switch end {
	case "server":
		d.server(body)
	case "client":
		d.client(body)
	}
	return paths, sites
}

// objectCalls lists the calls of (*decoder).object in the package's
// non-test sources, as file:line.
func objectCalls(t *testing.T) map[string]bool {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "object" {
				p := fset.Position(call.Pos())
				calls[fmt.Sprintf("%s:%d", filepath.Base(p.Filename), p.Line)] = true
			}
			return true
		})
	}
	return calls
}

// settingRow is one row of the reference.
type settingRow struct {
	path, section string
	line          int
	cells         []string
}

var rowPath = regexp.MustCompile("^`([^`]+)`$")

// readSettingsPage returns the rows of the page's tables whose first
// cell is one backquoted path, with the "## " section they are under.
func readSettingsPage(t *testing.T, name string) []settingRow {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []settingRow
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		m := rowPath.FindStringSubmatch(cells[0])
		if m == nil {
			continue
		}
		rows = append(rows, settingRow{path: m[1], section: section, line: n, cells: cells})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// settingsProblems compares the page's rows with the decoder's settings.
func settingsProblems(rows []settingRow, server, client map[string]bool) []string {
	want := map[string]string{} // path → section
	for p := range server {
		want[p] = "Server"
		if client[p] {
			want[p] = "Both ends"
		}
	}
	for p := range client {
		if !server[p] {
			want[p] = "Client"
		}
	}
	var problems []string
	seen := map[string]int{}
	for _, r := range rows {
		sec, ok := want[r.path]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("line %d: `%s` is no setting of config", r.line, r.path))
			continue
		case seen[r.path] != 0:
			problems = append(problems, fmt.Sprintf("line %d: `%s` has a row already on line %d", r.line, r.path, seen[r.path]))
			continue
		case !strings.HasPrefix(r.section, sec):
			problems = append(problems, fmt.Sprintf("line %d: `%s` is under %q, want under %q", r.line, r.path, r.section, sec))
		}
		seen[r.path] = r.line
		if len(r.cells) != 4 {
			problems = append(problems, fmt.Sprintf("line %d: `%s`: want 4 cells (setting, meaning, default, range), got %d", r.line, r.path, len(r.cells)))
			continue
		}
		for i, what := range []string{"", "meaning", "default", "range"} {
			if i > 0 && r.cells[i] == "" {
				problems = append(problems, fmt.Sprintf("line %d: `%s` has no %s", r.line, r.path, what))
			}
		}
	}
	var missing []string
	for p := range want {
		if seen[p] == 0 {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	for _, p := range missing {
		problems = append(problems, fmt.Sprintf("`%s` (%s) has no row", p, want[p]))
	}
	return problems
}

// TestSettingsReference: docs/settings.md has one row, in the right
// section, for every setting the decoder knows, and no row for anything
// else.
func TestSettingsReference(t *testing.T) {
	server, _ := settingsOf(t, "server")
	client, _ := settingsOf(t, "client")
	for _, p := range settingsProblems(readSettingsPage(t, settingsPage), server, client) {
		t.Errorf("%s: %s", settingsPage, p)
	}
}

// TestSettingsWalkReachesEveryObject: the skeletons take the decoder
// through every object it decodes, so that no nested setting escapes
// TestSettingsReference.
func TestSettingsWalkReachesEveryObject(t *testing.T) {
	calls := objectCalls(t)
	if len(calls) == 0 {
		t.Fatal("found no calls of object")
	}
	reached := map[string]bool{}
	for _, end := range []string{"server", "client"} {
		_, sites := settingsOf(t, end)
		for s := range sites {
			reached[s] = true
		}
	}
	for c := range calls {
		if !reached[c] {
			t.Errorf("object called at %s is not reached by settingsSkeletons: add the object it decodes to them", c)
		}
	}
}

// TestSettingsReferenceCatches: the comparison finds a setting with no
// row, a row that names no setting, a row in the wrong section and an
// empty cell.
func TestSettingsReferenceCatches(t *testing.T) {
	server := map[string]bool{"listen": true, "key_file": true}
	client := map[string]bool{"server": true, "key_file": true}
	rows := []settingRow{
		{path: "key_file", section: "Both ends", line: 1, cells: []string{"`key_file`", "the key", "none", "a path"}},
		{path: "listen", section: "Client", line: 2, cells: []string{"`listen`", "where", "none", ""}},
		{path: "lisen", section: "Server", line: 3, cells: []string{"`lisen`", "typo", "none", "x"}},
	}
	got := strings.Join(settingsProblems(rows, server, client), "\n")
	for _, want := range []string{
		"`listen` is under \"Client\", want under \"Server\"",
		"`listen` has no range",
		"`lisen` is no setting of config",
		"`server` (Client) has no row",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}
}
