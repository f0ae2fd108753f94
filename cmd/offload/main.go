// Command offload is a crypto offload tunnel: many TCP connections over one
// encrypted link, with each frame's AES routed to the engine (CPU, AF_ALG,
// /dev/crypto) that is fastest for its size on this machine.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }
