//go:build !linux

package main

import "syscall"

// freebind needs Linux's IP_FREEBIND; elsewhere it does nothing, and only
// the host's own addresses can be sources.
func freebind(network, address string, rc syscall.RawConn) error { return nil }
