//go:build !linux

package tunnel

import (
	"net"
	"time"
)

// deferAccept is a no-op outside Linux: connections reach the handshake
// slots as soon as they are accepted (deferaccept_linux.go).
func deferAccept(net.Listener, time.Duration) error { return nil }
