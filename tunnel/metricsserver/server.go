// Package metricsserver serves an end's /metrics, /healthz and /status on
// the metrics listener: a hand-written HTTP/1.x answerer with its own
// connection slots, bounds and bearer token. It serves what others
// compute (the tunnel writes the samples and builds the Status) and knows
// no Server or Client; cmd/offload wires the two together, and tunnel
// never imports it.
package metricsserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/offload-dev/offload/tunnel/internal/netguard"
	"go.uber.org/zap"
)

// The metrics endpoint answers HTTP/1.x GET and HEAD of /metrics, and of
// /healthz when Options.Health is set (and /status when Options.Status
// is, status.go), and nothing else, without net/http: net/http's server brings HTTP/2,
// crypto/tls and crypto/x509 into the binary, 2 MB of a router's 8 MiB
// flash budget on MIPS (docs/budgets.md), for one read-only page a
// Prometheus scraper fetches with a plain GET. Every connection is closed
// after one answer, so there is no idle keep-alive connection to time out.
//
// Bounds. A connection waiting for its request head holds one of
// maxPending slots (slots.go), taken in the accept loop; when
// all are taken, a new connection takes the slot of the oldest one whose
// request head has not arrived (of the source with the most pending), and
// that one is reset. A connection whose whole head has arrived, read or
// still in its socket buffer, is never the one reset, so connections that
// send nothing or half a request can not keep out a scraper, which sends
// its request at once, however fast they come; if every slot holds a
// whole head, the new connection is closed. Reading the head has
// headTimeout, writing the answer writeTimeout; at most maxAnswers
// connections are answered at once, beyond that one with its head read
// is closed.
//
// Access. The config serves metrics on loopback unless a bearer token is
// set (config: metrics, metrics_token_file). With a token every request
// must carry "Authorization: Bearer TOKEN" or gets 401; the token is
// compared in constant time, through SHA-256 so its length does not show.
// /healthz needs no token: a load balancer's check learns only "serving"
// (200) or "not now" (503), which it could learn from the tunnel port.
const (
	headTimeout  = 5 * time.Second  // to read a request's head
	writeTimeout = 10 * time.Second // to write the answer
	maxHead      = 8 << 10          // bytes of request line and headers
	maxPending   = 16               // connections waiting for their head
	maxAnswers   = 48               // connections being answered at once
)

// Options configures Serve.
type Options struct {
	// Metrics writes the page /metrics answers with, in the Prometheus
	// text format (exposition.Write of a metrics.Set); it is called
	// once per request. nil answers an empty page.
	Metrics func(w io.Writer)
	// Token, if not empty, is the bearer token every request must carry.
	Token []byte
	// Logger gets refused requests (rate limited) and accept errors;
	// nil means zap.NewNop().
	Logger *zap.Logger
	// Health, if not nil, answers /healthz: 200 while it returns true,
	// 503 otherwise (Server.Healthy, Client.Healthy).
	Health func() bool
	// Status, if not nil, answers /status with the JSON of what it
	// returns (tunnel's Server.Status, Client.Status), under the same
	// token as /metrics (status.go).
	Status func() any
}

// Serve answers /metrics (and /healthz, /status) on ln until ctx ends; it
// closes ln and waits for the answers in progress.
func Serve(ctx context.Context, ln net.Listener, opt Options) error {
	log := opt.Logger
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("metrics")
	m := &server{metrics: opt.Metrics, log: log, health: opt.Health, status: opt.Status, refuseLog: netguard.RateLimit{Every: 10 * time.Second}}
	if len(opt.Token) > 0 {
		sum := sha256.Sum256(opt.Token)
		m.tokenSum = &sum
	}
	m.pending = newSlots(maxPending)
	m.answers = make(chan struct{}, maxAnswers)
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				backoff = netguard.AcceptBackoff(backoff)
				log.Warn("accept", zap.Error(err), zap.Duration("retry_in", backoff))
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("metrics: %w", err)
		}
		backoff = 0
		// The slot is taken here, not in the goroutine, so that a flood
		// can't pile up connections that hold none.
		sl := m.pending.acquire(conn)
		if sl == nil {
			_ = conn.Close() // every slot holds a whole request head
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			if err := m.answer(conn, sl); err != nil {
				log.Debug("request", zap.Stringer("peer", conn.RemoteAddr()), zap.Error(err))
			}
		}()
	}
}

// server is what the connections of one Serve share.
type server struct {
	metrics   func(io.Writer) // nil: an empty page
	log       *zap.Logger
	tokenSum  *[sha256.Size]byte // nil: no token required
	pending   *slots             // connections waiting for their head
	answers   chan struct{}      // connections being answered
	health    func() bool        // nil: no /healthz
	status    func() any         // nil: no /status
	refuseLog netguard.RateLimit
}

// answer reads one request head on conn, which holds pending slot sl
// meanwhile, and writes one answer.
func (m *server) answer(conn net.Conn, sl *slot) error {
	req, err := readRequest(netguard.SlotConn[*slot]{Conn: conn, Watch: m.pending, Slot: sl})
	if m.pending.release(sl) {
		return errors.New("evicted while waiting for the request head")
	}
	if err != nil {
		return err
	}
	select {
	case m.answers <- struct{}{}:
		defer func() { <-m.answers }()
	default:
		return errors.New("too many answers in progress")
	}
	if err := conn.SetDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if path, _, _ := strings.Cut(req.target, "?"); req.bad == "" && path == "/healthz" && m.health != nil {
		return answerHealth(conn, req.method, m.health())
	}
	if path, _, _ := strings.Cut(req.target, "?"); req.bad == "" && path == "/status" && m.status != nil {
		return answerStatus(conn, req, m.status, m.authorized)
	}
	return answerMetrics(conn, req, m.metrics, m.authorized)
}

// answerHealth answers /healthz: 200 while the end is healthy, 503 while
// it is not (a server draining, a client without a link).
func answerHealth(conn net.Conn, method string, healthy bool) error {
	if method != "GET" && method != "HEAD" {
		return writeAnswer(conn, 405, "Method Not Allowed", "text/plain", []byte("GET or HEAD\n"), true, "")
	}
	if !healthy {
		return writeAnswer(conn, 503, "Service Unavailable", "text/plain", []byte("unavailable\n"), method == "GET", "")
	}
	return writeAnswer(conn, 200, "OK", "text/plain", []byte("ok\n"), method == "GET", "")
}

// authorized reports whether a request's Authorization header carries the
// token, if one is required.
func (m *server) authorized(h textproto.MIMEHeader) bool {
	if m.tokenSum == nil {
		return true
	}
	scheme, tok, _ := strings.Cut(h.Get("Authorization"), " ")
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	ok := subtle.ConstantTimeCompare(sum[:], m.tokenSum[:]) == 1 && strings.EqualFold(scheme, "Bearer")
	if !ok {
		if log, n := m.refuseLog.Allow(); log {
			m.log.Warn("refused a request without the right bearer token", zap.Uint64("refusals_not_logged", n))
		}
	}
	return ok
}

// request is a request head, or the answer to a malformed one.
type request struct {
	method, target string
	header         textproto.MIMEHeader
	bad            string // not empty: answer 400 with this body
}

// readRequest reads one request head within headTimeout.
func readRequest(conn net.Conn) (*request, error) {
	if err := conn.SetDeadline(time.Now().Add(headTimeout)); err != nil {
		return nil, err
	}
	tp := textproto.NewReader(bufio.NewReader(&limitedConn{conn, maxHead}))
	line, err := tp.ReadLine()
	if err != nil {
		return nil, fmt.Errorf("request line: %w", err)
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(proto, "HTTP/1.") {
		return &request{bad: "bad request\n"}, nil
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return &request{bad: "bad request header\n"}, nil
	}
	return &request{method: method, target: target, header: h}, nil
}

// answerMetrics writes the answer to req.
func answerMetrics(conn net.Conn, req *request, page func(io.Writer), authorized func(textproto.MIMEHeader) bool) error {
	if req.bad != "" {
		return writeAnswer(conn, 400, "Bad Request", "text/plain", []byte(req.bad), true, "")
	}
	method := req.method
	if !authorized(req.header) {
		return answerUnauthorized(conn, method)
	}
	if path, _, _ := strings.Cut(req.target, "?"); path != "/metrics" {
		return writeAnswer(conn, 404, "Not Found", "text/plain", []byte("only /metrics is here\n"), method != "HEAD", "")
	}
	if method != "GET" && method != "HEAD" {
		return writeAnswer(conn, 405, "Method Not Allowed", "text/plain", []byte("GET or HEAD\n"), true, "")
	}
	var body bytes.Buffer
	if page != nil {
		page(&body)
	}
	return writeAnswer(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body.Bytes(), method == "GET", "")
}

// writeAnswer writes a whole answer; extra is one more header line, or "".
func writeAnswer(conn net.Conn, code int, status, ctype string, body []byte, withBody bool, extra string) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n", code, status, ctype, len(body))
	if extra != "" {
		b.WriteString(extra + "\r\n")
	}
	b.WriteString("\r\n")
	if withBody {
		b.Write(body)
	}
	_, err := conn.Write(b.Bytes())
	return err
}

// limitedConn reads at most n bytes, so a client can't make the head
// reader buffer without bound.
type limitedConn struct {
	net.Conn
	n int
}

func (l *limitedConn) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("request head too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.Conn.Read(p)
	l.n -= n
	return n, err
}
