package tunnel

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/offload-dev/offload/tunnel/allow"
)

// Rules are every server-side permission beyond the named TCP services:
// the SOCKS destinations the server may dial, its UDP services and where
// a client may ask it to listen. The Server holds them by pointer and asks
// only through these methods, so that the rules can become per client
// (or be swapped on reload) without touching the callers. The zero Rules
// allow nothing.
type Rules struct {
	socks   allow.List
	udp     map[string]string
	reverse allow.List
}

// NewRules parses the rules: socksAllow and reverseAllow in allow's
// syntax (reverse: addresses and networks only), udp maps a UDP service
// name to the host:port the server sends its datagrams to.
func NewRules(socksAllow []string, udp map[string]string, reverseAllow []string) (*Rules, error) {
	socks, err := allow.ParseList(socksAllow, true)
	if err != nil {
		return nil, fmt.Errorf("%w: socks_allow: %w", ErrConfig, err)
	}
	reverse, err := allow.ParseList(reverseAllow, false)
	if err != nil {
		return nil, fmt.Errorf("%w: reverse_allow: %w", ErrConfig, err)
	}
	r := &Rules{socks: socks, reverse: reverse, udp: make(map[string]string, len(udp))}
	for name, target := range udp {
		if len(name) == 0 || len(name) > 255 {
			return nil, fmt.Errorf("%w: UDP service name %q: want 1..255 bytes", ErrConfig, name)
		}
		if _, _, err := net.SplitHostPort(target); err != nil {
			return nil, fmt.Errorf("%w: UDP service %q: target %q: %w", ErrConfig, name, target, err)
		}
		r.udp[name] = target
	}
	return r, nil
}

func (r *Rules) empty() bool { return len(r.socks) == 0 && len(r.udp) == 0 && len(r.reverse) == 0 }

// SocksAllowed reports whether a SOCKS client may make the server dial a
// at port; name is the name it asked for ("" for an address). The rule
// that allowed it is returned for the log.
func (r *Rules) SocksAllowed(name string, a netip.Addr, port uint16) (allow.Rule, bool) {
	return r.socks.Allows(name, a, port)
}

// UDPTarget returns the host:port of the UDP service name.
func (r *Rules) UDPTarget(name string) (string, bool) {
	t, ok := r.udp[name]
	return t, ok
}

// ReverseAllowed reports whether a client may ask the server to listen
// on ap.
func (r *Rules) ReverseAllowed(ap netip.AddrPort) bool {
	_, ok := r.reverse.Allows("", ap.Addr(), ap.Port())
	return ok
}
