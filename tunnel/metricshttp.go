package tunnel

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"go.uber.org/zap"
)

// The metrics endpoint answers HTTP/1.x GET and HEAD of /metrics and
// nothing else, without net/http: net/http's server brings HTTP/2,
// crypto/tls and crypto/x509 into the binary, 2 MB of a router's 8 MiB
// flash budget on MIPS (docs/budgets.md), for one read-only page a
// Prometheus scraper fetches with a plain GET. Every connection is closed
// after one answer.
const (
	metricsHeadTimeout = 10 * time.Second // to read a request's head
	metricsMaxHead     = 8 << 10          // bytes of request line and headers
	metricsMaxConns    = 8                // connections answered at once
)

// ServeMetrics serves set in the Prometheus text format at /metrics on ln
// until ctx ends; it closes ln and waits for the answers in progress.
func ServeMetrics(ctx context.Context, ln net.Listener, set *metrics.Set, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	log = log.Named("metrics")
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, metricsMaxConns)
	var backoff time.Duration
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
				backoff = acceptBackoff(backoff)
				log.Warn("accept", zap.Error(err), zap.Duration("retry_in", backoff))
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("metrics: %w", err)
		}
		backoff = 0
		select {
		case slots <- struct{}{}:
		default:
			_ = conn.Close() // a scraper retries; a flood gets nothing
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer conn.Close()
			if err := answerMetrics(conn, set); err != nil {
				log.Debug("request", zap.Stringer("peer", conn.RemoteAddr()), zap.Error(err))
			}
		}()
	}
}

// answerMetrics reads one request head and writes one answer.
func answerMetrics(conn net.Conn, set *metrics.Set) error {
	if err := conn.SetDeadline(time.Now().Add(metricsHeadTimeout)); err != nil {
		return err
	}
	tp := textproto.NewReader(bufio.NewReader(&limitedConn{conn, metricsMaxHead}))
	line, err := tp.ReadLine()
	if err != nil {
		return fmt.Errorf("request line: %w", err)
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(proto, "HTTP/1.") {
		return writeAnswer(conn, 400, "Bad Request", "text/plain", []byte("bad request\n"), true)
	}
	if _, err := tp.ReadMIMEHeader(); err != nil {
		return writeAnswer(conn, 400, "Bad Request", "text/plain", []byte("bad request header\n"), true)
	}
	if path, _, _ := strings.Cut(target, "?"); path != "/metrics" {
		return writeAnswer(conn, 404, "Not Found", "text/plain", []byte("only /metrics is here\n"), method != "HEAD")
	}
	if method != "GET" && method != "HEAD" {
		return writeAnswer(conn, 405, "Method Not Allowed", "text/plain", []byte("GET or HEAD\n"), true)
	}
	var body bytes.Buffer
	set.WritePrometheus(&body)
	return writeAnswer(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body.Bytes(), method == "GET")
}

func writeAnswer(conn net.Conn, code int, status, ctype string, body []byte, withBody bool) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", code, status, ctype, len(body))
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
