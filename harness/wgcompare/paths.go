package wgcompare

import (
	"strings"
	"time"

	"github.com/offload-dev/offload/config"
)

// MarkerSettle is how long the guest idles after each span marker, so that
// the host, reading markers off the console, samples qemu's CPU before the
// work starts. The span's wall time includes the first of those seconds.
const MarkerSettle = time.Second

// DeviceDriver is the virtio-crypto device's CBC driver in the guest.
const DeviceDriver = "virtio_crypto_aes_cbc"

// Path is one way of carrying the stream from namespace B to the sink in A.
type Path struct {
	Name  string // span and table name
	Label string // what the row means
	Kind  string // "plain", "wireguard", "relay", "relay-zc", "relay-seal", "ssh", "ipsec" or "offload"
	Suite string // offload only
	Eng   string
	Frame string
	// Device: the path's AES runs on the virtio-crypto device, so its
	// interrupts must rise.
	Device bool
	// Env is added to both offload ends' environment (a GODEBUG setting
	// measured against the same path without it).
	Env []string
	// Conf is added to both offload ends' configs, a line each (harness/anchor
	// -set and -twin).
	Conf []string
	// Full: a relay-seal path's frames are full (SealOptions.Full).
	Full bool
	// Extra paths are experiments: measured only when -paths names them.
	Extra bool
	// Bin is the guest command both offload ends run; "" is Offload.
	// Baseline names the build of another revision (harness/anchor
	// -baseline), so a change is measured beside its base in one boot.
	Bin string
}

// The offload commands in the guest: this tree's, and -baseline's build.
const (
	Offload  = "offload"
	Baseline = "offload-base"
)

// Command is the guest command p's offload ends run.
func (p Path) Command() string {
	if p.Bin == "" {
		return Offload
	}
	return p.Bin
}

// The anchors: every row is also given against each of them.
const (
	Plaintext = "plaintext"
	WireGuard = "wireguard"
	Relay2    = "relay"
	SSH       = "ssh"
	IPsec     = "ipsec-dev"
)

// Anchors are the paths every row is compared with, in column order.
var Anchors = []string{WireGuard, Relay2, SSH, IPsec}

// Paths are the measured paths in table order; WireGuard runs between
// every other run. cryptodev-64k runs only where /dev/crypto exists.
var Paths = []Path{
	{Name: Plaintext, Label: "plaintext TCP over the veth", Kind: "plain"},
	{Name: WireGuard, Label: "kernel WireGuard (chacha20-poly1305, MIPS asm)", Kind: "wireguard"},
	{Name: Relay2, Label: "two bare Go relays, Read/Write 64 KiB, no crypto (the floor)", Kind: "relay"},
	// The floor with MSG_ZEROCOPY sends on both hops: whether sends that
	// do not copy pay where the bytes leave through a network card. The
	// two-router rig only (harness/anchor -routers 2): in one guest every
	// send is a local delivery, which the kernel copies anyway. It did
	// not pay (2026-12-07, two boots: 0.74x the copying relay's MB per
	// qemu CPU second; docs/lab/performance.md).
	{Name: "relay-zc", Label: "two bare Go relays as relay2, MSG_ZEROCOPY sends", Kind: "relay-zc", Extra: true},
	// The floor with offload's crypto and nothing else of offload: two
	// relays that seal and open full 64 KiB frames on the hop between
	// them (SealedRelay: one goroutine a direction, blocking calls, no mux,
	// no pipeline, no resumption), the simplest tunnel with this crypto:
	// beside offload it shows what offload's design costs or saves beyond
	// its crypto (docs/router-anchor.md, "The simplest tunnel").
	{Name: "relay-afalg", Label: "two Go relays sealing 64 KiB frames, aes-256-cbc-poly1305, afalg:" + DeviceDriver + " (the simplest tunnel)", Kind: "relay-seal",
		Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + DeviceDriver, Frame: "64KiB", Full: true, Device: true, Extra: true},
	{Name: "relay-cryptodev", Label: "two Go relays sealing 64 KiB frames, aes-256-cbc-poly1305, cryptodev (the simplest tunnel)", Kind: "relay-seal",
		Suite: "aes-256-cbc-poly1305", Eng: "cryptodev", Frame: "64KiB", Full: true, Device: true, Extra: true},
	{Name: "relay-ctr-sw", Label: "two Go relays sealing 64 KiB frames, aes-256-ctr-poly1305, software (the simplest tunnel)", Kind: "relay-seal",
		Suite: "aes-256-ctr-poly1305", Eng: "software", Frame: "64KiB", Full: true, Extra: true},
	{Name: SSH, Label: "ssh -L, aes256-ctr + hmac-sha2-256 (OpenSSH, AES in software)", Kind: "ssh"},
	{Name: IPsec, Label: "kernel IPsec ESP, cbc(aes) on the device + hmac(sha256)", Kind: "ipsec", Device: true},
	{Name: "afalg-64k", Label: "offload aes-256-cbc-poly1305, afalg:" + DeviceDriver + ", 64 KiB", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + DeviceDriver, Frame: "64KiB", Device: true},
	{Name: "cryptodev-64k", Label: "offload aes-256-cbc-poly1305, cryptodev (the device), 64 KiB", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "cryptodev", Frame: "64KiB", Device: true},
	// Go's asynchronous preemption signals a goroutine that has run 10 ms;
	// on one CPU under a busy pipeline that is a signal, a handler and a
	// reschedule many times a second (asyncPreempt took 7.5–10 % of the
	// inline path's profile).
	{Name: "afalg-64k-nopreempt", Label: "offload as afalg-64k, GODEBUG=asyncpreemptoff=1", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + DeviceDriver, Frame: "64KiB", Device: true,
		Env: []string{"GODEBUG=asyncpreemptoff=1"}, Extra: true},
	// With one P the runtime's monitor (sysmon) takes the P from every
	// system call that lasts over ~20 µs, and the call's return wakes it
	// again (a futex, two clock reads and a 20 µs sleep each time); with a
	// second P idle beside it, a call under 10 ms with nothing else
	// runnable keeps its P. These measure whether that pays on one CPU:
	// it did not (2026-12-06, three boots: 0.65x and 0.52x WireGuard
	// against 0.74x and 0.75x with one P; docs/lab/router-anchor.md).
	{Name: "afalg-64k-procs2", Label: "offload as afalg-64k, GOMAXPROCS=2", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + DeviceDriver, Frame: "64KiB", Device: true,
		Env: []string{"GOMAXPROCS=2"}, Extra: true},
	{Name: "cryptodev-64k-procs2", Label: "offload as cryptodev-64k, GOMAXPROCS=2", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "cryptodev", Frame: "64KiB", Device: true,
		Env: []string{"GOMAXPROCS=2"}, Extra: true},
	// Four times the default frame: a quarter of every per-frame cost (the
	// device still gets pieces of at most 64 KiB, engine.kernelChunkSize),
	// for a bigger buffer per frame in flight.
	{Name: "afalg-256k", Label: "offload as afalg-64k, 256 KiB frames", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + DeviceDriver, Frame: "256KiB", Device: true, Extra: true},
	{Name: "cryptodev-256k", Label: "offload as cryptodev-64k, 256 KiB frames", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "cryptodev", Frame: "256KiB", Device: true, Extra: true},
	// The same paths on -baseline's build: a change against its base.
	{Name: "afalg-64k-base", Label: "offload as afalg-64k, the baseline build (-baseline)", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "afalg:" + DeviceDriver, Frame: "64KiB", Device: true, Extra: true, Bin: Baseline},
	{Name: "cryptodev-64k-base", Label: "offload as cryptodev-64k, the baseline build (-baseline)", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "cryptodev", Frame: "64KiB", Device: true, Extra: true, Bin: Baseline},
	{Name: "ctr-sw-64k-base", Label: "offload as ctr-sw-64k, the baseline build (-baseline)", Kind: "offload",
		Suite: "aes-256-ctr-poly1305", Eng: "software", Frame: "64KiB", Extra: true, Bin: Baseline},
	{Name: "ctr-sw-64k", Label: "offload aes-256-ctr-poly1305, software, 64 KiB", Kind: "offload",
		Suite: "aes-256-ctr-poly1305", Eng: "software", Frame: "64KiB"},
	{Name: "cbc-sw-64k", Label: "offload aes-256-cbc-poly1305, software, 64 KiB", Kind: "offload",
		Suite: "aes-256-cbc-poly1305", Eng: "software", Frame: "64KiB"},
}

// PathByName returns the path of that name.
func PathByName(name string) (Path, bool) {
	for _, p := range Paths {
		if p.Name == name {
			return p, true
		}
	}
	return Path{}, false
}

// Cryptodev says whether p goes through /dev/crypto.
func (p Path) Cryptodev() bool { return strings.HasPrefix(p.Eng, "cryptodev") }

// FrameBytes is p's max_frame in bytes ("64KiB" → 65536) as the config
// reads it, 0 when p sets none: a run's frame count is checked against it.
func (p Path) FrameBytes() int64 {
	n, err := config.ParseSize(p.Frame)
	if err != nil {
		return 0
	}
	return int64(n)
}
