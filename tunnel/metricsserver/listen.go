package metricsserver

import (
	"context"
	"net"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
)

// Listen listens on addr (TCP) for Serve. On Linux it sets
// TCP_DEFER_ACCEPT for headTimeout (netguard.DeferAccept): the kernel
// hands over a connection only once its first bytes have arrived, so
// connections that send nothing never take a pending slot, and a
// scraper's connection arrives with its request head, which protects it
// from eviction (slots.go). After the timeout the kernel hands over a
// silent connection anyway, and the head timeout then ends it.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := netguard.DeferAccept(ln, headTimeout); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
