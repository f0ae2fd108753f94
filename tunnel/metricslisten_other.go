//go:build !linux

package tunnel

import "syscall"

// deferAccept does nothing where TCP_DEFER_ACCEPT does not exist: the
// pending slots alone protect a scraper (metricsSlots).
func deferAccept(network, address string, c syscall.RawConn) error { return nil }
