package main

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The guest boots Debian's own kernel: the package that the architecture's
// meta package (linux-image-amd64, ...) depends on, fetched with
// apt-get download and unpacked with dpkg-deb -x into the cache. Nothing is
// installed on the host. Since Debian's 7.x kernels the image package holds
// no kernel: it depends on linux-binary-RELEASE (the vmlinuz, under
// usr/lib/modules/RELEASE), linux-modules-RELEASE and linux-base-RELEASE,
// which are unpacked into the same tree. apt honours APT_CONFIG, so a
// private sources list (scripts/apt-suite.sh) picks another suite's kernel.

// kernel is an unpacked Debian kernel package.
type kernel struct {
	Package string
	Release string // uname -r, e.g. 6.1.0-57-amd64
	Image   string // the package's vmlinuz
	Vmlinux string // uncompressed ELF with a PVH entry point, or ""
	Modules string // .../lib/modules/RELEASE
}

// cacheDir returns $OFFLOAD_VM_CACHE, or ~/.cache/offload-vm.
func cacheDir() (string, error) {
	if d := os.Getenv("OFFLOAD_VM_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("cache: %w (set OFFLOAD_VM_CACHE)", err)
	}
	return filepath.Join(d, "offload-vm"), nil
}

// kernelPackage asks apt which image package the meta package depends on.
func kernelPackage(ctx context.Context, a *archSpec) (string, error) {
	meta := a.KernelMeta + ":" + a.DebArch
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", meta).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w: %s", meta, err, bytes.TrimSpace(out))
	}
	return parseKernelDepends(string(out), a.KernelMeta)
}

// parseKernelDepends picks the image package out of apt-cache depends output.
func parseKernelDepends(out, meta string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dep, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Depends: ")
		if !ok {
			continue
		}
		dep, _, _ = strings.Cut(dep, ":") // drop an ":armhf" qualifier
		dep = strings.Trim(dep, "<> ")
		if strings.HasPrefix(dep, "linux-image-") && dep != meta {
			return dep, nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s names no linux-image package (run scripts/deps.sh to update the package lists)", meta)
}

// kernelParts returns the packages that hold the kernel of image: image
// itself and the linux-binary-, linux-modules- and linux-base- packages of
// its release that it depends on (none before Debian split them out).
func kernelParts(ctx context.Context, image, debArch string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", image+":"+debArch).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-cache depends %s:%s: %w: %s", image, debArch, err, bytes.TrimSpace(out))
	}
	return append([]string{image}, parseKernelParts(string(out), image)...), nil
}

// parseKernelParts picks the packages of image's own release that carry the
// kernel binary and its modules out of apt-cache depends output.
func parseKernelParts(out, image string) []string {
	release := strings.TrimPrefix(image, "linux-image-")
	var parts []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "|")
		dep, ok := strings.CutPrefix(line, "Depends: ")
		if !ok {
			continue
		}
		dep, _, _ = strings.Cut(dep, ":")
		dep = strings.Trim(dep, "<> ")
		for _, prefix := range []string{"linux-binary-", "linux-modules-", "linux-base-"} {
			if dep == prefix+release && !slices.Contains(parts, dep) {
				parts = append(parts, dep)
			}
		}
	}
	return parts
}

// fetchDeb downloads pkg:debArch with apt-get download and unpacks it into
// dir/root (see fetchTree).
func fetchDeb(ctx context.Context, dir, pkg, debArch string, logf func(string, ...any)) error {
	return fetchTree(ctx, dir, []string{pkg}, debArch, logf)
}

// fetchTree downloads pkgs with apt-get download and unpacks them into one
// tree, dir/root, atomically: concurrent runs sharing the cache each unpack
// into a temporary folder and only one rename wins.
func fetchTree(ctx context.Context, dir string, pkgs []string, debArch string, logf func(string, ...any)) error {
	if _, err := os.Stat(filepath.Join(dir, "root")); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".fetch-")
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	args := []string{"download"}
	for _, p := range pkgs {
		args = append(args, p+":"+debArch)
	}
	what := strings.Join(args[1:], " ")
	logf("downloading %s into %s", what, dir)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download %s: %w: %s", what, err, bytes.TrimSpace(out))
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if len(debs) != len(pkgs) {
		return fmt.Errorf("apt-get download %s: want %d .deb, got %d", what, len(pkgs), len(debs))
	}
	root := filepath.Join(tmp, "root")
	for _, deb := range debs {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb -x %s: %w: %s", filepath.Base(deb), err, bytes.TrimSpace(out))
		}
		if err := os.Remove(deb); err != nil {
			return fmt.Errorf("cache: %w", err)
		}
	}
	final := filepath.Join(tmp, "final")
	if err := os.Mkdir(final, 0o755); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(root, filepath.Join(final, "root")); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	if err := os.Rename(final, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "root")); statErr == nil {
			return nil // another run unpacked it first
		}
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// fetchKernel returns the current Debian kernel for a, downloading it once.
// When apt cannot answer (no package lists, no network) a kernel already in
// the cache is used, with a warning.
func fetchKernel(ctx context.Context, cache string, a *archSpec, wantPVH bool, logf func(string, ...any)) (*kernel, error) {
	base := filepath.Join(cache, a.DebArch)
	if cfg := os.Getenv("APT_CONFIG"); cfg != "" {
		// Another suite's kernels live apart, so that the fallback below
		// never boots one of them in a run of the machine's own suite.
		base = filepath.Join(base, "apt-"+strings.TrimPrefix(filepath.Base(filepath.Dir(cfg)), "apt-"))
	}
	pkg, err := kernelPackage(ctx, a)
	if err != nil {
		cached, _ := filepath.Glob(filepath.Join(base, "linux-image-*", "root"))
		if len(cached) == 0 {
			return nil, fmt.Errorf("kernel: %w", err)
		}
		sort.Strings(cached)
		pkg = filepath.Base(filepath.Dir(cached[len(cached)-1]))
		logf("warning: %v; using cached %s", err, pkg)
	}
	dir := filepath.Join(base, pkg)
	if _, err := os.Stat(filepath.Join(dir, "root")); err != nil {
		parts, err := kernelParts(ctx, pkg, a.DebArch)
		if err != nil {
			return nil, fmt.Errorf("kernel: %w", err)
		}
		if err := fetchTree(ctx, dir, parts, a.DebArch, logf); err != nil {
			return nil, fmt.Errorf("kernel: %w", err)
		}
	}
	k, err := unpackedKernel(filepath.Join(dir, "root"), pkg)
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	if wantPVH && a.PVH {
		v := filepath.Join(dir, "vmlinux")
		if _, err := os.Stat(v); err != nil {
			if err := extractVmlinux(ctx, k.Image, v); err != nil {
				logf("note: no PVH boot, using vmlinuz with the default BIOS: %v", err)
				return k, nil
			}
		}
		k.Vmlinux = v
	}
	return k, nil
}

// unpackedKernel finds the release, vmlinuz and modules in an unpacked
// kernel tree: lib/modules/RELEASE and boot/vmlinuz-RELEASE in the classic
// layout, usr/lib/modules/RELEASE/vmlinuz in the split one.
func unpackedKernel(root, pkg string) (*kernel, error) {
	for _, mods := range []string{filepath.Join(root, "lib", "modules"), filepath.Join(root, "usr", "lib", "modules")} {
		rels, err := os.ReadDir(mods)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil || len(rels) != 1 {
			return nil, fmt.Errorf("%s: want exactly one RELEASE folder in %s (%v)", pkg, mods, err)
		}
		k := &kernel{Package: pkg, Release: rels[0].Name()}
		k.Modules = filepath.Join(mods, k.Release)
		for _, img := range []string{filepath.Join(root, "boot", "vmlinuz-"+k.Release), filepath.Join(k.Modules, "vmlinuz")} {
			if _, err := os.Stat(img); err == nil {
				k.Image = img
				return k, nil
			}
		}
		return nil, fmt.Errorf("%s: no boot/vmlinuz-%s nor %s/vmlinuz (is a linux-binary package missing?)", pkg, k.Release, k.Modules)
	}
	return nil, fmt.Errorf("%s: no lib/modules or usr/lib/modules folder", pkg)
}

var (
	xzMagic   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// extractVmlinux unpacks the compressed ELF kernel from a bzImage (xz up to
// Debian's 6.x, zstd in 7.x) and keeps it only if it has a PVH entry point
// (XEN_ELFNOTE_PHYS32_ENTRY).
func extractVmlinux(ctx context.Context, image, out string) error {
	b, err := os.ReadFile(image)
	if err != nil {
		return fmt.Errorf("vmlinux: %w", err)
	}
	var cmd *exec.Cmd
	if i := bytes.Index(b, xzMagic); i >= 0 {
		cmd = exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
		cmd.Stdin = bytes.NewReader(b[i:])
	} else if i := bytes.Index(b, zstdMagic); i >= 0 {
		cmd = exec.CommandContext(ctx, "zstd", "-dcq")
		cmd.Stdin = bytes.NewReader(b[i:])
	} else {
		return fmt.Errorf("vmlinux: %s: no xz or zstd stream inside", image)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	// zstd complains about the bzImage's bytes after its one frame but has
	// written the whole kernel by then: the ELF check below decides.
	if err != nil && (len(raw) == 0 || cmd.Args[0] == "xz") {
		return fmt.Errorf("vmlinux: %s: %w: %s", cmd.Args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := checkPVH(raw); err != nil {
		return fmt.Errorf("vmlinux: %w", err)
	}
	tmp := out + ".tmp" + fmt.Sprint(os.Getpid())
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return fmt.Errorf("vmlinux: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vmlinux: %w", err)
	}
	return nil
}

// xenElfnotePhys32Entry is the ELF note type of the PVH entry point.
const xenElfnotePhys32Entry = 18

var errNoPVH = errors.New("kernel has no PVH entry note")

// checkPVH reports whether an ELF kernel carries the Xen PVH entry note.
func checkPVH(raw []byte) error {
	f, err := elf.NewFile(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		for len(notes) >= 12 {
			namesz := binary.LittleEndian.Uint32(notes[0:])
			descsz := binary.LittleEndian.Uint32(notes[4:])
			typ := binary.LittleEndian.Uint32(notes[8:])
			name := notes[12:]
			nameEnd := 12 + (int(namesz)+3)&^3
			descEnd := nameEnd + (int(descsz)+3)&^3
			if descEnd > len(notes) || int(namesz) > len(name) {
				break
			}
			if string(bytes.TrimRight(name[:namesz], "\x00")) == "Xen" && typ == xenElfnotePhys32Entry {
				return nil
			}
			notes = notes[descEnd:]
		}
	}
	return errNoPVH
}

// fetchBusybox returns a static busybox for the guest, from the
// busybox-static package of the guest's architecture.
func fetchBusybox(ctx context.Context, cache string, a *archSpec, logf func(string, ...any)) (string, error) {
	dir := filepath.Join(cache, a.DebArch, "busybox-static")
	if err := fetchDeb(ctx, dir, "busybox-static", a.DebArch, logf); err != nil {
		host := "/bin/busybox"
		if a.Name == "amd64" && checkStaticELF(host, a.ELF) == nil {
			logf("warning: %v; using the host's %s", err, host)
			return host, nil
		}
		return "", fmt.Errorf("busybox: %w", err)
	}
	// bin/busybox up to bookworm, usr/bin/busybox in merged-/usr suites.
	bb := filepath.Join(dir, "root", "bin", "busybox")
	if !fileExists(bb) {
		bb = filepath.Join(dir, "root", "usr", "bin", "busybox")
	}
	if err := checkStaticELF(bb, a.ELF); err != nil {
		return "", fmt.Errorf("busybox: %w", err)
	}
	return bb, nil
}

// checkStaticELF checks that file is a statically linked executable for m.
func checkStaticELF(file string, m elf.Machine) error {
	f, err := elf.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != m {
		return fmt.Errorf("%s is for %v, want %v", file, f.Machine, m)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked", file)
		}
	}
	return nil
}
