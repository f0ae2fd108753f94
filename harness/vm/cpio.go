package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// The initramfs is a gzip-compressed "newc" cpio archive (see the kernel's
// Documentation/driver-api/early-userspace/buffer-format.rst). There is no
// cpio binary on the machines this runs on, and the format is tiny, so it is
// written here.

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
)

// fsEntry is one file, directory or symlink of the guest's root file system.
type fsEntry struct {
	Path   string // absolute guest path, e.g. /bin/busybox
	Mode   uint32 // type bits | permission bits
	Data   []byte // file contents, or symlink target
	Source string // host file to copy when Data is nil (regular files only)
}

// fsTree collects the guest's files; later additions replace earlier ones.
type fsTree struct {
	entries map[string]fsEntry
}

func newFSTree() *fsTree { return &fsTree{entries: map[string]fsEntry{}} }

func (t *fsTree) add(e fsEntry) {
	e.Path = path.Clean("/" + e.Path)
	for dir := path.Dir(e.Path); dir != "/"; dir = path.Dir(dir) {
		if _, ok := t.entries[dir]; !ok {
			t.entries[dir] = fsEntry{Path: dir, Mode: modeDir | 0o755}
		}
	}
	t.entries[e.Path] = e
}

func (t *fsTree) dir(p string) { t.add(fsEntry{Path: p, Mode: modeDir | 0o755}) }

func (t *fsTree) file(p string, perm uint32, data []byte) {
	t.add(fsEntry{Path: p, Mode: modeFile | perm, Data: data})
}

func (t *fsTree) copyFile(p string, perm uint32, source string) {
	t.add(fsEntry{Path: p, Mode: modeFile | perm, Source: source})
}

func (t *fsTree) symlink(p, target string) {
	t.add(fsEntry{Path: p, Mode: modeSymlink | 0o777, Data: []byte(target)})
}

// sorted returns the entries so that every directory comes before its
// contents.
func (t *fsTree) sorted() []fsEntry {
	out := make([]fsEntry, 0, len(t.entries))
	for _, e := range t.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// cpioWriter writes a newc archive.
type cpioWriter struct {
	w     io.Writer
	n     int64
	inode uint32
}

func (c *cpioWriter) write(b []byte) error {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.n % 4; r != 0 {
		return c.write(make([]byte, 4-r))
	}
	return nil
}

// entry writes one header, name and body. name has no leading slash.
func (c *cpioWriter) entry(name string, mode uint32, body []byte) error {
	if strings.ContainsRune(name, 0) {
		return fmt.Errorf("cpio: name %q contains NUL", name)
	}
	if uint64(len(body)) > 0xffffffff {
		return fmt.Errorf("cpio: %s: %d bytes is too large for newc", name, len(body))
	}
	c.inode++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.inode, mode, 0, 0, nlink, 0, len(body), 0, 0, 0, 0, len(name)+1, 0)
	if err := c.write([]byte(hdr)); err != nil {
		return err
	}
	if err := c.write(append([]byte(name), 0)); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if err := c.write(body); err != nil {
		return err
	}
	return c.pad()
}

// writeCPIO writes the tree as a newc archive, with the TRAILER!!! record.
func writeCPIO(w io.Writer, t *fsTree) error {
	c := &cpioWriter{w: w}
	for _, e := range t.sorted() {
		body := e.Data
		if e.Mode&0o170000 == modeFile && body == nil && e.Source != "" {
			b, err := os.ReadFile(e.Source)
			if err != nil {
				return fmt.Errorf("initramfs: %w", err)
			}
			body = b
		}
		if e.Mode&0o170000 == modeDir {
			body = nil
		}
		if err := c.entry(strings.TrimPrefix(e.Path, "/"), e.Mode, body); err != nil {
			return fmt.Errorf("initramfs: %w", err)
		}
	}
	if err := c.entry("TRAILER!!!", 0, nil); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

// writeInitramfs writes the tree as a gzip-compressed newc archive to file.
func writeInitramfs(file string, t *fsTree) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		f.Close()
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := writeCPIO(zw, t); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("initramfs: %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("initramfs: %s: %w", file, err)
	}
	return nil
}
