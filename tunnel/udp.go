package tunnel

// UDP forwarding. A client UDP listener sends each source address's
// datagrams over one stream (a flow) to a UDP service of the server, which
// sends them from a connected UDP socket of its own to the service's
// target and carries the answers back the same way:
//
//	app ──UDP──> client: listener read loop ──queue──> flow writer ──stream──┐
//	app <──UDP── client: flow reader  <──────────────────────────── stream ──┤
//	                                   server: stream reader ──UDP──> target │
//	                                   server: socket reader <──UDP── target ┘
//
// After the request (kind udp) and the server's response, each direction
// of the stream carries datagrams, each framed with its length
// (tunnel/stream's datagram wire).
//
// The stream is reliable and ordered, so the tunnel itself neither loses
// nor reorders; what UDP does between the ends and their applications
// (loss, reordering, duplicates) passes through as it is.
//
// Bounds: a datagram larger than stream.MaxDatagram is dropped where it is
// read and counted (oversize), never cut; a frame larger than it on a
// stream is a protocol error that ends the flow. Each flow queues at most
// udpQueue datagrams and udpQueueBytes on the client (more are dropped and
// counted, as a full socket buffer would). A forward holds at most MaxFlows flows, and
// every flow is a stream, so the link's stream cap (MaxStreams) bounds
// the flows of a link. A flow that carried nothing either way for
// IdleTimeout ends (the client closes its stream; the server then closes
// its socket).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"github.com/offload-dev/offload/tunnel/mux"
	"github.com/offload-dev/offload/tunnel/stream"
	"go.uber.org/zap"
)

// UDP defaults and bounds.
const (
	// udpQueue is how many datagrams a flow holds on the client while
	// its stream is busy, and udpQueueBytes how many bytes they may
	// take: 64 flows of full queues stay within 4 MiB, whatever the
	// datagrams' sizes.
	udpQueue      = 32
	udpQueueBytes = 64 << 10

	// DefaultUDPIdleTimeout ends a flow (a client source address) that
	// carried no datagram either way for this long. 30 s outlives a DNS
	// retry and a VoIP silence, and frees a stream soon after a game ends.
	DefaultUDPIdleTimeout = 30 * time.Second
	// DefaultUDPMaxFlows caps a forward's flows at once; each is a stream.
	DefaultUDPMaxFlows = 64
)

// UDPForward is one client UDP listener: datagrams to Conn go to the
// server's UDP service Service, a flow per source address.
type UDPForward struct {
	Conn    *net.UDPConn
	Service string
	// IdleTimeout ends a flow that carried nothing for this long (0:
	// DefaultUDPIdleTimeout).
	IdleTimeout time.Duration
	// MaxFlows caps the forward's flows at once (0: DefaultUDPMaxFlows);
	// datagrams from further sources are dropped and counted.
	MaxFlows int
}

// udpCounters count datagrams; both ends have one.
type udpCounters struct {
	role                         string
	up, down                     atomic.Uint64 // datagrams carried, app → target and back
	oversize, dropped, flowsFull atomic.Uint64
	flows                        atomic.Int64
}

func (u *udpCounters) writePrometheus(w io.Writer) {
	for _, m := range []struct {
		result string
		n      uint64
	}{{"up", u.up.Load()}, {"down", u.down.Load()}, {"oversize", u.oversize.Load()}, {"dropped", u.dropped.Load()}, {"flows_full", u.flowsFull.Load()}} {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_udp_datagrams_total{role=%q,result=%q}`, u.role, m.result), m.n)
	}
	metrics.WriteGaugeUint64(w, fmt.Sprintf(`offload_udp_flows_active{role=%q}`, u.role), uint64(max(u.flows.Load(), 0)))
}

// udpFlow is one client source address's flow.
type udpFlow struct {
	src    netip.AddrPort
	queue  chan []byte  // framed datagrams (header included)
	queued atomic.Int64 // bytes in queue
	last   atomic.Int64 // monoNow of its last datagram
	done   chan struct{}
	ended  sync.Once // closes done: the flow's goroutines and the forward's shutdown both end it
}

// startUDP is the begin of the client's UDP forwards (clientreload.go):
// it runs r's read loop until its socket is closed (at shutdown, or by a
// reload that removes it).
func (c *Client) startUDP(ctx context.Context, r *udpRun, wg *sync.WaitGroup) {
	f := r.cfg.Load()
	c.log.Info("forwarding UDP", zap.Stringer("listen", f.Conn.LocalAddr()), zap.String("service", f.Service), zap.Strings("servers", c.servers.Addrs()))
	c.udpLoop(ctx, r, wg)
}

// udpLoop reads the listener and hands each datagram to its source's flow,
// starting flows as sources appear, each with the forward's settings of
// the moment (a reload may change them; running flows keep theirs).
func (c *Client) udpLoop(ctx context.Context, r *udpRun, wg *sync.WaitGroup) {
	conn := r.cfg.Load().Conn
	var mu sync.Mutex
	flows := map[netip.AddrPort]*udpFlow{}
	// One byte more than the largest datagram: a datagram that fills it
	// was bigger than allowed (the kernel cut it), and is refused.
	buf := make([]byte, stream.MaxDatagram+1)
	for {
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		f := *r.cfg.Load()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				break
			}
			c.udpLog(f, "reading the UDP listener", err)
			continue
		}
		if n > stream.MaxDatagram {
			c.udp.oversize.Add(1)
			c.udpLog(f, "datagram refused", fmt.Errorf("%d bytes or more from %v: larger than %d", n, src, stream.MaxDatagram))
			continue
		}
		if n == 0 {
			// A frame can't carry an empty datagram; nothing is lost.
			continue
		}
		mu.Lock()
		fl := flows[src]
		if fl == nil {
			maxFlows := cmp.Or(f.MaxFlows, DefaultUDPMaxFlows)
			if n := len(flows); n >= maxFlows || c.ctr.active.Load() >= int64(c.opt.MaxStreams) {
				mu.Unlock()
				c.udp.flowsFull.Add(1)
				c.udpLog(f, "datagram dropped", fmt.Errorf("%w: no room for a flow from %v (%d flows, max_flows %d)", stream.ErrBusy, src, n, maxFlows))
				continue
			}
			fl = &udpFlow{src: src, queue: make(chan []byte, udpQueue), done: make(chan struct{})}
			fl.last.Store(monoNow())
			flows[src] = fl
			c.ctr.active.Add(1)
			c.streams.add()
			c.udp.flows.Add(1)
			closeTally := c.ctr.live.Streams.Open("udp", f.Service)
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.runFlow(ctx, f, fl, cmp.Or(f.IdleTimeout, DefaultUDPIdleTimeout))
				mu.Lock()
				delete(flows, src)
				mu.Unlock()
				c.udp.flows.Add(-1)
				closeTally()
				c.streams.done()
				c.ctr.active.Add(-1)
			}()
		}
		mu.Unlock()
		d := make([]byte, stream.DatagramHeader+n)
		stream.PutDatagramHeader(d, n)
		copy(d[stream.DatagramHeader:], buf[:n])
		if fl.queued.Add(int64(len(d))) > udpQueueBytes {
			fl.queued.Add(-int64(len(d)))
			c.udp.dropped.Add(1)
			continue
		}
		select {
		case fl.queue <- d:
		case <-fl.done:
			c.udp.dropped.Add(1)
		default:
			fl.queued.Add(-int64(len(d)))
			c.udp.dropped.Add(1)
		}
	}
	mu.Lock()
	for _, fl := range flows {
		fl.end()
	}
	mu.Unlock()
}

// end stops the flow's writer; any number of callers, at once too (a
// select before the close let two of them close it: a panic under -race
// beside a busy core).
func (fl *udpFlow) end() { fl.ended.Do(func() { close(fl.done) }) }

// runFlow opens the flow's stream and runs it until it is idle, fails or
// ctx ends: this goroutine writes queued datagrams, another reads answers
// and sends them to the source.
func (c *Client) runFlow(ctx context.Context, f UDPForward, fl *udpFlow, idle time.Duration) {
	end := fl.end
	defer end()
	req, err := stream.AppendRequest(nil, stream.KindUDP, f.Service)
	if err != nil {
		c.refused("udp "+f.Service, err)
		return
	}
	st, err := c.openStream(ctx, req)
	if err != nil {
		c.refused("udp "+f.Service, err)
		return
	}
	defer st.Close()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		defer end()
		_ = st.SetReadDeadline(time.Now().Add(2 * c.opt.DialTimeout))
		if err := stream.ReadResponse(st); err != nil {
			c.refused("udp "+f.Service, err)
			return
		}
		_ = st.SetReadDeadline(time.Time{})
		err := stream.ReadDatagrams(st, func(d []byte) error {
			fl.last.Store(monoNow())
			c.udp.down.Add(1)
			_, err := f.Conn.WriteToUDPAddrPort(d, fl.src)
			return err
		})
		// ReadDatagrams ends only with an error: EOF is the server's close.
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			if ce := c.log.Check(zap.DebugLevel, "UDP flow ended"); ce != nil {
				ce.Write(zap.Stringer("source", fl.src), zap.Error(err))
			}
		}
	}()
	tick := time.NewTicker(max(idle/4, 10*time.Millisecond))
	defer tick.Stop()
loop:
	for {
		select {
		case d := <-fl.queue:
			fl.queued.Add(-int64(len(d)))
			_ = st.SetWriteDeadline(time.Now().Add(c.opt.DialTimeout))
			if _, err := st.Write(d); err != nil {
				c.udp.dropped.Add(1)
				break loop
			}
			c.udp.up.Add(1)
			fl.last.Store(monoNow())
		case <-tick.C:
			if time.Duration(monoNow()-fl.last.Load()) >= idle {
				break loop
			}
		case <-fl.done:
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	_ = st.Close()
	_ = st.SetReadDeadline(aLongTimeAgo)
	<-readerDone
}

func (c *Client) udpLog(f UDPForward, msg string, err error) {
	if ok, n := c.refuseLog.Allow(); ok {
		c.log.Warn(msg, zap.Stringer("listen", f.Conn.LocalAddr()), zap.String("service", f.Service), zap.Error(err), zap.Uint64("not_logged", n))
	}
}

// serveUDP serves a udp stream: a connected socket to the service's
// target, datagrams both ways until the stream or the link ends.
func (s *Server) serveUDP(ctx context.Context, st *mux.Stream, name string, l *link) {
	what := "udp " + name
	log := l.log
	// The client hears the same for a UDP service that does not exist and
	// one it may not use; a reload that takes it away ends the flow.
	ctx, state, done, err := s.hold(ctx, l, what, func(st *serverState, a *access) string {
		switch err := udpGrant(st, a, name); {
		case errors.Is(err, errNoUDPService):
			return "UDP service removed from the config"
		case err != nil:
			return "UDP service not allowed for this client"
		}
		return ""
	})
	if err != nil {
		if !errors.Is(err, errReloaded) {
			err = fmt.Errorf("%w: %w", stream.ErrUnknownService, err)
		}
		s.refuse(st, stream.StatusUnknownService, "unknown UDP service", l, what, err)
		return
	}
	defer done()
	target, _ := state.rules.UDPTarget(name)
	conn, err := s.dialer.DialContext(ctx, "udp", target)
	if err != nil {
		s.refuse(st, dialStatus(err), err.Error(), l, what, err)
		return
	}
	defer conn.Close()
	// A reload's cancel ends both directions, as the stream's end does.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close(); _ = st.Close() })
	defer stop()
	if _, err := st.Write(stream.AppendResponse(nil, stream.StatusOK, "")); err != nil {
		_ = st.Close()
		s.stream(l, streamAborted)
		return
	}
	s.ctr.active.Add(1)
	defer s.ctr.active.Add(-1)
	l.ctr.active.Add(1)
	defer l.ctr.active.Add(-1)
	defer l.stat.Open("udp", name)()
	s.udp.flows.Add(1)
	defer s.udp.flows.Add(-1)

	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		buf := make([]byte, stream.DatagramHeader+stream.MaxDatagram+1)
		for {
			n, err := conn.Read(buf[stream.DatagramHeader:])
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				// ICMP port unreachable and the like come back on
				// a connected socket's next read: UDP goes on.
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return
				}
				continue
			}
			if n > stream.MaxDatagram {
				s.udp.oversize.Add(1)
				if ok, k := s.refuseLog.Allow(); ok {
					log.Warn("datagram refused", zap.String("service", name),
						zap.Error(fmt.Errorf("%d bytes or more from %s: larger than %d", n, target, stream.MaxDatagram)), zap.Uint64("not_logged", k))
				}
				continue
			}
			if n == 0 {
				continue
			}
			stream.PutDatagramHeader(buf, n)
			if _, err := st.Write(buf[:stream.DatagramHeader+n]); err != nil {
				return
			}
			s.udp.down.Add(1)
		}
	}()
	err = stream.ReadDatagrams(st, func(d []byte) error {
		s.udp.up.Add(1)
		if _, err := conn.Write(d); err != nil {
			// A refused send (no listener yet) loses the datagram, as
			// UDP would; the flow goes on.
			s.udp.dropped.Add(1)
		}
		return nil
	})
	_ = st.Close()
	_ = conn.Close()
	<-downDone
	// The stream's end (EOF, the link) ends a flow normally; only a
	// malformed frame is the client's fault.
	if errors.Is(err, stream.ErrBadRequest) {
		s.stream(l, streamAborted)
		if ok, k := s.refuseLog.Allow(); ok {
			log.Warn("UDP flow aborted", zap.String("service", name), zap.Error(err), zap.Uint64("not_logged", k))
		}
		return
	}
	if errors.Is(context.Cause(ctx), errReloaded) {
		s.stream(l, streamAborted)
		return
	}
	s.stream(l, streamOK)
}

// monoStart anchors the flows' idle clocks to the monotonic clock: a wall
// clock step (NTP setting a router's clock after boot, often by years)
// must not end every flow at once.
var monoStart = time.Now()

// monoNow is the time since monoStart on the monotonic clock.
func monoNow() int64 { return int64(time.Since(monoStart)) }
