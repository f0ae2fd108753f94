package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Debian's kernel package ships no modules.dep, so the load order is worked
// out here from the depends= string every .ko carries in its .modinfo section
// (what modinfo(8) prints).

// modName normalises a module name: the kernel treats '-' and '_' alike
// (aesni-intel.ko registers as aesni_intel).
func modName(s string) string {
	s = filepath.Base(s)
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		s = strings.TrimSuffix(s, ext)
	}
	s = strings.TrimSuffix(s, ".ko")
	return strings.ReplaceAll(s, "-", "_")
}

// modInfo is what the harness needs from a .ko's .modinfo section.
type modInfo struct {
	Name     string
	Depends  []string
	Vermagic string
}

// parseModinfo parses the NUL-separated key=value strings of a .modinfo
// section.
func parseModinfo(b []byte) modInfo {
	var mi modInfo
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if !ok {
			continue
		}
		switch k {
		case "name":
			mi.Name = v
		case "vermagic":
			mi.Vermagic = v
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d = strings.TrimSpace(d); d != "" {
					mi.Depends = append(mi.Depends, modName(d))
				}
			}
		}
	}
	return mi
}

// readModinfo reads the .modinfo section of an (uncompressed) .ko file.
func readModinfo(file string) (modInfo, error) {
	f, err := elf.Open(file)
	if err != nil {
		return modInfo{}, fmt.Errorf("modinfo: %w", err)
	}
	defer f.Close()
	s := f.Section(".modinfo")
	if s == nil {
		return modInfo{}, fmt.Errorf("modinfo: %s: no .modinfo section (not a kernel module?)", file)
	}
	b, err := s.Data()
	if err != nil {
		return modInfo{}, fmt.Errorf("modinfo: %s: %w", file, err)
	}
	mi := parseModinfo(b)
	if mi.Name == "" {
		mi.Name = modName(file)
	}
	return mi, nil
}

// moduleSet indexes one kernel's modules.
type moduleSet struct {
	dir     string            // .../lib/modules/RELEASE
	files   map[string]string // name -> .ko path
	builtin map[string]bool   // names built into the kernel image
	scratch string            // where compressed modules are unpacked
}

// loadModuleSet indexes the .ko files under dir/kernel and reads
// dir/modules.builtin.
func loadModuleSet(dir, scratch string) (*moduleSet, error) {
	ms := &moduleSet{dir: dir, files: map[string]string{}, builtin: map[string]bool{}, scratch: scratch}
	err := filepath.WalkDir(filepath.Join(dir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.Contains(d.Name(), ".ko") {
			ms.files[modName(d.Name())] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	f, err := os.Open(filepath.Join(dir, "modules.builtin"))
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			ms.builtin[modName(line)] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	return ms, nil
}

// plain returns an uncompressed copy of a module file (the file itself when
// it is not compressed).
func (ms *moduleSet) plain(file string) (string, error) {
	var tool string
	switch {
	case strings.HasSuffix(file, ".ko"):
		return file, nil
	case strings.HasSuffix(file, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(file, ".ko.zst"):
		tool = "zstd"
	case strings.HasSuffix(file, ".ko.gz"):
		tool = "gzip"
	default:
		return "", fmt.Errorf("modules: %s: unknown module file type", file)
	}
	out := filepath.Join(ms.scratch, modName(file)+".ko")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	b, err := exec.Command(tool, "-dc", file).Output()
	if err != nil {
		return "", fmt.Errorf("modules: %s -dc %s: %w", tool, file, err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return "", fmt.Errorf("modules: %w", err)
	}
	return out, nil
}

// modReq is a module the guest should load.
type modReq struct {
	Name     string
	File     string // set for out-of-tree modules (-ko)
	Required bool   // a failure to find or load it fails the run
}

// loadItem is one insmod of the guest's load order.
type loadItem struct {
	Name     string
	File     string // host path of the uncompressed .ko
	Required bool
}

// errModuleMissing is wrapped when a module is neither a .ko nor built in.
var errModuleMissing = errors.New("module not found in this kernel")

// resolveModules orders the requested modules and their dependencies so that
// each comes after everything it depends on. Built-in modules are dropped,
// and so are optional modules this kernel does not have (noted in notes).
// depsOf returns the dependencies of a .ko file.
func resolveModules(reqs []modReq, files map[string]string, builtin map[string]bool,
	depsOf func(file string) ([]string, error)) (order []loadItem, notes []string, err error) {

	extra := map[string]string{} // out-of-tree modules: name -> file
	for _, r := range reqs {
		if r.File != "" {
			extra[modName(r.Name)] = r.File
		}
	}
	lookup := func(n string) (string, bool) {
		if f, ok := extra[n]; ok {
			return f, true
		}
		f, ok := files[n]
		return f, ok
	}

	// Required modules go first: everything they pull in is then required
	// too, and an optional module never hides a missing required one.
	sorted := append([]modReq(nil), reqs...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Required && !sorted[j].Required })

	const (
		visiting = 1
		done     = 2
	)
	state := map[string]int{}
	loadable := map[string]bool{}
	var visit func(n string, chain []string, req bool) (bool, error)
	visit = func(n string, chain []string, req bool) (bool, error) {
		switch state[n] {
		case done:
			return loadable[n], nil
		case visiting:
			return false, fmt.Errorf("modules: dependency cycle: %s -> %s", strings.Join(chain, " -> "), n)
		}
		file, ok := lookup(n)
		if !ok {
			state[n] = done
			switch {
			case builtin[n]:
				loadable[n] = true
				return true, nil
			case !req:
				notes = append(notes, fmt.Sprintf("optional module %s is not in this kernel, skipped", n))
				return false, nil
			case len(chain) > 0:
				return false, fmt.Errorf("modules: %s (needed by %s): %w", n, strings.Join(chain, " -> "), errModuleMissing)
			default:
				return false, fmt.Errorf("modules: %s: %w", n, errModuleMissing)
			}
		}
		state[n] = visiting
		deps, err := depsOf(file)
		if err != nil {
			return false, err
		}
		for _, d := range deps {
			ok, err := visit(d, append(chain, n), req)
			if err != nil {
				return false, err
			}
			if !ok {
				state[n] = done
				notes = append(notes, fmt.Sprintf("optional module %s skipped: it needs %s", n, d))
				return false, nil
			}
		}
		state[n] = done
		loadable[n] = true
		order = append(order, loadItem{Name: n, File: file, Required: req})
		return true, nil
	}
	for _, r := range sorted {
		if _, err := visit(modName(r.Name), nil, r.Required); err != nil {
			return nil, nil, err
		}
	}
	return order, notes, nil
}

// resolve works out the load order of reqs in this kernel. For each
// out-of-tree module it also checks that it was built for release.
func (ms *moduleSet) resolve(reqs []modReq, release string) ([]loadItem, []string, error) {
	for i, r := range reqs {
		if r.File == "" {
			continue
		}
		mi, err := readModinfo(r.File)
		if err != nil {
			return nil, nil, err
		}
		if v := strings.Fields(mi.Vermagic); len(v) == 0 || v[0] != release {
			return nil, nil, fmt.Errorf("modules: %s was built for kernel %q, the guest runs %s", r.File, mi.Vermagic, release)
		}
		reqs[i].Name = mi.Name
	}
	depsOf := func(file string) ([]string, error) {
		p, err := ms.plain(file)
		if err != nil {
			return nil, err
		}
		mi, err := readModinfo(p)
		if err != nil {
			return nil, err
		}
		return mi.Depends, nil
	}
	order, notes, err := resolveModules(reqs, ms.files, ms.builtin, depsOf)
	if err != nil {
		return nil, nil, err
	}
	for i := range order {
		p, err := ms.plain(order[i].File)
		if err != nil {
			return nil, nil, err
		}
		order[i].File = p
	}
	var builtins []string
	for _, r := range reqs {
		if n := modName(r.Name); ms.builtin[n] && r.File == "" {
			if _, ok := ms.files[n]; !ok {
				builtins = append(builtins, n)
			}
		}
	}
	if len(builtins) > 0 {
		sort.Strings(builtins)
		notes = append(notes, "built into the kernel: "+strings.Join(builtins, " "))
	}
	return order, notes, nil
}
