package tunnel

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/offload-dev/offload/internal/metrics"
)

// serverRing is the client's list of servers and the one it dials: the
// client fails over by rotation. It starts with the first; every failed
// dial or handshake, and every link that ends (dropped, or the server
// going away), moves it to the next, wrapping around after the last. It
// does not go back to the first while another one works: the servers are
// peers (behind one address they would be a load balancer's pool), and
// returning to a "primary" would cut working links for nothing.
//
// Delays come from the client's one backoff (backoff.go), which runs
// across the rotation: the first retry after a link that stayed up
// stableLink waits redial.min, and each further failure, on whichever
// server, doubles it up to redial.max. So a dead server costs one short
// delay before the next is tried, and a whole pool that is down is
// retried at redial.max, not in a tight loop.
//
// Only linkLoop moves the ring; metrics read it.
type serverRing struct {
	addrs     []string
	cur       atomic.Int64
	failovers atomic.Uint64
}

// newServerRing takes Server or Servers of a ClientConfig.
func newServerRing(server string, servers []string) (*serverRing, error) {
	switch {
	case server != "" && len(servers) > 0:
		return nil, fmt.Errorf("%w: both Server and Servers are set", ErrConfig)
	case server != "":
		servers = []string{server}
	case len(servers) == 0:
		return nil, fmt.Errorf("%w: no server", ErrConfig)
	}
	seen := map[string]bool{}
	for _, a := range servers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: server %q: %w", ErrConfig, a, err)
		}
		if seen[a] {
			return nil, fmt.Errorf("%w: server %q is listed twice", ErrConfig, a)
		}
		seen[a] = true
	}
	return &serverRing{addrs: append([]string(nil), servers...)}, nil
}

// addr is the server to dial now.
func (r *serverRing) addr() string { return r.addrs[r.cur.Load()] }

// advance moves to the next server and returns it.
func (r *serverRing) advance() string {
	if len(r.addrs) > 1 {
		r.cur.Store((r.cur.Load() + 1) % int64(len(r.addrs)))
		r.failovers.Add(1)
	}
	return r.addr()
}

// writePrometheus writes offload_failovers_total and offload_server (1
// for the server the client dials or is linked to, 0 for the others).
func (r *serverRing) writePrometheus(w io.Writer) {
	metrics.WriteCounterUint64(w, `offload_failovers_total`, r.failovers.Load())
	cur := r.cur.Load()
	for i, a := range r.addrs {
		v := uint64(0)
		if int64(i) == cur {
			v = 1
		}
		metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_server{server=%q}`, a), v)
	}
}
