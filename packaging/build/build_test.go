package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/buildflags"
)

// repoRoot is the repository, two folders up (the command runs from it).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the packaging command reads the tree through it")
	}
	if out, err := exec.Command("git", "-C", root, "rev-parse", "--show-toplevel").Output(); err != nil || strings.TrimSpace(string(out)) == "" {
		t.Skip("not in a git checkout")
	}
	return root
}

// inRoot runs the rest of the test from the repository root, as the
// command is run.
func inRoot(t *testing.T) {
	t.Chdir(repoRoot(t))
}

func TestPackageVersion(t *testing.T) {
	at := time.Date(2026, 12, 7, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct{ long, want string }{
		{"v1.2.0-0-gabc123def456", "1.2.0-r1"},
		{"1.2-0-gabc123def456", "1.2-r1"},
		{"v1.2.0-5-gabc123def456", "1.2.0_p5~abc123def456-r1"},
		{"v1.2.0-5-gabc123def456-dirty", "1.2.0_p5~abc123def456-r1"},
		{"ea9aa43eaf8b", "0_git20261207030405~ea9aa43eaf8b-r1"},
		{"ea9aa43eaf8b-dirty", "0_git20261207030405~ea9aa43eaf8b-r1"},
		// A commit whose short hash is all digits is no tag.
		{"536020900077", "0_git20261207030405~536020900077-r1"},
		// A tag that is no version: the commit's form.
		{"release-2-3-gabc123def456", "0_git20261207030405~abc123def456-r1"},
	} {
		got, err := packageVersion(c.long, at)
		if err != nil || got != c.want {
			t.Errorf("packageVersion(%q) = %q, %v; want %q", c.long, got, err, c.want)
		}
		if !apkVersion.MatchString(got) {
			t.Errorf("packageVersion(%q) = %q, which apk's syntax refuses", c.long, got)
		}
	}
	for _, bad := range []string{"", "not a describe"} {
		if got, err := packageVersion(bad, at); err == nil {
			t.Errorf("packageVersion(%q) = %q, want an error", bad, got)
		}
	}
}

// TestReproducible builds the x86_64 packages and the source twice, into
// two folders (so no path of the build's own leaks in), and compares
// every byte; then checks every archive entry: the commit's time, uid/gid
// 0, user and group root (no name of this host's users).
func TestReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds cmd/offload")
	}
	inRoot(t)
	var dirs [2]string
	for i := range dirs {
		dirs[i] = t.TempDir()
		o := &options{out: dirs[i], arches: []target{targets[len(targets)-1]}, formats: map[string]bool{"ipk": true, "apk": true}, source: true, luci: true}
		var stderr bytes.Buffer
		if err := build(context.Background(), o, io.Discard, &stderr); err != nil {
			t.Fatalf("build %d: %v\n%s", i+1, err, stderr.String())
		}
	}
	a, b := listFiles(t, dirs[0]), listFiles(t, dirs[1])
	if len(a) < 5 {
		t.Fatalf("build wrote %d files, want the ipk, apk, tarball, its sha256, the Makefile and SHA256SUMS: %v", len(a), a)
	}
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Fatalf("the two builds wrote different files:\n%v\n%v", a, b)
	}
	for _, f := range a {
		x, _ := os.ReadFile(filepath.Join(dirs[0], f))
		y, _ := os.ReadFile(filepath.Join(dirs[1], f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two builds of the same tree", f)
		}
	}
	tr, err := readTree(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range a {
		var members map[string][]*tar.Header
		data, _ := os.ReadFile(filepath.Join(dirs[0], f))
		switch {
		case strings.HasSuffix(f, ".ipk"):
			members = ipkMembers(t, data)
		case strings.HasSuffix(f, ".apk"):
			members = apkMembers(t, data)
		case strings.HasSuffix(f, ".tar.gz"):
			members = map[string][]*tar.Header{"": tarHeaders(t, data)}
		default:
			continue
		}
		for part, hs := range members {
			for _, h := range hs {
				// (nfpm writes the apk's .PKGINFO with time 0: fixed too.)
				if h.Name == ".PKGINFO" && h.ModTime.Unix() == 0 {
					h.ModTime = tr.Time
				}
				if !h.ModTime.Equal(tr.Time) || h.Uid != 0 || h.Gid != 0 || (h.Uname != "" && h.Uname != "root") || (h.Gname != "" && h.Gname != "root") {
					t.Errorf("%s %s %s: mtime %s uid %d gid %d %s/%s; want the commit's time %s, 0, 0, root",
						f, part, h.Name, h.ModTime.UTC(), h.Uid, h.Gid, h.Uname, h.Gname, tr.Time)
				}
			}
		}
	}
}

func listFiles(t *testing.T, dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func tarHeaders(t *testing.T, tgz []byte) []*tar.Header {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	zr.Multistream(false)
	var hs []*tar.Header
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
}

// ipkMembers: the outer tar's headers and those of control.tar.gz and
// data.tar.gz inside it, checking the form opkg reads.
func ipkMembers(t *testing.T, ipk []byte) map[string][]*tar.Header {
	t.Helper()
	out := map[string][]*tar.Header{}
	zr, err := gzip.NewReader(bytes.NewReader(ipk))
	if err != nil {
		t.Fatalf("the ipk is not gzip'd (opkg refuses the ar form): %v", err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out["ipk"] = append(out["ipk"], h)
		names = append(names, strings.TrimPrefix(h.Name, "./"))
		if strings.HasSuffix(h.Name, ".tar.gz") {
			inner, _ := io.ReadAll(tr)
			out[h.Name] = tarHeaders(t, inner)
		}
	}
	if strings.Join(names, " ") != "debian-binary control.tar.gz data.tar.gz" {
		t.Errorf("ipk members %v, want debian-binary control.tar.gz data.tar.gz", names)
	}
	return out
}

// apkMembers: the v2 layout's gzip streams one after another (control
// with .PKGINFO, then data).
func apkMembers(t *testing.T, apk []byte) map[string][]*tar.Header {
	t.Helper()
	out := map[string][]*tar.Header{}
	br := bytes.NewReader(apk)
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		zr.Multistream(false)
		data, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err != nil {
				break // the control part has no end blocks
			}
			out[[]string{"control", "data"}[min(i, 1)]] = append(out[[]string{"control", "data"}[min(i, 1)]], h)
		}
		if err := zr.Reset(br); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if len(out["control"]) == 0 || out["control"][0].Name != ".PKGINFO" || len(out["data"]) == 0 {
		t.Errorf("apk: control %d entries (first must be .PKGINFO), data %d", len(out["control"]), len(out["data"]))
	}
	return out
}

// TestFeedMakefileSource renders the feed Makefile for this tree and
// checks that its source is this tree: PKG_HASH is the tarball's sha256,
// PKG_SOURCE and PKG_VERSION name it, its files hold what the Makefile
// installs, and the offload the tarball builds has what the shipped init
// script calls (checkSource).
func TestFeedMakefileSource(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds cmd/offload from the source tarball")
	}
	inRoot(t)
	ctx := context.Background()
	tr, err := readTree(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	paths, err := writeSource(ctx, tr, out)
	if err != nil {
		t.Fatal(err)
	}
	mk, _ := os.ReadFile(paths[1])
	vars := makeVars(string(mk))
	for _, v := range []string{"PKG_VERSION", "PKG_RELEASE", "PKG_SOURCE", "PKG_HASH", "PKG_LICENSE", "PKG_LICENSE_FILES", "PKG_MAINTAINER"} {
		if vars[v] == "" {
			t.Errorf("the Makefile sets no %s", v)
		}
	}
	if vars["PKG_LICENSE"] != "Apache-2.0" || vars["PKG_LICENSE_FILES"] != "LICENSE" {
		t.Errorf("PKG_LICENSE %q, PKG_LICENSE_FILES %q", vars["PKG_LICENSE"], vars["PKG_LICENSE_FILES"])
	}
	for _, bad := range []string{"PKG_MIRROR_HASH", "PKG_SOURCE_URL", "skip"} {
		if strings.Contains(string(mk), bad) {
			t.Errorf("the Makefile has %q: it must build the tarball by its hash, from nowhere else", bad)
		}
	}
	src := filepath.Join(out, strings.ReplaceAll(vars["PKG_SOURCE"], "$(PKG_VERSION)", vars["PKG_VERSION"]))
	tgz, err := os.ReadFile(src)
	if err != nil {
		t.Fatalf("PKG_SOURCE: %v", err)
	}
	if sum := sha256.Sum256(tgz); hex.EncodeToString(sum[:]) != vars["PKG_HASH"] {
		t.Errorf("PKG_HASH %s is not the sha256 of %s", vars["PKG_HASH"], src)
	}
	dir := t.TempDir()
	if err := untar(tgz, dir); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(dir, "offload-"+vars["PKG_VERSION"]) // PKG_BUILD_DIR
	for _, m := range regexp.MustCompile(`\$\(PKG_BUILD_DIR\)/(\S+)`).FindAllStringSubmatch(string(mk), -1) {
		if _, err := os.Stat(filepath.Join(tree, m[1])); err != nil {
			t.Errorf("the Makefile installs %s, which the tarball lacks: %v", m[1], err)
		}
	}
	if _, err := os.Stat(filepath.Join(tree, "LICENSE")); err != nil {
		t.Errorf("PKG_LICENSE_FILES: %v", err)
	}
	if err := checkSource(ctx, tree); err != nil {
		t.Errorf("the feed Makefile's source: %v", err)
	}

	// The check fails for a source without what the init script uses:
	// no validate command, no SIGHUP reload.
	edit := func(rel, from, to string) {
		p := filepath.Join(tree, rel)
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(from)) {
			t.Fatalf("%s: no %q to change (%v)", rel, from, err)
		}
		if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte(from), []byte(to)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit("cmd/offload/validate.go", `"validate"`, `"check"`)
	edit("cmd/offload/reload.go", "syscall.SIGHUP", "syscall.SIGUSR1")
	err = checkSource(ctx, tree)
	for _, want := range []string{`no "validate" command`, "SIGHUP"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a source without what the init script uses: got %v, want it to say %s", err, want)
		}
	}
}

func makeVars(mk string) map[string]string {
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+):=(.*)$`).FindAllStringSubmatch(mk, -1) {
		vars[m[1]] = strings.TrimSpace(m[2])
	}
	return vars
}

func untar(tgz []byte, dir string) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, os.FileMode(h.Mode)&0o777)
			}
		}
		if err != nil {
			return err
		}
	}
}

// TestGoBuildFlags checks that the packages' binary is the router build
// of internal/buildflags (what harness/budget size measures), with the
// tree's version stamped in.
func TestGoBuildFlags(t *testing.T) {
	tr := &tree{Root: "/src", Describe: "v1.2.0-5-gabc123def456"}
	cmd := goBuildCmd(context.Background(), tr, targets[0], "/tmp/offload")
	want := append(append([]string{"go", "build"}, buildflags.Args(tr.Describe)...), "-o", "/tmp/offload", "./cmd/offload")
	if !slices.Equal(cmd.Args, want) {
		t.Errorf("packages build with\n%q\nwant\n%q", cmd.Args, want)
	}
	if cmd.Dir != "/src" || !slices.Contains(cmd.Env, "CGO_ENABLED=0") || !slices.Contains(cmd.Env, "GOARCH="+targets[0].GOARCH) {
		t.Errorf("build in %q with %q", cmd.Dir, cmd.Env)
	}
}
