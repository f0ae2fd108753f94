package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"github.com/offload-dev/offload/internal/buildflags"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"
)

// feedMakefile is the OpenWrt feed Makefile, rendered with the source
// tarball's version and hash.
//
//go:embed feed-Makefile.tmpl
var feedMakefile string

// sourceTarball is the feed package's source: every file git tracks, as it
// is in the work tree (so a tree with changes gives a tarball with them, as
// its packages have), under offload-VERSION/, sorted, with the commit's
// time, uid/gid 0, modes 0644 or 0755 and gzip without a name or time: the
// same tree gives the same bytes.
func sourceTarball(ctx context.Context, t *tree) ([]byte, error) {
	list, err := git(ctx, t.Root, "ls-files", "-z", "--cached")
	if err != nil {
		return nil, err
	}
	names := strings.Split(strings.TrimRight(list, "\x00"), "\x00")
	sort.Strings(names)
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	ver, _ := splitRelease(t.Version)
	prefix := "offload-" + ver + "/" // PKG_BUILD_DIR: $(PKG_NAME)-$(PKG_VERSION)
	dirs := map[string]bool{}
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname = t.Time, 0, 0, "root", "root"
		h.Format = tar.FormatPAX
		return tw.WriteHeader(h)
	}
	if err := hdr(&tar.Header{Name: prefix, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		return nil, err
	}
	for _, n := range names {
		p := filepath.Join(t.Root, filepath.FromSlash(n))
		st, err := os.Lstat(p)
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in git
		}
		if err != nil {
			return nil, err
		}
		// The folders on the way, each once (names are sorted, so a
		// folder's files follow one another).
		for d, i := "", 0; ; {
			j := strings.IndexByte(n[i:], '/')
			if j < 0 {
				break
			}
			d, i = n[:i+j+1], i+j+1
			if !dirs[d] {
				dirs[d] = true
				if err := hdr(&tar.Header{Name: prefix + d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
					return nil, err
				}
			}
		}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, err
			}
			if err := hdr(&tar.Header{Name: prefix + n, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}); err != nil {
				return nil, err
			}
		case st.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			mode := int64(0o644)
			if st.Mode()&0o111 != 0 {
				mode = 0o755
			}
			if err := hdr(&tar.Header{Name: prefix + n, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(data))}); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		default:
			// a submodule (a folder in the index): none here
			return nil, fmt.Errorf("%s: not a file or a symlink", n)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// renderFeedMakefile renders the feed Makefile for a source tarball.
func renderFeedMakefile(t *tree, hash string) []byte {
	ver, rel := splitRelease(t.Version)
	var conf, install []string
	for _, f := range pkgFiles {
		if f.Only != "" {
			continue
		}
		macro := "$(INSTALL_BIN)"
		if f.Conf {
			conf = append(conf, f.Dest)
			macro = "$(INSTALL_CONF)"
		}
		install = append(install, fmt.Sprintf("%s $(PKG_BUILD_DIR)/%s $(1)%s", macro, f.Src, f.Dest))
	}
	return render(template.Must(template.New("Makefile").Parse(feedMakefile)), map[string]any{
		"Version": ver, "Release": strings.TrimPrefix(rel, "r"), "Hash": hash,
		"License": license, "Maintainer": maintainer, "Homepage": homepage,
		"Describe": t.Describe, "Conffiles": conf, "Install": install,
		"Tags": buildflags.Tags,
	})
}

// writeSource writes dist/offload-VERSION.tar.gz, its .sha256 and
// dist/feed/net/offload/Makefile, and returns their paths.
func writeSource(ctx context.Context, t *tree, out string) ([]string, error) {
	tgz, err := sourceTarball(ctx, t)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(tgz)
	hash := hex.EncodeToString(sum[:])
	ver, _ := splitRelease(t.Version)
	name := "offload-" + ver + ".tar.gz"
	paths := []string{filepath.Join(out, name), filepath.Join(out, "feed", "net", "offload", "Makefile")}
	if err := os.WriteFile(paths[0], tgz, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(paths[0]+".sha256", []byte(hash+"  "+name+"\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(paths[1]), 0o755); err != nil {
		return nil, err
	}
	return paths, os.WriteFile(paths[1], renderFeedMakefile(t, hash), 0o644)
}
