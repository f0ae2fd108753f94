package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestShq(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, s := range []string{"", "plain", "Kernel|Integration", "it's", `a "b" $c \d`, "'", "x\ny", "^$"} {
		out, err := exec.Command(sh, "-c", "printf %s "+shq(s)).Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("shq(%q) came back as %q", s, out)
		}
	}
}

func testPlan() *guestPlan {
	return &guestPlan{
		Nonce: "feedbeef",
		Modules: []loadItem{
			{Name: "af_alg", File: "/x/af_alg.ko"},
			{Name: "virtio_crypto", File: "/x/virtio_crypto.ko", Required: true},
		},
		Tests: []guestBinary{{Name: "engine"}, {Name: "engine-2"}},
		Cmds:  []string{"offload engines", "echo 'quoted' | wc -c"},
		Run:   "Kernel|Integration", Bench: ".", Benchtime: "100x",
		TestTimeout: 9 * time.Minute,
	}
}

func TestSteps(t *testing.T) {
	p := testPlan()
	want := []string{"modules", "test:engine", "test:engine-2", "cmd:1", "cmd:2"}
	if got := p.steps(); !slices.Equal(got, want) {
		t.Errorf("steps = %v, want %v", got, want)
	}
	p.Modules = nil
	if got := p.steps(); got[0] != "test:engine" {
		t.Errorf("steps without modules = %v", got)
	}
}

func TestInitScript(t *testing.T) {
	p := testPlan()
	s := p.initScript()
	if !strings.HasPrefix(s, "#!/bin/busybox sh\n") {
		t.Error("no busybox shebang")
	}
	// Stuck kernel tasks are reported (and, on malta, unstuck) within
	// seconds, before the first step runs.
	hung := strings.Index(s, "echo 2 >/proc/sys/kernel/hung_task_timeout_secs")
	if hung < 0 || !strings.Contains(s, "echo -1 >/proc/sys/kernel/hung_task_warnings") || hung > strings.Index(s, "\nstep ") {
		t.Error("the hung-task check is not set to 2 s, unlimited, before the steps")
	}
	// Each step appears once, in the order steps() gives, and the summary
	// and poweroff come after all of them.
	last := -1
	for _, name := range p.steps() {
		i := strings.Index(s, "\nstep "+shq(name)+" ")
		if i < 0 {
			i = strings.Index(s, "\nstep "+name+" ")
		}
		if i < 0 {
			t.Fatalf("no step line for %s in\n%s", name, s)
		}
		if i < last {
			t.Errorf("step %s out of order", name)
		}
		last = i
	}
	done := strings.Index(s, `echo "$M done passed=$passed failed=$failed id=$id"`)
	if done < last {
		t.Error("summary line missing or before the steps")
	}
	if off := strings.Index(s, "poweroff -f"); off < done {
		t.Error("poweroff missing or before the summary")
	}
	for _, want := range []string{
		"id=feedbeef",
		`insmod '/lib/modules/offload/virtio_crypto.ko' || { echo "guest: insmod virtio_crypto failed"; bad=1; }`,
		`insmod '/lib/modules/offload/af_alg.ko' || echo "guest: warning: optional module af_alg did not load"`,
		`'/tests/engine.test' '-test.v' '-test.run' 'Kernel|Integration' '-test.bench' '.' '-test.benchtime' '100x' '-test.timeout' '9m0s'`,
		`step cmd:2 run_cmd 'echo '\''quoted'\'' | wc -c'`,
		"OFFLOAD_VM=1",
		"mount -t devtmpfs",
		"mount -t tmpfs -o mode=1777 tmpfs /tmp",
		"mount -t tmpfs -o mode=0755 tmpfs /run",
		"cbc(aes)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("init script lacks %q", want)
		}
	}
}

func TestInitScriptNetNS(t *testing.T) {
	p := testPlan()
	if s := p.initScript(); strings.Contains(s, "/usr/sbin/ip") {
		t.Error("iproute2 wrappers without -netns")
	}
	p.NetNS = true
	s := p.initScript()
	for _, want := range []string{`ip() { /usr/sbin/ip "$@"; }`, `tc() { /usr/sbin/tc "$@"; }`} {
		if !strings.Contains(s, want) {
			t.Errorf("-netns init script lacks %q", want)
		}
	}
}

// TestInitScriptSyntax has the host's sh check the generated script.
func TestInitScriptSyntax(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	s := testPlan().initScript()
	if out, err := exec.Command(sh, "-n", "-c", s).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v: %s", err, out)
	}
}

func TestParseLdd(t *testing.T) {
	out := `	linux-vdso.so.1 (0x00007ffd1b5f2000)
	libbpf.so.1 => /lib/x86_64-linux-gnu/libbpf.so.1 (0x00007f2d5f0a1000)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2d5eebf000)
	/lib64/ld-linux-x86-64.so.2 (0x00007f2d5f1e8000)
	libgone.so.1 => not found
`
	want := []string{"/lib/x86_64-linux-gnu/libbpf.so.1", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if got := parseLdd(out); !slices.Equal(got, want) {
		t.Errorf("parseLdd = %q, want %q", got, want)
	}
}

func TestParseKernelDepends(t *testing.T) {
	got, err := parseKernelDepends("linux-image-armmp:armhf\n  Depends: linux-image-6.1.0-50-armmp:armhf\n", "linux-image-armmp")
	if err != nil || got != "linux-image-6.1.0-50-armmp" {
		t.Errorf("got %q, %v", got, err)
	}
	got, err = parseKernelDepends("linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n", "linux-image-amd64")
	if err != nil || got != "linux-image-6.1.0-57-amd64" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := parseKernelDepends("linux-image-amd64\n", "linux-image-amd64"); err == nil {
		t.Error("no error for output without a Depends line")
	}
}

// TestParseKernelParts uses the apt-cache depends output of Debian sid's
// linux-image-7.2.13+deb14-amd64 (abridged), whose kernel is split out.
func TestParseKernelParts(t *testing.T) {
	out := `linux-image-7.2.13+deb14-amd64
  PreDepends: linux-base
 |Depends: dracut
  Depends: <linux-initramfs-tool>
    dracut
  Depends: linux-base-7.2.13+deb14-amd64
  Depends: linux-binary-7.2.13+deb14-amd64
  Depends: linux-modules-7.2.13+deb14-amd64
  Breaks: initramfs-tools
  Suggests: linux-doc-7.2
`
	want := []string{"linux-base-7.2.13+deb14-amd64", "linux-binary-7.2.13+deb14-amd64", "linux-modules-7.2.13+deb14-amd64"}
	if got := parseKernelParts(out, "linux-image-7.2.13+deb14-amd64"); !slices.Equal(got, want) {
		t.Errorf("parseKernelParts = %q, want %q", got, want)
	}
	// A classic image package (6.1) holds its kernel: nothing to follow.
	old := "linux-image-6.1.0-57-amd64\n  PreDepends: linux-base\n  Depends: kmod\n  Recommends: firmware-linux-free\n"
	if got := parseKernelParts(old, "linux-image-6.1.0-57-amd64"); len(got) != 0 {
		t.Errorf("parseKernelParts(6.1) = %q, want none", got)
	}
}

// TestUnpackedKernelLayouts finds the kernel in the classic and the split
// package layouts and names the missing piece otherwise.
func TestUnpackedKernelLayouts(t *testing.T) {
	for _, tc := range []struct{ name, mods, image string }{
		{"classic", "lib/modules/6.1.0-57-amd64", "boot/vmlinuz-6.1.0-57-amd64"},
		{"split", "usr/lib/modules/7.2.13+deb14-amd64", "usr/lib/modules/7.2.13+deb14-amd64/vmlinuz"},
	} {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, tc.mods, "kernel"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := unpackedKernel(root, tc.name); err == nil || !strings.Contains(err.Error(), "vmlinuz") {
			t.Errorf("%s without vmlinuz: err = %v, want one naming vmlinuz", tc.name, err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.image)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, tc.image), []byte("k"), 0o644); err != nil {
			t.Fatal(err)
		}
		k, err := unpackedKernel(root, tc.name)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if k.Image != filepath.Join(root, tc.image) || k.Modules != filepath.Join(root, tc.mods) || k.Release != filepath.Base(tc.mods) {
			t.Errorf("%s: got %+v", tc.name, k)
		}
	}
	if _, err := unpackedKernel(t.TempDir(), "empty"); err == nil {
		t.Error("no error for a tree without modules")
	}
}

func TestCheckPVHRejectsGarbage(t *testing.T) {
	if err := checkPVH([]byte("not an ELF file at all")); err == nil {
		t.Error("no error for a non-ELF kernel")
	}
}

// TestKernelCachedVmlinuxPVH checks the PVH note finder on the vmlinux a
// harness run extracted into the cache, when there is one.
func TestKernelCachedVmlinuxPVH(t *testing.T) {
	cache, err := cacheDir()
	if err != nil {
		t.Skip(err)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "amd64", "linux-image-*", "vmlinux"))
	if len(files) == 0 {
		t.Skip("no vmlinux in the cache; go run ./harness/vm extracts one")
	}
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPVH(raw); err != nil {
		t.Errorf("%s: %v", files[0], err)
	}
}
