package main

import (
	"strings"
	"testing"
)

func TestQEMUArgs(t *testing.T) {
	k := &kernel{Image: "/c/vmlinuz", Vmlinux: "/c/vmlinux"}
	cases := []struct {
		arch    string
		pvh     bool
		virtio  bool
		want    []string
		notWant []string
	}{
		{"amd64", true, true,
			[]string{"-accel tcg -cpu max", "-smp 2 -m 512", "-bios " + qbootROM + " -kernel /c/vmlinux",
				"console=ttyS0", "panic=-1", "-no-reboot",
				"-object cryptodev-backend-builtin,id=cryptodev0 -device virtio-crypto-pci,id=crypto0,cryptodev=cryptodev0"},
			nil},
		{"amd64", false, false, []string{"-kernel /c/vmlinuz"}, []string{"qboot", "cryptodev"}},
		{"arm", false, true,
			[]string{"-M virt -cpu cortex-a15", "console=ttyAMA0", "-kernel /c/vmlinuz",
				"-device virtio-crypto-device,", "-global virtio-mmio.force-legacy=false"},
			[]string{"qboot"}},
		{"mipsle", false, true,
			[]string{"-M malta -cpu 24Kc", "console=ttyS0", "-device virtio-crypto-pci,"},
			[]string{"force-legacy"}},
	}
	for _, c := range cases {
		kk := *k
		if !c.pvh {
			kk.Vmlinux = ""
		}
		a, err := lookupArch(c.arch)
		if err != nil {
			t.Fatal(err)
		}
		extra := []string{"-nic", "tap,ifname=t0,script=no,downscript=no,model=virtio-net-pci"}
		line := strings.Join(qemuArgs(vmConfig{Arch: a, SMP: 2, MemMB: 512, Kernel: &kk, Initrd: "/w/initrd.gz", VirtioCrypto: c.virtio, Extra: extra}), " ")
		// -qemu-arg's arguments come last, each as given.
		if !strings.HasSuffix(line, " -nic "+extra[1]) {
			t.Errorf("%s: %q does not end with -qemu-arg's %q", c.arch, line, extra)
		}
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: %q lacks %q", c.arch, line, w)
			}
		}
		for _, w := range c.notWant {
			if strings.Contains(line, w) {
				t.Errorf("%s: %q has %q", c.arch, line, w)
			}
		}
	}
}

func TestParseFlagsBoardLimits(t *testing.T) {
	var errb strings.Builder
	o, err := parseFlags([]string{"-arch", "mipsle"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if o.smp != 1 || o.mem != 256 {
		t.Errorf("mipsle defaults: -smp %d -mem %d, want 1 and 256", o.smp, o.mem)
	}
	for _, args := range [][]string{
		{"-arch", "mipsle", "-smp", "2"},
		{"-arch", "mipsle", "-mem", "512"},
		{"-arch", "arm", "-netns"},
		{"-smp", "0"},
		{"-timeout", "0s"},
		{"-boot", "uefi"},
		{"-cmd", " "},
		{"-ko", "x.ko.xz"},
		{"stray"},
	} {
		if _, err := parseFlags(args, &errb); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}
