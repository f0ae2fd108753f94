package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseModinfo(t *testing.T) {
	raw := "license=GPL\x00depends=virtio,virtio_ring,crypto-engine\x00retpoline=Y\x00" +
		"name=virtio_crypto\x00vermagic=6.1.0-57-amd64 SMP preempt mod_unload modversions \x00\x00\x00"
	mi := parseModinfo([]byte(raw))
	if mi.Name != "virtio_crypto" {
		t.Errorf("Name = %q", mi.Name)
	}
	if want := []string{"virtio", "virtio_ring", "crypto_engine"}; !slices.Equal(mi.Depends, want) {
		t.Errorf("Depends = %q, want %q", mi.Depends, want)
	}
	if !strings.HasPrefix(mi.Vermagic, "6.1.0-57-amd64 ") {
		t.Errorf("Vermagic = %q", mi.Vermagic)
	}
	if mi := parseModinfo([]byte("depends=\x00name=af_alg\x00")); len(mi.Depends) != 0 {
		t.Errorf("empty depends= gave %q", mi.Depends)
	}
}

func TestModName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/arch/x86/crypto/aesni-intel.ko": "aesni_intel",
		"virtio_crypto.ko.xz":                   "virtio_crypto",
		"crypto_engine":                         "crypto_engine",
		"crypto-engine.ko.zst":                  "crypto_engine",
	} {
		if got := modName(in); got != want {
			t.Errorf("modName(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeKernel is a module graph for resolveModules.
type fakeKernel struct {
	deps    map[string][]string // name -> depends
	builtin []string
}

func (k fakeKernel) resolve(reqs []modReq) ([]loadItem, []string, error) {
	files := map[string]string{}
	for n := range k.deps {
		files[n] = "/k/" + n + ".ko"
	}
	builtin := map[string]bool{}
	for _, b := range k.builtin {
		builtin[b] = true
	}
	depsOf := func(file string) ([]string, error) {
		if file == "/k/broken.ko" {
			return nil, errors.New("bad ELF")
		}
		return k.deps[modName(file)], nil
	}
	return resolveModules(reqs, files, builtin, depsOf)
}

var virtioKernel = fakeKernel{
	deps: map[string][]string{
		"virtio_crypto":         {"virtio", "virtio_ring", "crypto_engine"},
		"virtio_pci":            {"virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_ring", "virtio"},
		"virtio":                {},
		"virtio_ring":           {"virtio"},
		"virtio_pci_modern_dev": {},
		"virtio_pci_legacy_dev": {},
		"crypto_engine":         {},
		"af_alg":                {},
		"algif_skcipher":        {"af_alg"},
		"aesni_intel":           {"crypto_simd", "cryptd"},
		"crypto_simd":           {"cryptd"},
		"cryptd":                {},
		"ctr":                   {},
		"needs_gone":            {"gone"},
		"broken":                {},
		"loop_a":                {"loop_b"},
		"loop_b":                {"loop_a"},
		"uses_cbc":              {"cbc"},
	},
	builtin: []string{"cbc", "aes_generic"},
}

func names(items []loadItem) []string {
	var s []string
	for _, it := range items {
		s = append(s, it.Name)
	}
	return s
}

// checkOrder fails unless every module comes after its dependencies.
func checkOrder(t *testing.T, k fakeKernel, order []loadItem) {
	t.Helper()
	pos := map[string]int{}
	for i, it := range order {
		if _, dup := pos[it.Name]; dup {
			t.Errorf("%s loaded twice", it.Name)
		}
		pos[it.Name] = i
	}
	for _, it := range order {
		for _, d := range k.deps[it.Name] {
			if slices.Contains(k.builtin, d) {
				continue
			}
			if p, ok := pos[d]; !ok || p > pos[it.Name] {
				t.Errorf("%s is loaded before its dependency %s: %v", it.Name, d, names(order))
			}
		}
	}
}

func TestResolveModulesOrder(t *testing.T) {
	reqs := []modReq{
		{Name: "af_alg"}, {Name: "algif_skcipher"}, {Name: "cbc"}, {Name: "aesni-intel"}, {Name: "ctr"},
		{Name: "virtio_pci", Required: true}, {Name: "virtio_crypto", Required: true},
	}
	order, _, err := virtioKernel.resolve(reqs)
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, virtioKernel, order)
	want := []string{"af_alg", "algif_skcipher", "aesni_intel", "crypto_simd", "cryptd", "ctr",
		"virtio_pci", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_ring", "virtio",
		"virtio_crypto", "crypto_engine"}
	got := names(order)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("loaded %v, want %v (cbc is built in)", got, want)
	}
	for _, it := range order {
		required := strings.HasPrefix(it.Name, "virtio") || it.Name == "crypto_engine"
		if it.Required != required {
			t.Errorf("%s: Required = %v, want %v", it.Name, it.Required, required)
		}
	}
}

func TestResolveModulesRequiredWinsOverOptional(t *testing.T) {
	// cryptd is first asked for as an optional module, then pulled in by a
	// required one: it must be required.
	order, _, err := virtioKernel.resolve([]modReq{{Name: "cryptd"}, {Name: "aesni_intel", Required: true}})
	if err != nil {
		t.Fatal(err)
	}
	checkOrder(t, virtioKernel, order)
	for _, it := range order {
		if !it.Required {
			t.Errorf("%s is optional, want required", it.Name)
		}
	}
}

func TestResolveModulesErrors(t *testing.T) {
	cases := []struct {
		reqs []modReq
		want string
	}{
		{[]modReq{{Name: "nope", Required: true}}, "nope: module not found"},
		{[]modReq{{Name: "needs_gone", Required: true}}, "gone (needed by needs_gone)"},
		{[]modReq{{Name: "loop_a", Required: true}}, "dependency cycle: loop_a -> loop_b -> loop_a"},
		{[]modReq{{Name: "broken", Required: true}}, "bad ELF"},
		// An optional module that is missing must not hide a required one.
		{[]modReq{{Name: "gone"}, {Name: "needs_gone", Required: true}}, "gone (needed by needs_gone)"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.reqs), func(t *testing.T) {
			_, _, err := virtioKernel.resolve(c.reqs)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if strings.Contains(c.want, "not found") && !errors.Is(err, errModuleMissing) {
				t.Errorf("err does not wrap errModuleMissing")
			}
		})
	}
}

func TestResolveModulesOptional(t *testing.T) {
	order, notes, err := virtioKernel.resolve([]modReq{
		{Name: "nope"}, {Name: "needs_gone"}, {Name: "uses_cbc"}, {Name: "af_alg"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(order); !slices.Equal(got, []string{"uses_cbc", "af_alg"}) {
		t.Errorf("loaded %v, want [uses_cbc af_alg]", got)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"nope is not in this kernel", "needs_gone skipped: it needs gone"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q lack %q", joined, want)
		}
	}
}

// TestKernelModuleSet runs against the Debian kernel in the cache, when a
// run of the harness has put one there.
func TestKernelModuleSet(t *testing.T) {
	cache, err := cacheDir()
	if err != nil {
		t.Skip(err)
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "amd64", "linux-image-*", "root", "lib", "modules", "*"))
	if len(dirs) == 0 {
		t.Skip("no amd64 kernel in the cache; go run ./harness/vm fetches one")
	}
	ms, err := loadModuleSet(dirs[0], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !ms.builtin["cbc"] {
		t.Error("cbc is not in modules.builtin")
	}
	order, _, err := ms.resolve([]modReq{{Name: "virtio_pci", Required: true}, {Name: "virtio_crypto", Required: true}},
		filepath.Base(dirs[0]))
	if err != nil {
		t.Fatal(err)
	}
	got := names(order)
	for _, want := range []string{"virtio", "virtio_ring", "virtio_pci", "crypto_engine", "virtio_crypto"} {
		if !slices.Contains(got, want) {
			t.Errorf("load order %v lacks %s", got, want)
		}
	}
	if i, j := slices.Index(got, "virtio_ring"), slices.Index(got, "virtio_crypto"); i > j {
		t.Errorf("virtio_ring after virtio_crypto: %v", got)
	}
	if _, err := os.Stat(order[0].File); err != nil {
		t.Error(err)
	}
	// An out-of-tree module built for another kernel is refused up front.
	_, _, err = ms.resolve([]modReq{{Name: "x", File: order[0].File, Required: true}}, "5.10.0-1-amd64")
	if err == nil || !strings.Contains(err.Error(), "was built for kernel") {
		t.Errorf("vermagic mismatch: err = %v", err)
	}
}
