package main

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// -deb PKG puts the programs of a Debian package of the guest's architecture
// into the guest: wg from wireguard-tools, say, which the busybox in the
// guest does not have. The package is fetched like the kernel (apt-get
// download, dpkg-deb -x into the cache), its ELF programs are copied to the
// same paths in the guest, and the shared libraries they need (DT_NEEDED,
// followed through the libraries' own) and the dynamic loader (PT_INTERP)
// are looked up in the fetched packages, libc6 always among them. A library
// none of them ships is looked for in the library packages they depend on
// (apt-cache depends, names starting with "lib", and zlib1g), followed as deep as needed:
// -deb openssh-server brings libssl3, libwrap0 and the rest. Nothing runs
// the guest's ldd: the host cannot execute the guest's binaries.

// debLibPackage is fetched beside every -deb package: it ships the loader and
// libc that almost every Debian program needs.
const debLibPackage = "libc6"

// guestCopy is one host file copied to a guest path.
type guestCopy struct {
	Guest string
	Host  string
	Perm  uint32
}

// progDirs are where a package's programs are taken from.
var progDirs = []string{"bin", "sbin", "usr/bin", "usr/sbin"}

// fetchDebPrograms fetches pkgs (and libc6) for the guest architecture and
// returns the programs and the libraries they need.
func fetchDebPrograms(ctx context.Context, cache string, a *archSpec, pkgs []string, logf func(string, ...any)) ([]guestCopy, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	var roots, fetched []string
	fetch := func(ps []string) error {
		if err := fetchDebs(ctx, filepath.Join(cache, a.DebArch, "deb"), ps, a.DebArch, logf); err != nil {
			return fmt.Errorf("-deb: %w", err)
		}
		for _, p := range ps {
			roots = append(roots, filepath.Join(cache, a.DebArch, "deb", p, "root"))
			fetched = append(fetched, p)
		}
		return nil
	}
	if err := fetch(append(append([]string{}, pkgs...), debLibPackage)); err != nil {
		return nil, err
	}
	var progs []guestCopy
	for i, p := range pkgs {
		found, err := debPrograms(roots[i], a.ELF)
		if err != nil {
			return nil, fmt.Errorf("-deb %s: %w", p, err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("-deb %s: the package has no %v programs in %s", p, a.ELF, strings.Join(progDirs, ", "))
		}
		progs = append(progs, found...)
	}
	// Each pass fetches the library dependencies of the packages the pass
	// before it fetched, until every library is found or none is left.
	expanded := 0
	for {
		libs, err := resolveLibs(progs, roots, a.ELF)
		var miss *missingLibError
		if !errors.As(err, &miss) {
			if err != nil {
				return nil, fmt.Errorf("-deb: %w", err)
			}
			return append(progs, libs...), nil
		}
		next := len(fetched)
		deps, derr := debLibDepends(ctx, fetched[expanded:next], a.DebArch)
		if derr != nil {
			return nil, fmt.Errorf("-deb: %w", derr)
		}
		var more []string
		for _, d := range deps {
			if !slices.Contains(fetched, d) {
				more = append(more, d)
			}
		}
		if len(more) == 0 {
			return nil, fmt.Errorf("-deb: %w", err)
		}
		if err := fetch(more); err != nil {
			return nil, err
		}
		expanded = next
	}
}

// fetchDebs makes sure each package is unpacked in base/PKG/root: the ones
// not there yet are downloaded with one apt-get download (apt's start is
// most of the time of a small package) and unpacked one by one with
// fetchDeb's atomic rename.
func fetchDebs(ctx context.Context, base string, pkgs []string, debArch string, logf func(string, ...any)) error {
	var want []string
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(base, p, "root")); err != nil {
			want = append(want, p)
		}
	}
	if len(want) == 0 {
		return nil
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	tmp, err := os.MkdirTemp(base, ".fetch-")
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	logf("downloading %s (%s) into %s", strings.Join(want, " "), debArch, base)
	args := []string{"download"}
	for _, p := range want {
		args = append(args, p+":"+debArch)
	}
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s", strings.Join(want, " "), err, bytes.TrimSpace(out))
	}
	for _, p := range want {
		// Files are named PKG_VERSION_ARCH.deb.
		debs, _ := filepath.Glob(filepath.Join(tmp, p+"_*.deb"))
		if len(debs) != 1 {
			return fmt.Errorf("apt-get download %s:%s: want one .deb, got %d", p, debArch, len(debs))
		}
		if err := unpackDeb(ctx, debs[0], filepath.Join(base, p)); err != nil {
			return err
		}
	}
	return nil
}

// unpackDeb unpacks a downloaded .deb into dir/root, atomically.
func unpackDeb(ctx context.Context, deb, dir string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".unpack-")
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	root := filepath.Join(tmp, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
		return fmt.Errorf("dpkg-deb -x %s: %w: %s", filepath.Base(deb), err, bytes.TrimSpace(out))
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "root")); statErr == nil {
			return nil // another run unpacked it first
		}
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// missingLibError is a library that none of the fetched packages ships.
type missingLibError struct{ prog, lib string }

func (e *missingLibError) Error() string {
	return fmt.Sprintf("%s needs %s, which neither the fetched packages nor the library packages they depend on ship", e.prog, e.lib)
}

// debLibDepends lists the library packages (lib*, zlib1g) that
// pkgs depend on, from one apt-cache depends.
func debLibDepends(ctx context.Context, pkgs []string, debArch string) ([]string, error) {
	args := []string{"depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"}
	for _, p := range pkgs {
		args = append(args, p+":"+debArch)
	}
	out, err := exec.CommandContext(ctx, "apt-cache", args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-cache depends %s: %w: %s", strings.Join(pkgs, " "), err, bytes.TrimSpace(out))
	}
	return parseLibDepends(string(out)), nil
}

// parseLibDepends picks the real (not <virtual>) library packages out of
// apt-cache depends output, without their architecture qualifier.
func parseLibDepends(out string) []string {
	var libs []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimLeft(strings.TrimSpace(l), "|")
		dep, ok := strings.CutPrefix(l, "Depends: ")
		if !ok && !strings.HasPrefix(l, "PreDepends: ") {
			continue
		}
		if !ok {
			dep = strings.TrimPrefix(l, "PreDepends: ")
		}
		if strings.HasPrefix(dep, "<") {
			continue
		}
		dep, _, _ = strings.Cut(dep, ":")
		// zlib1g is the one library package not named lib*.
		if (strings.HasPrefix(dep, "lib") || dep == "zlib1g") && !slices.Contains(libs, dep) {
			libs = append(libs, dep)
		}
	}
	return libs
}

// debPrograms lists the ELF executables for machine m in a package root;
// scripts (wg-quick needs bash) are left out.
func debPrograms(root string, m elf.Machine) ([]guestCopy, error) {
	var out []guestCopy
	for _, d := range progDirs {
		ents, err := os.ReadDir(filepath.Join(root, d))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if !e.Type().IsRegular() {
				continue
			}
			host := filepath.Join(root, d, e.Name())
			if f, err := elf.Open(host); err == nil {
				ok := f.Machine == m && (f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN)
				f.Close()
				if ok {
					out = append(out, guestCopy{Guest: "/" + d + "/" + e.Name(), Host: host, Perm: 0o755})
				}
			}
		}
	}
	return out, nil
}

// inRoot resolves a guest path inside a package root, following symlinks
// (absolute ones relative to the root), and returns the host file.
func inRoot(root, guest string) (string, bool) {
	p := path.Clean("/" + guest)
	for range 16 {
		host := filepath.Join(root, filepath.FromSlash(p))
		fi, err := os.Lstat(host)
		if err != nil {
			return "", false
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			return host, fi.Mode().IsRegular()
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", false
		}
		if path.IsAbs(target) {
			p = path.Clean(target)
		} else {
			p = path.Join(path.Dir(p), target)
		}
	}
	return "", false
}

// libDirs are the guest folders searched for a DT_NEEDED name, as the
// loader of a Debian multiarch system does without an ld.so.cache.
func libDirs(roots []string) []string {
	seen := map[string]bool{}
	var dirs []string
	for _, r := range roots {
		for _, base := range []string{"lib", "usr/lib"} {
			ents, _ := os.ReadDir(filepath.Join(r, base))
			for _, e := range ents {
				// The multiarch triplet folder, e.g. lib/mipsel-linux-gnu.
				if e.IsDir() && strings.Count(e.Name(), "-") >= 2 {
					d := "/" + base + "/" + e.Name()
					if !seen[d] {
						seen[d] = true
						dirs = append(dirs, d)
					}
				}
			}
		}
	}
	sort.Strings(dirs)
	return append(dirs, "/lib", "/usr/lib")
}

// resolveLibs finds the loader and every shared library the programs need,
// transitively, in the package roots.
func resolveLibs(progs []guestCopy, roots []string, m elf.Machine) ([]guestCopy, error) {
	dirs := libDirs(roots)
	find := func(guest string) (string, bool) {
		for _, r := range roots {
			if h, ok := inRoot(r, guest); ok {
				return h, true
			}
		}
		return "", false
	}
	var out []guestCopy
	have := map[string]bool{}
	queue := append([]guestCopy(nil), progs...)
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		interp, needed, err := elfDeps(c.Host, m)
		if err != nil {
			return nil, err
		}
		if interp != "" && !have[interp] {
			h, ok := find(interp)
			if !ok {
				return nil, fmt.Errorf("%s: loader %s is in none of the fetched packages", c.Guest, interp)
			}
			have[interp] = true
			out = append(out, guestCopy{Guest: interp, Host: h, Perm: 0o755})
		}
		for _, n := range needed {
			if have["needed:"+n] {
				continue
			}
			var lib guestCopy
			for _, d := range dirs {
				if h, ok := find(d + "/" + n); ok {
					lib = guestCopy{Guest: d + "/" + n, Host: h, Perm: 0o755}
					break
				}
			}
			if lib.Host == "" {
				return nil, &missingLibError{prog: c.Guest, lib: n}
			}
			have["needed:"+n] = true
			out = append(out, lib)
			queue = append(queue, lib)
		}
	}
	return out, nil
}

// elfDeps returns the loader and the DT_NEEDED names of an ELF file for m.
func elfDeps(file string, m elf.Machine) (interp string, needed []string, err error) {
	f, err := elf.Open(file)
	if err != nil {
		return "", nil, fmt.Errorf("elf: %w", err)
	}
	defer f.Close()
	if f.Machine != m {
		return "", nil, fmt.Errorf("%s is for %v, want %v", file, f.Machine, m)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "", nil, fmt.Errorf("%s: PT_INTERP: %w", file, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	needed, err = f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", file, err)
	}
	return interp, needed, nil
}
