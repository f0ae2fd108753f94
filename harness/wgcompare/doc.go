// Package wgcompare is the router-class anchor of offload: in one boot of
// an emulated router CPU (mipsel malta 24Kc, one CPU, with a virtio-crypto
// device), TestKernelWireGuardAnchor makes two network namespaces joined by
// a veth and sends one TCP stream of N MiB per run over each path:
//
//   - plaintext TCP over the veth,
//   - kernel WireGuard between the namespaces (Debian's wireguard.ko from
//     the same kernel package, configured with Debian's wg),
//   - the built offload binary as server and client with
//     aes-256-ctr-poly1305 in software at 64 KiB frames,
//     aes-256-cbc-poly1305 in software at 64 KiB, and
//     aes-256-cbc-poly1305 on the virtio-crypto device
//     (afalg:virtio_crypto_aes_cbc) at 64 KiB and 16 KiB frames, and
//     aes-256-cbc-hmac-sha256 as whole frames in one kernel request
//     (afalg-aead:virtio_crypto_aes_cbc: the device's AES-CBC and the
//     kernel's HMAC-SHA256 in authenc) at 64 KiB.
//
// WireGuard runs between every other run, the other paths rotate from round
// to round, and the table gives medians and ratios against WireGuard, with
// the guest's busy CPU seconds per run. Each run is also a span (see
// harness/vm's spans.go), so the host prints the same paths timed by qemu's
// CPU seconds beside the guest's clock, which under TCG sometimes stalls.
//
// A missing piece fails the test: no wireguard module, no wg, no device, an
// offload path that does not come up, or a run whose bytes or CRC-32C do
// not arrive intact or that did not cross the path it names (veth and
// WireGuard counters, the device's interrupts). A slow figure does not fail.
//
// It runs inside the VM harness, and skips elsewhere:
//
//	go run ./harness/vm -arch mipsle -smp 1 -virtio-crypto -modules veth,wireguard,authenc \
//	    -deb wireguard-tools -bin ./cmd/offload -test ./harness/wgcompare \
//	    -env OFFLOAD_ANCHOR_MIB=32 -env OFFLOAD_ANCHOR_ROUNDS=3 -timeout 40m
//
// The harness uses only the built binary and config files, never the
// tunnel's internals, so it measures whatever the data path becomes.
package wgcompare
