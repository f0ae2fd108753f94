package proxyproto

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/offload-dev/offload/internal/metrics"
	"github.com/offload-dev/offload/tunnel/internal/netguard"
)

// DefaultHeaderTimeout bounds reading a PROXY protocol header. A
// balancer writes it as soon as it has connected, so a few seconds is
// ample; a LOCAL health check may take as long to close.
const DefaultHeaderTimeout = 5 * time.Second

// Config makes the server read a PROXY protocol v2 header (header.go)
// from every connection before its handshake, and treat the connection as
// coming from the address in it.
//
// Anyone who can reach the listener could write a header naming any
// address, escaping the per-source handshake caps and falsifying the logs,
// so the header is believed only from the balancers: a connection whose
// own source is not in From is reset before a byte is read.
type Config struct {
	// From holds the balancers' addresses; it must not be empty.
	From []netip.Prefix
	// HeaderTimeout bounds reading the header, and a LOCAL connection's
	// wait for its first byte (0: DefaultHeaderTimeout).
	HeaderTimeout time.Duration
}

// Result is the outcome of a connection on a PROXY protocol listener, the
// label of offload_proxy_headers_total.
type Result int

// The results, in the order of their labels.
const (
	ResultOK      Result = iota // PROXY header: served as the client's address
	ResultLocal                 // LOCAL, then closed without a byte: a health check
	ResultServed                // LOCAL, then data: served with the balancer's address
	ResultRefused               // not from a balancer in From
	ResultBad                   // missing or malformed header
	ResultTimeout               // no whole header within HeaderTimeout
	ResultBusy                  // every header slot taken
	NumResults
)

var resultNames = [NumResults]string{"ok", "health_check", "local", "refused", "bad", "timeout", "busy"}

// String is the result's label.
func (r Result) String() string { return resultNames[r] }

// Stats are a PROXY protocol listener's counters; the zero value is ready.
type Stats struct {
	Results [NumResults]atomic.Uint64
	Pending atomic.Int64 // connections in their header now
}

// Listener reads the header of every accepted connection in a
// goroutine of its own (a slow one must not hold up the accept loop), at
// most maxPending at once, and hands on the connections whose header it
// accepted, wrapped so that RemoteAddr is the client's address.
//
// A connection keeps its header slot until the server's accept loop has
// taken it. So that one client behind the balancers can't fill the slots
// with connections waiting there (a flood faster than the accept loop),
// at most perSource of them may come from one source (sourceOf: the
// address in the header); a further one is reset at once and passed to
// dropped, as the handshake slots drop the excess of a source.
//
// Close closes the listener and every connection still in its header, and
// waits for their goroutines.
type Listener struct {
	net.Listener
	cfg       Config
	log       *zap.Logger
	stats     *Stats
	perSource int
	dropped   func() // a connection was reset: its source had perSource waiting

	badLog, refuseLog netguard.RateLimit

	ready  chan net.Conn
	failed chan error // the inner listener's final error
	closed chan struct{}
	sem    chan struct{} // header slots
	once   sync.Once
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending map[net.Conn]struct{}
	waiting map[netip.Prefix]int // connections waiting for Accept, by source
}

// NewListener reads the header of every connection ln accepts, at most
// maxPending at once and perSource (netguard.SourceOf of the address in
// the header; 0: no cap) waiting for Accept from one source; dropped, if
// not nil, is called for each connection reset because its source was at
// perSource. It counts in stats and logs, rate-limited, to log.
func NewListener(ln net.Listener, cfg Config, maxPending, perSource int, dropped func(), log *zap.Logger, stats *Stats) *Listener {
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	l := &Listener{
		Listener:  ln,
		cfg:       cfg,
		log:       log,
		stats:     stats,
		badLog:    netguard.RateLimit{Every: 10 * time.Second},
		refuseLog: netguard.RateLimit{Every: 10 * time.Second},
		ready:     make(chan net.Conn),
		failed:    make(chan error, 1),
		closed:    make(chan struct{}),
		sem:       make(chan struct{}, maxPending),
		pending:   map[net.Conn]struct{}{},
		waiting:   map[netip.Prefix]int{},
		perSource: perSource,
		dropped:   dropped,
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

// Accept returns the next connection whose header was accepted.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case err := <-l.failed:
		l.failed <- err // for the next call too
		return nil, err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, resets the connections still in their header and
// waits for their goroutines.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.closed)
		err = l.Listener.Close()
		l.mu.Lock()
		for c := range l.pending {
			_ = c.SetDeadline(time.Unix(1, 0)) // long past: fail the read now
		}
		l.mu.Unlock()
	})
	l.wg.Wait()
	return err
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				delay = netguard.AcceptBackoff(delay)
				l.log.Warn("accept failed; retrying", zap.Error(err), zap.Duration("in", delay))
				select {
				case <-time.After(delay):
				case <-l.closed:
					return
				}
				continue
			}
			l.failed <- err
			return
		}
		delay = 0
		if !l.fromBalancer(c.RemoteAddr()) {
			netguard.Reset(c)
			l.stats.Results[ResultRefused].Add(1)
			if ok, n := l.refuseLog.Allow(); ok {
				l.log.Warn("refused a connection that is not from a load balancer in proxy_protocol_from",
					zap.Stringer("remote", c.RemoteAddr()), zap.Uint64("refusals_not_logged", n))
			}
			continue
		}
		select {
		case l.sem <- struct{}{}:
		default:
			// Every header slot is taken: wait for one, and accept
			// nothing meanwhile, so that the next connections wait in
			// the kernel's listen queue in their order. Resetting c
			// instead reset genuine clients beside a burst that came
			// faster than the header goroutines ran.
			l.stats.Results[ResultBusy].Add(1)
			if ok, n := l.badLog.Allow(); ok {
				l.log.Warn("PROXY protocol header slots full: waiting for one before accepting more", zap.Int("slots", cap(l.sem)),
					zap.Uint64("waits_not_logged", n))
			}
			select {
			case l.sem <- struct{}{}:
			case <-l.closed:
				netguard.Reset(c)
				return
			}
		}
		l.mu.Lock()
		l.pending[c] = struct{}{}
		l.mu.Unlock()
		l.stats.Pending.Add(1)
		l.wg.Add(1)
		go l.header(c)
	}
}

// fromBalancer reports whether a is in cfg.From.
func (l *Listener) fromBalancer(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return false
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	ip = ip.Unmap()
	for _, p := range l.cfg.From {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// header reads c's header and hands c on, or closes it.
func (l *Listener) header(c net.Conn) {
	defer l.wg.Done()
	defer func() {
		l.stats.Pending.Add(-1)
		<-l.sem
	}()
	res, conn, err := l.read(c)
	l.mu.Lock()
	delete(l.pending, c)
	l.mu.Unlock()
	l.stats.Results[res].Add(1)
	if conn == nil {
		netguard.Reset(c)
		if err != nil {
			if ok, n := l.badLog.Allow(); ok {
				l.log.Warn("closed a connection without a valid PROXY protocol header", zap.Stringer("balancer", c.RemoteAddr()),
					zap.Stringer("reason", res), zap.Error(err), zap.Uint64("failures_not_logged", n))
			}
		}
		return
	}
	src := netguard.SourceOf(conn)
	l.mu.Lock()
	full := l.perSource > 0 && l.waiting[src] >= l.perSource
	if !full {
		l.waiting[src]++
	}
	l.mu.Unlock()
	if full {
		netguard.Reset(c)
		if l.dropped != nil {
			l.dropped()
		}
		return
	}
	defer func() {
		l.mu.Lock()
		if l.waiting[src]--; l.waiting[src] <= 0 {
			delete(l.waiting, src)
		}
		l.mu.Unlock()
	}()
	select {
	case l.ready <- conn:
	case <-l.closed:
		netguard.Reset(c)
	}
}

// read reads the header within HeaderTimeout and returns the outcome and
// the connection to serve (nil: close c; err says why, nil for a health
// check).
func (l *Listener) read(c net.Conn) (Result, net.Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(l.cfg.HeaderTimeout)); err != nil {
		return ResultBad, nil, err
	}
	h, err := ReadHeader(c)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return ResultTimeout, nil, fmt.Errorf("no whole header within %v: %w", l.cfg.HeaderTimeout, err)
		}
		return ResultBad, nil, err
	}
	if h.Local {
		// A balancer's health check: it connects, writes the header and
		// closes. Serve it only if it goes on to send something.
		data, err := netguard.WaitData(c)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			return ResultTimeout, nil, fmt.Errorf("LOCAL connection sent nothing within %v: %w", l.cfg.HeaderTimeout, err)
		case err != nil || !data:
			return ResultLocal, nil, nil
		}
		if err := c.SetReadDeadline(time.Time{}); err != nil {
			return ResultBad, nil, err
		}
		return ResultServed, c, nil
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return ResultBad, nil, err
	}
	return ResultOK, &proxiedConn{Conn: c, remote: h.Addr()}, nil
}

// proxiedConn is a connection whose RemoteAddr is the client's address
// from the PROXY header. It passes on what the server uses of the TCP
// connection beneath: the socket for peeking at a first flight
// (the tunnel's handshake slots) and SO_LINGER for resets.
type proxiedConn struct {
	net.Conn
	remote net.Addr
}

func (c *proxiedConn) RemoteAddr() net.Addr { return c.remote }

func (c *proxiedConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("%T has no socket", c.Conn)
	}
	return sc.SyscallConn()
}

func (c *proxiedConn) SetLinger(sec int) error {
	lc, ok := c.Conn.(interface{ SetLinger(int) error })
	if !ok {
		return fmt.Errorf("%T has no SO_LINGER", c.Conn)
	}
	return lc.SetLinger(sec)
}

// WritePrometheus writes offload_proxy_headers_total and
// offload_proxy_headers_pending.
func (st *Stats) WritePrometheus(w io.Writer) {
	for i := range st.Results {
		metrics.WriteCounterUint64(w, fmt.Sprintf(`offload_proxy_headers_total{result=%q}`, Result(i)), st.Results[i].Load())
	}
	metrics.WriteGaugeUint64(w, `offload_proxy_headers_pending`, uint64(max(st.Pending.Load(), 0)))
}
