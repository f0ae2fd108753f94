package main

import (
	"debug/elf"
	"fmt"
	"sort"
	"strings"
)

// archSpec describes one guest architecture: which Go target its binaries
// are, which Debian kernel it boots and how qemu runs it.
type archSpec struct {
	Name    string   // -arch value, e.g. amd64
	GoArch  string   // GOARCH of guest binaries
	GoEnv   []string // extra build environment (GOARM, GOMIPS)
	DebArch string   // Debian architecture, e.g. armhf
	// KernelMeta is the Debian meta package whose dependency names the
	// current kernel image package.
	KernelMeta string
	QEMU       string   // qemu system binary
	QEMUPkg    string   // Debian package that ships it
	Machine    []string // machine, CPU and accelerator arguments
	Console    string   // kernel console device
	ELF        elf.Machine
	// PVH: the uncompressed vmlinux can be booted directly with qboot
	// (x86 only).
	PVH bool
	// KernelIsELF: the package's vmlinuz is already an ELF image that
	// -kernel boots (mipsel malta).
	KernelIsELF bool
	MaxMemMB    int // 0: no limit
	MaxSMP      int // 0: no limit
	// BaseModules are loaded when present; missing or failing ones are
	// reported but do not fail the run.
	BaseModules   []string
	VirtioCrypto  []string // modules -virtio-crypto loads
	VirtioDevice  string   // qemu device name of the virtio-crypto device
	VirtioArgs    []string // extra qemu arguments with -virtio-crypto
	NetModules    []string // modules -netns loads
	ExtraQEMUArgs []string
}

var arches = map[string]*archSpec{
	"amd64": {
		Name: "amd64", GoArch: "amd64", DebArch: "amd64",
		KernelMeta: "linux-image-amd64",
		QEMU:       "qemu-system-x86_64", QEMUPkg: "qemu-system-x86",
		Machine: []string{"-accel", "tcg", "-cpu", "max"},
		Console: "ttyS0", ELF: elf.EM_X86_64, PVH: true,
		BaseModules: []string{"af_alg", "algif_skcipher", "algif_aead", "algif_hash",
			"cryptd", "crypto_simd", "aesni_intel", "ctr"},
		VirtioCrypto: []string{"virtio_pci", "virtio_crypto"},
		VirtioDevice: "virtio-crypto-pci",
		NetModules:   []string{"veth", "sch_netem"},
	},
	"arm": {
		Name: "arm", GoArch: "arm", GoEnv: []string{"GOARM=7"}, DebArch: "armhf",
		KernelMeta: "linux-image-armmp",
		QEMU:       "qemu-system-arm", QEMUPkg: "qemu-system-arm",
		Machine: []string{"-M", "virt", "-cpu", "cortex-a15", "-accel", "tcg"},
		Console: "ttyAMA0", ELF: elf.EM_ARM,
		BaseModules: []string{"af_alg", "algif_skcipher", "algif_aead", "algif_hash",
			"ctr", "aes_arm", "cryptd", "crypto_simd", "aes_arm_bs"},
		VirtioCrypto: []string{"virtio_mmio", "virtio_crypto"},
		VirtioDevice: "virtio-crypto-device",
		// virtio_crypto wants VIRTIO_F_VERSION_1, which qemu's virtio-mmio
		// offers only out of its default legacy mode.
		VirtioArgs: []string{"-global", "virtio-mmio.force-legacy=false"},
		NetModules: []string{"veth", "sch_netem"},
	},
	"mipsle": {
		Name: "mipsle", GoArch: "mipsle", GoEnv: []string{"GOMIPS=softfloat"}, DebArch: "mipsel",
		KernelMeta: "linux-image-4kc-malta",
		QEMU:       "qemu-system-mipsel", QEMUPkg: "qemu-system-mips",
		Machine: []string{"-M", "malta", "-cpu", "24Kc", "-accel", "tcg"},
		Console: "ttyS0", ELF: elf.EM_MIPS, KernelIsELF: true,
		MaxMemMB: 256, MaxSMP: 1,
		BaseModules:  []string{"af_alg", "algif_skcipher", "algif_aead", "algif_hash", "ctr"},
		VirtioCrypto: []string{"virtio_pci", "virtio_crypto"},
		VirtioDevice: "virtio-crypto-pci",
		NetModules:   []string{"veth", "sch_netem"},
	},
}

func archNames() string {
	var names []string
	for n := range arches {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func lookupArch(name string) (*archSpec, error) {
	a, ok := arches[name]
	if !ok {
		return nil, fmt.Errorf("unknown -arch %q (want one of %s)", name, archNames())
	}
	return a, nil
}

// goEnv is the environment for building guest binaries.
func (a *archSpec) goEnv() []string {
	return append([]string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + a.GoArch}, a.GoEnv...)
}
