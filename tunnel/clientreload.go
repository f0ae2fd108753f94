package tunnel

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/tunnel/mux"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/handshake"
)

// The client's reload: a new key for the next links; forwards, the SOCKS
// listener and its users, UDP forwards and reverse forwards added,
// removed or changed, while the link and the connections, flows and
// listeners that stay carry on.

// ClientLive is what a running client's Reload may change. NewClient
// takes the same settings in its ClientConfig and checks them with the
// same function (checkLive), so a config that starts also reloads.
type ClientLive struct {
	// PSK is the key of the next handshakes.
	PSK         []byte
	Forwards    []Forward
	Socks       *Socks
	UDPForwards []UDPForward
	Reverse     []Reverse
}

// live is cfg's part that a reload may change.
func (cfg *ClientConfig) live() ClientLive {
	return ClientLive{PSK: cfg.PSK, Forwards: cfg.Forwards, Socks: cfg.Socks, UDPForwards: cfg.UDPForwards, Reverse: cfg.Reverse}
}

// checkLive checks l, at start and at every reload, and returns its
// reverse forwards by canonical listen address.
func checkLive(l *ClientLive) (map[string]string, error) {
	if len(l.PSK) != handshake.PSKSize {
		return nil, fmt.Errorf("%w: pre-shared key is %d bytes, want %d", ErrConfig, len(l.PSK), handshake.PSKSize)
	}
	if len(l.Forwards) == 0 && l.Socks == nil && len(l.UDPForwards) == 0 && len(l.Reverse) == 0 {
		return nil, fmt.Errorf("%w: no forwards, socks, UDP or reverse forwards", ErrConfig)
	}
	reverse, err := checkReverse(l.Reverse)
	if err != nil {
		return nil, err
	}
	conns := map[*net.UDPConn]bool{}
	for _, f := range l.UDPForwards {
		if f.Conn == nil || len(f.Service) == 0 || len(f.Service) > 255 || f.IdleTimeout < 0 || f.MaxFlows < 0 {
			return nil, fmt.Errorf("%w: UDP forward %q: want a socket, a service name of 1..255 bytes, and no negative limits", ErrConfig, f.Service)
		}
		if conns[f.Conn] {
			return nil, fmt.Errorf("%w: UDP forward %q: socket %v twice", ErrConfig, f.Service, f.Conn.LocalAddr())
		}
		conns[f.Conn] = true
	}
	seen := map[net.Listener]bool{}
	if l.Socks != nil {
		if l.Socks.Listener == nil {
			return nil, fmt.Errorf("%w: socks without a listener", ErrConfig)
		}
		seen[l.Socks.Listener] = true
	}
	for _, f := range l.Forwards {
		if f.Listener == nil || len(f.Service) == 0 || len(f.Service) > 255 {
			return nil, fmt.Errorf("%w: forward %q: want a listener and a service name of 1..255 bytes", ErrConfig, f.Service)
		}
		if seen[f.Listener] {
			return nil, fmt.Errorf("%w: forward %q: listener %v twice (or also socks)", ErrConfig, f.Service, f.Listener.Addr())
		}
		seen[f.Listener] = true
	}
	return reverse, nil
}

// forwardRun is a running forward: its listener and what its next
// connections get (a reload may change both): the service, or SOCKS.
type forwardRun struct {
	ln      net.Listener
	service atomic.Pointer[string]
	socks   atomic.Bool
}

// udpRun is a running UDP forward; a reload may change its settings,
// which apply to the flows started after it.
type udpRun struct {
	cfg atomic.Pointer[UDPForward]
}

// forwardSet is a client's running forwards, by listener, and its UDP
// forwards, by socket.
type forwardSet struct {
	mu       sync.Mutex
	runs     map[net.Listener]*forwardRun
	udp      map[*net.UDPConn]*udpRun
	ctx      context.Context // Run's; nil before Run
	wg       *sync.WaitGroup
	begin    func(context.Context, *forwardRun, *sync.WaitGroup)
	beginUDP func(context.Context, *udpRun, *sync.WaitGroup)
}

// start runs fs's forwards and us's UDP forwards until ctx ends; begin
// runs one forward (its accept loop) and returns when its listener is
// closed, beginUDP one UDP forward (its read loop) until its socket is.
func (s *forwardSet) start(ctx context.Context, wg *sync.WaitGroup, fs []Forward, us []UDPForward,
	begin func(context.Context, *forwardRun, *sync.WaitGroup), beginUDP func(context.Context, *udpRun, *sync.WaitGroup)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.wg, s.begin, s.beginUDP = ctx, wg, begin, beginUDP
	s.runs = map[net.Listener]*forwardRun{}
	s.udp = map[*net.UDPConn]*udpRun{}
	for _, f := range fs {
		s.addLocked(f)
	}
	for _, f := range us {
		s.addUDPLocked(f)
	}
}

func (s *forwardSet) addLocked(f Forward) {
	r := &forwardRun{ln: f.Listener}
	svc := f.Service
	r.service.Store(&svc)
	r.socks.Store(f.socks)
	s.runs[f.Listener] = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.begin(s.ctx, r, s.wg)
	}()
}

func (s *forwardSet) addUDPLocked(f UDPForward) {
	r := &udpRun{}
	r.cfg.Store(&f)
	s.udp[f.Conn] = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.beginUDP(s.ctx, r, s.wg)
	}()
}

// closeAll closes every listener and UDP socket: at shutdown.
func (s *forwardSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.runs {
		_ = ln.Close()
	}
	for conn := range s.udp {
		_ = conn.Close()
	}
}

// startForward is the begin of the client's forwards.
func (c *Client) startForward(ctx context.Context, f *forwardRun, wg *sync.WaitGroup) {
	what := *f.service.Load()
	if f.socks.Load() {
		c.log.Info("SOCKS5 listening", zap.Stringer("listen", f.ln.Addr()), zap.Strings("servers", c.servers.Addrs()))
	} else {
		c.log.Info("forwarding", zap.Stringer("listen", f.ln.Addr()), zap.String("service", what), zap.Strings("servers", c.servers.Addrs()))
	}
	c.acceptLoop(ctx, f, wg)
}

// Reload applies l to a running client. Forwards (the SOCKS listener
// among them) are their listeners and UDP forwards their sockets: one
// that the client runs keeps running, with l's settings for its next
// connections or flows; a new one starts; one left out is closed, and
// what it accepted before finishes on its own (a UDP forward's flows end
// with its socket). SOCKS users apply to the next SOCKS connections.
// Reverse forwards are their listen addresses: a new one is asked for on
// the current link, a removed one's registration stream is closed (the
// server then closes its listener), a new target is dialled by the next
// connections. A new key makes the client open a new link for new
// connections at once while the current one finishes its streams, so a
// key rotation drops nothing (docs/tunnel.md, "Rotating a key"). On an
// error nothing changes; the caller closes what it opened for it.
func (c *Client) Reload(l ClientLive) error {
	reverse, err := checkLive(&l)
	if err != nil {
		return err
	}
	want := l.Forwards
	if l.Socks != nil {
		want = append(append([]Forward(nil), want...), socksForward(l.Socks))
	}
	seen := map[net.Listener]bool{}
	for _, f := range want {
		seen[f.Listener] = true
	}
	seenUDP := map[*net.UDPConn]bool{}
	for _, f := range l.UDPForwards {
		seenUDP[f.Conn] = true
	}
	s := &c.fwd
	s.mu.Lock()
	if s.runs == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: reload before Run", ErrConfig)
	}
	// Users first: a SOCKS listener this reload adds serves with them.
	c.setSocksUsers(l.Socks)
	var n reloadCounts
	for ln, r := range s.runs {
		if !seen[ln] {
			c.log.Info("forward removed", zap.Stringer("listen", ln.Addr()), zap.String("service", *r.service.Load()))
			_ = ln.Close()
			delete(s.runs, ln)
			n.removed++
		}
	}
	for _, f := range want {
		if r, ok := s.runs[f.Listener]; ok {
			if old := *r.service.Load(); old != f.Service || r.socks.Load() != f.socks {
				c.log.Info("forward changed", zap.Stringer("listen", f.Listener.Addr()), zap.String("service", f.Service), zap.String("was", old))
				svc := f.Service
				r.service.Store(&svc)
				r.socks.Store(f.socks)
				n.changed++
			}
			continue
		}
		if s.ctx.Err() != nil {
			_ = f.Listener.Close() // shutting down: Run will not close it
			continue
		}
		s.addLocked(f)
		n.added++
	}
	for conn, r := range s.udp {
		if !seenUDP[conn] {
			c.log.Info("UDP forward removed", zap.Stringer("listen", conn.LocalAddr()), zap.String("service", r.cfg.Load().Service))
			_ = conn.Close() // its read loop ends its flows
			delete(s.udp, conn)
			n.udpRemoved++
		}
	}
	for _, f := range l.UDPForwards {
		if r, ok := s.udp[f.Conn]; ok {
			if old := *r.cfg.Load(); old != f {
				c.log.Info("UDP forward changed", zap.Stringer("listen", f.Conn.LocalAddr()), zap.String("service", f.Service), zap.String("was", old.Service))
				r.cfg.Store(&f)
				n.udpChanged++
			}
			continue
		}
		if s.ctx.Err() != nil {
			_ = f.Conn.Close()
			continue
		}
		s.addUDPLocked(f)
		n.udpAdded++
	}
	s.mu.Unlock()
	c.reloadReverse(reverse, &n)

	old := c.psk.Load()
	rolled := !bytes.Equal(*old, l.PSK)
	if rolled {
		k := bytes.Clone(l.PSK)
		c.psk.Store(&k)
		c.mu.Lock()
		up := c.sess != nil
		c.retiring = c.sess
		c.mu.Unlock()
		if up { // else the next link is made with the new key anyway
			select {
			case c.roll <- struct{}{}:
			default:
			}
		}
	}
	c.log.Info("reloaded", zap.Int("forwards", len(l.Forwards)), zap.Bool("socks", l.Socks != nil),
		zap.Int("added", n.added), zap.Int("removed", n.removed), zap.Int("changed", n.changed),
		zap.Int("udp_added", n.udpAdded), zap.Int("udp_removed", n.udpRemoved), zap.Int("udp_changed", n.udpChanged),
		zap.Int("reverse_added", n.revAdded), zap.Int("reverse_removed", n.revRemoved), zap.Int("reverse_changed", n.revChanged),
		zap.Bool("new_key", rolled))
	return nil
}

// reloadCounts are what a reload changed, for its log line.
type reloadCounts struct {
	added, removed, changed          int
	udpAdded, udpRemoved, udpChanged int
	revAdded, revRemoved, revChanged int
}

// setSocksUsers makes s's users (none without s) those of the next SOCKS
// connections.
func (c *Client) setSocksUsers(s *Socks) {
	users := map[string]string{}
	if s != nil && s.Users != nil {
		users = s.Users
	}
	c.socksUsers.Store(&users)
}

// retire closes sess once it carries no stream, or when ctx ends: a link
// the client left for a new one (a new key) finishes its streams first.
func retire(ctx context.Context, sess *mux.Session) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-sess.CloseChan():
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if sess.NumStreams() == 0 {
				_ = sess.Close()
				return
			}
		}
	}
}
