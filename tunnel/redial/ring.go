package redial

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/offload-dev/offload/internal/metrics"
)

// Ring is the client's list of servers and the one it dials: the
// client fails over by rotation. It starts with the first; every failed
// dial or handshake, and every link that ends (dropped, or the server
// going away), moves it to the next, wrapping around after the last. It
// does not go back to the first while another one works: the servers are
// peers (behind one address they would be a load balancer's pool), and
// returning to a "primary" would cut working links for nothing.
//
// Delays come from the client's one Backoff (backoff.go), which runs
// across the rotation: the first retry after a link that came up waits
// Backoff.Min, and each further failure, on whichever server, doubles it
// up to Backoff.Max (UpMax once a link has come up). So a dead server costs one short
// delay before the next is tried, and a whole pool that is down is
// retried at Backoff.Max, not in a tight loop.
//
// Only the link loop moves the ring; metrics read it.
type Ring struct {
	addrs     []string
	cur       atomic.Int64
	failovers atomic.Uint64
}

// NewRing takes Server or Servers of a ClientConfig; its errors are the
// config's.
func NewRing(server string, servers []string) (*Ring, error) {
	switch {
	case server != "" && len(servers) > 0:
		return nil, errors.New("both Server and Servers are set")
	case server != "":
		servers = []string{server}
	case len(servers) == 0:
		return nil, errors.New("no server")
	}
	seen := map[string]bool{}
	for _, a := range servers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("server %q: %w", a, err)
		}
		if seen[a] {
			return nil, fmt.Errorf("server %q is listed twice", a)
		}
		seen[a] = true
	}
	return &Ring{addrs: append([]string(nil), servers...)}, nil
}

// Addr is the server to dial now.
func (r *Ring) Addr() string { return r.addrs[r.cur.Load()] }

// Addrs are the servers, in order.
func (r *Ring) Addrs() []string { return r.addrs }

// Failovers is how many times the ring moved to another server.
func (r *Ring) Failovers() uint64 { return r.failovers.Load() }

// Advance moves to the next server and returns it.
func (r *Ring) Advance() string {
	if len(r.addrs) > 1 {
		r.cur.Store((r.cur.Load() + 1) % int64(len(r.addrs)))
		r.failovers.Add(1)
	}
	return r.Addr()
}

// WritePrometheus writes offload_failovers_total and offload_server (1
// for the server the client dials or is linked to, 0 for the others).
func (r *Ring) WritePrometheus(w io.Writer) {
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
