//go:build !linux

package netguard

import (
	"net"
	"time"
)

// DeferAccept is a no-op outside Linux: connections reach the slots as
// soon as they are accepted (deferaccept_linux.go).
func DeferAccept(net.Listener, time.Duration) error { return nil }
