// Package wgcompare is the guest side of offload's router-class anchor
// (docs/router-anchor.md; the host side, which boots the VM and prints the
// table, is harness/anchor). In one boot of an emulated router CPU (mipsel
// malta 24Kc, one CPU, a virtio-crypto device), TestKernelRouterAnchor
// makes two network namespaces joined by a veth and sends one TCP stream of
// N MiB per run from B to a sink in A over each path of Paths: plaintext,
// kernel WireGuard (run between every other run), two bare Go relays (the
// floor of any user-space tunnel), ssh -L with aes256-ctr and
// hmac-sha2-256, kernel IPsec ESP with manual SAs whose cbc(aes) is the
// device's, and the offload binary with the device through afalg and
// cryptodev (where /dev/crypto exists) and in software.
//
// The load generator and the sink are cheap (stream.go): the sender
// sendfiles a pattern from tmpfs, the sink reads into 1 MiB and checks the
// count and one byte in 509. Each run is a span (harness/vm's spans.go), so
// the host times it by qemu's CPU seconds.
//
// A missing piece fails the test: no wireguard or ESP module, no wg, sshd,
// ssh or iproute2, no device, a path that does not come up, a stream that
// does not arrive intact, or a run that did not cross the path it names
// (veth, wg0 and ESP counters, the device's interrupts). A slow figure
// does not fail. It runs inside the VM and skips elsewhere:
//
//	go run ./harness/anchor -mib 32 -rounds 3 -boots 3
//
// The two-router rig (harness/anchor -routers 2) also runs the sealed relay
// (sealrelay.go): the bare relays with offload's crypto on the hop between
// them and nothing else of offload, the simplest tunnel with that crypto.
//
// The offload paths use only built binaries and config files, never the
// tunnel's internals, so they measure whatever the data path becomes; the
// sealed relay calls offload's engines and MAC directly, to price the
// crypto without the tunnel.
package wgcompare
