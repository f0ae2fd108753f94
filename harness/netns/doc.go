// Package netns holds the two-host test of offload: TestKernelTwoHosts
// runs the built offload binary as server and client in two network
// namespaces joined by a veth pair with netem delay and loss, and checks
// that data crosses intact and in bounded time. It needs root, iproute2
// and sch_netem, so it runs in the VM harness:
//
//	go run ./harness/vm -netns -bin ./cmd/offload -test ./harness/netns
//
// and skips elsewhere (this package has no code besides the test).
package netns
