package treecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs link to each other by relative path and heading anchor, and
// they move (docs/lab/ took the measurement logs out of the guide): a
// link that no longer leads anywhere fails here rather than in a
// reader's browser.

// mdLink is an inline Markdown link or image: [text](target) or
// [text](target "title"). Reference-style links are not used in the docs.
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// fence opens or closes a code block, where brackets are code, not links.
var fence = regexp.MustCompile("^\\s*(```|~~~)")

// inlineCode is a code span, whose brackets are not links either.
var inlineCode = regexp.MustCompile("`[^`]*`")

// slugDrop is what GitHub leaves out of a heading's anchor.
var slugDrop = regexp.MustCompile(`[^\p{L}\p{N} _-]`)

// slug is GitHub's anchor for a heading text: lower case, punctuation
// dropped, spaces as hyphens.
func slug(heading string) string {
	s := strings.ToLower(strings.TrimSpace(heading))
	s = strings.NewReplacer("`", "", "*", "").Replace(s)
	s = slugDrop.ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

// anchors returns the heading anchors of a Markdown file, with GitHub's
// -1, -2 suffixes for repeated headings, and any <a name|id="..."> tags.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		t := strings.TrimLeft(line, "#")
		if len(t) == len(line) || len(line)-len(t) > 6 || !strings.HasPrefix(t, " ") {
			continue
		}
		s := slug(t)
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

var htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)

// links returns the link targets of a Markdown file with their lines,
// outside code blocks and code spans.
func links(text string) (targets []string, lines []int) {
	inFence := false
	for i, line := range strings.Split(text, "\n") {
		if fence.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(inlineCode.ReplaceAllString(line, ""), -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// docFiles are the Markdown files checked: README.md and everything
// under docs/, as paths relative to the repository root.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// brokenLinks checks the relative links of files (paths relative to
// root): the file or directory a link names must exist, and the anchor
// of a link to a Markdown file (or to a heading of the same file) must
// be one of its headings.
func brokenLinks(root string, files []string) ([]string, error) {
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	var problems []string
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return nil, err
		}
		targets, lines := links(string(b))
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %s: no such file", file, lines[i], target))
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			a, err := anchorsOf(dest)
			if err != nil {
				return nil, err
			}
			if !a[frag] {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s has no heading #%s", file, lines[i], target, dest, frag))
			}
		}
	}
	return problems, nil
}

// TestDocLinks: every relative link in README.md and docs/ leads to a
// file that exists and, for a Markdown file, to a heading it has.
func TestDocLinks(t *testing.T) {
	root := filepath.Join("..", "..")
	problems, err := brokenLinks(root, docFiles(t, root))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestDocLinksCatch: the check finds a missing file and a missing
// heading, and accepts a good link, a heading link within the file and
// brackets inside code.
func TestDocLinksCatch(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "docs", "lab"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "docs", "lab", "runs.md"), []byte("# Runs\n\n## Run 1 (2026-12-02, `go run ./x`)\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "docs", "guide.md"), []byte(
		"# Guide\n\n## Setting up\n\n"+
			"[good](lab/runs.md#run-1-2026-12-02-go-run-x) [here](#setting-up)\n"+
			"[gone](lab/moved.md) [no heading](lab/runs.md#run-2)\n"+
			"`[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"), 0o644))
	problems, err := brokenLinks(dir, []string{"docs/guide.md"})
	must(err)
	got := strings.Join(problems, "\n")
	for _, want := range []string{
		"docs/guide.md:6: lab/moved.md: no such file",
		"docs/guide.md:6: lab/runs.md#run-2: docs/lab/runs.md has no heading #run-2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}
	if len(problems) != 2 {
		t.Errorf("want 2 problems, got %d:\n%s", len(problems), got)
	}
}
