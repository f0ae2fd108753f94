package tunnel

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"
	"go.uber.org/zap"

	"github.com/offload-dev/offload/tunnel/handshake"
)

// The client's reload: a new key for the next links, and forwards added,
// removed or pointed at another service, while the link and the
// connections of the forwards that stay carry on.

// forwardRun is a running forward: its listener and the service its next
// connections go to (a reload may change it).
type forwardRun struct {
	ln      net.Listener
	service atomic.Pointer[string]
	// handle, if set, serves each connection instead (the SOCKS
	// listener, which a reload leaves alone: it needs a restart).
	handle func(context.Context, net.Conn)
}

// forwardSet is a client's running forwards, by listener.
type forwardSet struct {
	mu    sync.Mutex
	runs  map[net.Listener]*forwardRun
	ctx   context.Context // Run's; nil before Run
	wg    *sync.WaitGroup
	begin func(context.Context, *forwardRun, *sync.WaitGroup)
}

// start runs fs's forwards until ctx ends; begin runs one (its accept
// loop) and returns when its listener is closed.
func (s *forwardSet) start(ctx context.Context, wg *sync.WaitGroup, fs []Forward, begin func(context.Context, *forwardRun, *sync.WaitGroup)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.wg, s.begin = ctx, wg, begin
	s.runs = map[net.Listener]*forwardRun{}
	for _, f := range fs {
		s.addLocked(f)
	}
}

func (s *forwardSet) addLocked(f Forward) {
	r := &forwardRun{ln: f.Listener, handle: f.handle}
	svc := f.Service
	r.service.Store(&svc)
	s.runs[f.Listener] = r
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.begin(s.ctx, r, s.wg)
	}()
}

// closeAll closes every listener: at shutdown.
func (s *forwardSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ln := range s.runs {
		_ = ln.Close()
	}
}

// startForward is the begin of the client's forwards.
func (c *Client) startForward(ctx context.Context, f *forwardRun, wg *sync.WaitGroup) {
	c.log.Info("forwarding", zap.Stringer("listen", f.ln.Addr()), zap.String("service", *f.service.Load()), zap.Strings("servers", c.servers.addrs))
	c.acceptLoop(ctx, f, wg)
}

// Reload gives a running client psk for its next handshakes and forwards
// as its forwards. A forward is its listener: one in forwards that the
// client runs keeps running (with forwards' service for its next
// connections), a new one starts, and one left out is closed; connections
// it accepted before finish on their own. A new key makes the client open
// a new link for new connections at once while the current one finishes
// its streams, so a key rotation drops nothing (docs/tunnel.md, "Rotating
// a key"). On an error nothing changes; the caller closes the listeners
// it opened for it.
func (c *Client) Reload(psk []byte, forwards []Forward) error {
	if len(psk) != handshake.PSKSize {
		return fmt.Errorf("%w: pre-shared key is %d bytes, want %d", ErrConfig, len(psk), handshake.PSKSize)
	}
	// SOCKS, UDP and reverse forwards stay as they are: a change to them
	// needs a restart (the caller reports it).
	if len(forwards) == 0 && !c.socks && len(c.udpForwards) == 0 && len(c.reverse) == 0 {
		return fmt.Errorf("%w: no forwards", ErrConfig)
	}
	seen := map[net.Listener]bool{}
	for _, f := range forwards {
		if f.Listener == nil || len(f.Service) == 0 || len(f.Service) > 255 {
			return fmt.Errorf("%w: forward %q: want a listener and a service name of 1..255 bytes", ErrConfig, f.Service)
		}
		if seen[f.Listener] {
			return fmt.Errorf("%w: forward %q: listener %v twice", ErrConfig, f.Service, f.Listener.Addr())
		}
		seen[f.Listener] = true
	}
	s := &c.fwd
	s.mu.Lock()
	if s.runs == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: reload before Run", ErrConfig)
	}
	added, removed, changed := 0, 0, 0
	for ln, r := range s.runs {
		if r.handle != nil {
			continue // the SOCKS listener
		}
		if !seen[ln] {
			c.log.Info("forward removed", zap.Stringer("listen", ln.Addr()), zap.String("service", *r.service.Load()))
			_ = ln.Close()
			delete(s.runs, ln)
			removed++
		}
	}
	for _, f := range forwards {
		if r, ok := s.runs[f.Listener]; ok {
			if old := *r.service.Load(); old != f.Service {
				c.log.Info("forward changed", zap.Stringer("listen", f.Listener.Addr()), zap.String("service", f.Service), zap.String("was", old))
				svc := f.Service
				r.service.Store(&svc)
				changed++
			}
			continue
		}
		if s.ctx.Err() != nil {
			_ = f.Listener.Close() // shutting down: Run will not close it
			continue
		}
		s.addLocked(f)
		added++
	}
	s.mu.Unlock()

	old := c.psk.Load()
	rolled := !bytes.Equal(*old, psk)
	if rolled {
		k := bytes.Clone(psk)
		c.psk.Store(&k)
		c.mu.Lock()
		up := c.sess != nil
		c.mu.Unlock()
		if up { // else the next link is made with the new key anyway
			select {
			case c.roll <- struct{}{}:
			default:
			}
		}
	}
	c.log.Info("reloaded", zap.Int("forwards", len(forwards)), zap.Int("added", added), zap.Int("removed", removed),
		zap.Int("changed", changed), zap.Bool("new_key", rolled))
	return nil
}

// retire closes sess once it carries no stream, or when ctx ends: a link
// the client left for a new one (a new key) finishes its streams first.
func retire(ctx context.Context, sess *yamux.Session) {
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
