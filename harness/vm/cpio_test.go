package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

type cpioRecord struct {
	name string
	mode uint32
	data []byte
}

// readNewc is an independent newc reader for the tests.
func readNewc(t *testing.T, b []byte) []cpioRecord {
	t.Helper()
	var recs []cpioRecord
	off := 0
	align := func() { off = (off + 3) &^ 3 }
	for {
		if off+110 > len(b) {
			t.Fatalf("truncated header at %d", off)
		}
		h := b[off : off+110]
		if string(h[:6]) != "070701" {
			t.Fatalf("bad magic %q at %d", h[:6], off)
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(h[6+8*i:6+8*i+8]), 16, 32)
			if err != nil {
				t.Fatalf("header field %d: %v", i, err)
			}
			return uint32(v)
		}
		mode, size, namesize := field(1), field(6), field(11)
		off += 110
		name := string(b[off : off+int(namesize)-1])
		if b[off+int(namesize)-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", name)
		}
		off += int(namesize)
		align()
		data := b[off : off+int(size)]
		off += int(size)
		align()
		if name == "TRAILER!!!" {
			if off != len(b) {
				t.Fatalf("%d bytes after the trailer", len(b)-off)
			}
			return recs
		}
		recs = append(recs, cpioRecord{name, mode, data})
	}
}

func testTree(t *testing.T) *fsTree {
	src := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(src, []byte("copied from the host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tr := newFSTree()
	tr.file("/init", 0o755, []byte("#!/bin/sh\necho hi\n"))
	tr.file("/a/b/c/odd", 0o644, []byte("12345")) // parents are made
	tr.copyFile("/tests/x.test", 0o755, src)
	tr.symlink("/bin/sh", "busybox")
	tr.file("/empty", 0o600, []byte{})
	return tr
}

func TestWriteCPIO(t *testing.T) {
	var buf bytes.Buffer
	if err := writeCPIO(&buf, testTree(t)); err != nil {
		t.Fatal(err)
	}
	recs := readNewc(t, buf.Bytes())
	want := map[string]cpioRecord{
		"a":            {mode: modeDir | 0o755},
		"a/b":          {mode: modeDir | 0o755},
		"a/b/c":        {mode: modeDir | 0o755},
		"a/b/c/odd":    {mode: modeFile | 0o644, data: []byte("12345")},
		"bin":          {mode: modeDir | 0o755},
		"bin/sh":       {mode: modeSymlink | 0o777, data: []byte("busybox")},
		"empty":        {mode: modeFile | 0o600, data: []byte{}},
		"init":         {mode: modeFile | 0o755, data: []byte("#!/bin/sh\necho hi\n")},
		"tests":        {mode: modeDir | 0o755},
		"tests/x.test": {mode: modeFile | 0o755, data: []byte("copied from the host\n")},
	}
	if len(recs) != len(want) {
		t.Errorf("%d records, want %d: %v", len(recs), len(want), recs)
	}
	seen := map[string]int{}
	for i, r := range recs {
		seen[r.name] = i
		w, ok := want[r.name]
		if !ok {
			t.Errorf("unexpected record %q", r.name)
			continue
		}
		if r.mode != w.mode || !bytes.Equal(r.data, w.data) {
			t.Errorf("%s: mode %o data %q, want mode %o data %q", r.name, r.mode, r.data, w.mode, w.data)
		}
	}
	if seen["a"] > seen["a/b"] || seen["a/b"] > seen["a/b/c/odd"] || seen["tests"] > seen["tests/x.test"] {
		t.Errorf("a folder comes after its contents: %v", seen)
	}
}

func TestWriteCPIOMissingSource(t *testing.T) {
	tr := newFSTree()
	tr.copyFile("/x", 0o644, filepath.Join(t.TempDir(), "nope"))
	if err := writeCPIO(&bytes.Buffer{}, tr); err == nil {
		t.Fatal("no error for a missing host file")
	}
}

// TestInitramfsBusyboxCpio cross-checks the archive with busybox's own cpio
// reader, where busybox is installed.
func TestInitramfsBusyboxCpio(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox not installed")
	}
	dir := t.TempDir()
	gz := filepath.Join(dir, "initrd.gz")
	if err := writeInitramfs(gz, testTree(t)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(gz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bb, "cpio", "-i", "-d")
	cmd.Dir = out
	cmd.Stdin = zr
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("busybox cpio -i: %v: %s", err, msg)
	}
	check := func(name, want string) {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	check("a/b/c/odd", "12345")
	check("tests/x.test", "copied from the host\n")
	if target, err := os.Readlink(filepath.Join(out, "bin/sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh -> %q, %v", target, err)
	}
	fi, err := os.Stat(filepath.Join(out, "init"))
	if err != nil || fmt.Sprintf("%o", fi.Mode().Perm()) != "755" {
		t.Errorf("init: %v %v", fi, err)
	}
}
