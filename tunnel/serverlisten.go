package tunnel

// The server's listener, as Serve wraps it: the PROXY protocol reader
// (tunnel/proxyproto) in front when it is configured, else the kernel's
// deferred accept (netguard.DeferAccept).

import (
	"fmt"
	"net"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"github.com/offload-dev/offload/tunnel/proxyproto"
)

// ProxyProtocol makes the server read a PROXY protocol v2 header from
// every connection before its handshake, and treat the connection as
// coming from the address in it, believed only from the balancers in
// From (proxyproto.Config).
type ProxyProtocol = proxyproto.Config

// checkProxyProtocol refuses a PROXY protocol setting that would believe
// a header from anyone.
func checkProxyProtocol(p *ProxyProtocol) error {
	if p == nil {
		return nil
	}
	if len(p.From) == 0 {
		return fmt.Errorf("%w: proxy protocol without the balancers' addresses (From): anyone could name any source", ErrConfig)
	}
	for _, pr := range p.From {
		if !pr.IsValid() {
			return fmt.Errorf("%w: proxy protocol: invalid prefix %v", ErrConfig, pr)
		}
	}
	return nil
}

// wrapListener puts the PROXY protocol reader in front of ln if it is
// configured. Header slots: as many as handshake slots, which they come
// before. Without it, the kernel hands over a connection only once it has
// sent something (netguard.DeferAccept); a balancer writes its header as soon as
// it connects, so behind one that would change nothing.
func (s *Server) wrapListener(ln net.Listener) net.Listener {
	if s.proxy == nil {
		if err := netguard.DeferAccept(ln, s.opt.HandshakeTimeout); err != nil {
			s.log.Warn("can't defer accepting connections until they send (TCP_DEFER_ACCEPT); silent connections take handshake slots", zap.Error(err))
		}
		return ln
	}
	return proxyproto.NewListener(ln, *s.proxy, s.slots.Max(), s.slots.PerSource(), s.proxyDropped, s.log.Named("proxy"), &s.ppStats)
}

// proxyDropped counts and logs (rate-limited, with the handshake slots'
// drops) a connection the PROXY reader reset because its source already
// had max_handshakes_per_source connections waiting for the accept loop.
func (s *Server) proxyDropped() {
	s.ctr.handshakes[hsDropped].Add(1)
	if ok, n := s.dropLog.Allow(); ok {
		s.log.Warn("PROXY protocol: reset a connection whose client already has max_handshakes_per_source waiting for a handshake slot",
			zap.Int("max_handshakes_per_source", s.slots.PerSource()), zap.Uint64("dropped_since_last_log", n+1))
	}
}
