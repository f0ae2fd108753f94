package tunnel

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/offload-dev/offload/tunnel/handshake"
	"github.com/offload-dev/offload/tunnel/stream"
	"github.com/offload-dev/offload/tunnel/suite"
)

// Pair check: offload validate SERVER CLIENT asks whether a client
// config can ever work with a server config, without the network. It
// runs the real handshake of both ends over an in-memory pipe
// (handshake.Pair: the server's key set, the client's suite and key; the
// handshake names a suite or key mismatch as it would on the wire, and
// says which of the server's clients the key is), then asks the server's own grant checks
// (serviceGrant, udpGrant, reverseGrant, socksGrant: the ones its
// streams go through) for each of the client's forwards.

// Peer is what a client config asks of a server.
type Peer struct {
	Suite    suite.Suite
	PSK      []byte
	Services []string         // the TCP forwards' services
	Socks    bool             // a SOCKS listener
	UDP      []string         // the UDP forwards' services
	Reverse  []netip.AddrPort // the reverse forwards' listen addresses
}

// PeerCheck is the server's verdict on a Peer.
type PeerCheck struct {
	// Handshake is nil if the handshake completes; else a
	// *handshake.PairError: its error as the client end sees it, and the
	// server's reason beside it.
	Handshake error
	// Client is the server's name for the client whose key the peer
	// holds (DefaultClient for a key_file), "" if none.
	Client string
	// Key is the fingerprint of the peer's key.
	Key string
	// Services, UDP and Reverse are the server's answer to each of the
	// peer's (by index; nil: granted); Socks to its SOCKS listener.
	Services, UDP, Reverse []error
	Socks                  error
}

// peerTimeout bounds the in-memory handshake.
const peerTimeout = 10 * time.Second

// CheckPeer runs the pair check of p against the server config c (which
// must pass Check).
func (c ServerConfig) CheckPeer(ctx context.Context, p Peer) (*PeerCheck, error) {
	if err := c.Options.setDefaults(); err != nil {
		return nil, err
	}
	st, err := newServerState(&c)
	if err != nil {
		return nil, err
	}
	pc := &PeerCheck{Key: handshake.Fingerprint(p.PSK)}
	hctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	idx, err := handshake.Pair(hctx, handshake.Config{Suite: c.Suite, Keys: st.keys, Timeout: peerTimeout},
		handshake.Config{Suite: p.Suite, PSK: p.PSK, Timeout: peerTimeout})
	if err != nil {
		pc.Handshake = err
		return pc, nil
	}
	e := st.owner[idx]
	pc.Client = e.name
	a := e.access
	for _, s := range p.Services {
		pc.Services = append(pc.Services, serviceGrant(st, a, s))
	}
	for _, s := range p.UDP {
		pc.UDP = append(pc.UDP, udpGrant(st, a, s))
	}
	for _, ap := range p.Reverse {
		pc.Reverse = append(pc.Reverse, reverseGrant(a, ap))
	}
	if p.Socks {
		pc.Socks = socksGrant(a)
	}
	return pc, nil
}

// The server's grants, each in one place: the checks its streams pass
// (through hold, again at every reload) and CheckPeer call these.

var (
	// errNoService, errNoUDPService: the server has no such service.
	errNoService    = fmt.Errorf("%w: the server has no such service", stream.ErrUnknownService)
	errNoUDPService = fmt.Errorf("%w: the server has no such UDP service", stream.ErrUnknownService)
)

// serviceGrant: whether access a may open TCP service name under st.
func serviceGrant(st *serverState, a *access, name string) error {
	switch _, ok := st.services[name]; {
	case !ok:
		return fmt.Errorf("%w (it has %s)", errNoService, names(st.services))
	case !a.allows(name):
		return fmt.Errorf("%w (it may use %s)", errNotAllowed, a.list())
	}
	return nil
}

// udpGrant: whether access a may use UDP service name under st.
func udpGrant(st *serverState, a *access, name string) error {
	switch _, ok := st.rules.UDPTarget(name); {
	case !ok:
		return fmt.Errorf("%w (it has %s)", errNoUDPService, names(st.rules.udp))
	case !a.allows(name):
		return fmt.Errorf("UDP %w (it may use %s)", errNotAllowed, a.list())
	}
	return nil
}

// reverseGrant: whether access a may ask the server to listen on ap.
func reverseGrant(a *access, ap netip.AddrPort) error {
	if !a.rules.ReverseAllowed(ap) {
		return fmt.Errorf("%w: listen address %s is not in the server's reverse_allow", stream.ErrDenied, ap)
	}
	return nil
}

// socksGrant: whether access a may reach any SOCKS destination at all
// (each destination is checked when it is asked for).
func socksGrant(a *access) error {
	if len(a.rules.socks) == 0 {
		return fmt.Errorf("%w: every destination: the server has no socks_allow for this client", stream.ErrDenied)
	}
	return nil
}

// names lists a map's keys, sorted: "dns, ssh, web", or "none".
func names[V any](m map[string]V) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return listOrNone(out)
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	sort.Strings(s)
	return strings.Join(s, ", ")
}

// list is the services a allows: "every service", or their names.
func (a *access) list() string {
	if a.all {
		return "every service"
	}
	return names(a.services)
}
