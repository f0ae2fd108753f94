package metricsserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/testutil"
)

// page is a /metrics page of one counter.
func page(name string, v uint64) func(io.Writer) {
	return func(w io.Writer) { fmt.Fprintf(w, "%s %d\n", name, v) }
}

// startServer serves opt on a new listener until the test ends.
func startServer(t *testing.T, opt Options) string {
	t.Helper()
	return serveOn(t, testutil.Listen(t), opt)
}

// serveOn serves opt on ln until the test ends.
func serveOn(t *testing.T, ln net.Listener, opt Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, opt) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// scrape GETs /metrics with an optional Authorization header.
func scrape(addr, auth string) (int, string, error) {
	return testutil.HTTP("GET", addr, "/metrics", auth)
}

// The hand-written endpoint answers what a scraper asks and refuses the
// rest without hanging or growing.
func TestMetricsEndpointRequests(t *testing.T) {
	testutil.LeakCheck(t)
	ln := testutil.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, Options{Metrics: page("offload_test_total", 3)}) }()
	ask := func(req string) string {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(c)
		return string(b)
	}
	for _, tc := range []struct{ req, status, body string }{
		{"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 200 OK", "offload_test_total 3\n"},
		{"GET /metrics?x=1 HTTP/1.0\r\n\r\n", "HTTP/1.1 200 OK", "offload_test_total 3\n"},
		{"HEAD /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 200 OK", ""},
		{"GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found", "only /metrics is here\n"},
		{"POST /metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 405 Method Not Allowed", "GET or HEAD\n"},
		{"garbage\r\n\r\n", "HTTP/1.1 400 Bad Request", "bad request\n"},
		{"GET /metrics HTTP/1.1\r\n" + strings.Repeat("X-Long: "+strings.Repeat("a", 1000)+"\r\n", 20) + "\r\n", "HTTP/1.1 400 Bad Request", "bad request header\n"},
	} {
		got := ask(tc.req)
		head, body, _ := strings.Cut(got, "\r\n\r\n")
		if !strings.HasPrefix(head, tc.status+"\r\n") || body != tc.body {
			t.Errorf("%q: got %q", tc.req[:min(len(tc.req), 30)], got)
		}
		if !strings.HasPrefix(tc.req, "HEAD") && !strings.Contains(head, fmt.Sprintf("Content-Length: %d", len(tc.body))) {
			t.Errorf("%q: no right Content-Length in %q", tc.req[:min(len(tc.req), 30)], head)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Connections that send nothing, or half a request, can not block a
// scrape: before, 8 idle connections made every scrape fail for 10 s.
func TestAttackMetricsIdleConnections(t *testing.T) {
	testutil.LeakCheck(t)
	addr := startServer(t, Options{Metrics: page("offload_test_total", 5)})
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := range 4 * maxPending {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		if i%2 == 1 {
			_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n") // and never the end of the head
		}
		if i == 8 || i == len(idle)-1 {
			code, body, err := scrape(addr, "")
			if err != nil || code != 200 || !strings.Contains(body, "offload_test_total 5\n") {
				t.Fatalf("scrape with %d idle connections open: %d %q %v", len(idle), code, body, err)
			}
		}
	}
}

// With a token, a request without it or with another is refused with 401;
// the right one gets the metrics.
func TestMetricsToken(t *testing.T) {
	testutil.LeakCheck(t)
	metricsPage := page("offload_test_total", 7)
	log, logs := testutil.ObservedLogger(t)
	addr := startServer(t, Options{Metrics: metricsPage, Token: []byte("s3cret-token-0123456789"), Logger: log})
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", 401},
		{"Bearer wrong-token-0123456789", 401},
		{"Bearer s3cret-token-012345678", 401},
		{"Bearer s3cret-token-01234567890", 401},
		{"Basic s3cret-token-0123456789", 401},
		{"s3cret-token-0123456789", 401},
		{"Bearer s3cret-token-0123456789", 200},
		{"bearer s3cret-token-0123456789", 200},
	} {
		code, body, err := scrape(addr, tc.auth)
		if err != nil || code != tc.code {
			t.Errorf("Authorization %q: %d %v, want %d", tc.auth, code, err, tc.code)
		}
		if has := strings.Contains(body, "offload_test_total"); has != (tc.code == 200) {
			t.Errorf("Authorization %q: body %q", tc.auth, body)
		}
	}
	if n := logs.FilterMessage("refused a request without the right bearer token").Len(); n != 1 {
		t.Errorf("%d refusal log lines, want 1 (rate limited)", n)
	}
	// Without a token configured, none is needed.
	if code, _, err := scrape(startServer(t, Options{Metrics: metricsPage}), ""); err != nil || code != 200 {
		t.Errorf("no token configured: %d %v", code, err)
	}
}

// /healthz answers 200 or 503 from Health, without the metrics token;
// without Health there is no /healthz.
func TestHealthz(t *testing.T) {
	testutil.LeakCheck(t)
	var healthy atomic.Bool
	healthy.Store(true)
	log, _ := testutil.ObservedLogger(t)
	addr := startServer(t, Options{Token: []byte("s3cret-token-0123456789"), Logger: log, Health: healthy.Load})
	for _, tc := range []struct {
		healthy      bool
		method, path string
		code         int
		body         string
	}{
		{true, "GET", "/healthz", 200, "ok\n"},
		{true, "HEAD", "/healthz", 200, ""},
		{true, "GET", "/healthz?full=1", 200, "ok\n"},
		{false, "GET", "/healthz", 503, "unavailable\n"},
		{false, "HEAD", "/healthz", 503, ""},
		{true, "POST", "/healthz", 405, "GET or HEAD\n"},
		{true, "GET", "/metrics", 401, "bearer token required\n"}, // the token still guards the metrics
	} {
		healthy.Store(tc.healthy)
		if code, body := testutil.Request(t, tc.method, addr, tc.path); code != tc.code || body != tc.body {
			t.Errorf("%s %s (healthy %v): %d %q, want %d %q", tc.method, tc.path, tc.healthy, code, body, tc.code, tc.body)
		}
	}
	plain := startServer(t, Options{Logger: log})
	if code, _ := testutil.Request(t, "GET", plain, "/healthz"); code != 404 {
		t.Errorf("/healthz without Health: %d, want 404", code)
	}
}

// /status serves the JSON of what Status returns, under the token of
// /metrics: without it, or with another, 401 and nothing shown; HEAD has
// no body; without Status there is no /status. (tunnel's
// TestStatusEndpoint serves a real Server's.)
func TestStatus(t *testing.T) {
	testutil.LeakCheck(t)
	const token = "status-token-0123456789"
	status := func() any { return map[string]any{"role": "server", "links": []int{1}} }
	addr := startServer(t, Options{Token: []byte(token), Status: status})
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + token} {
		code, body, err := testutil.HTTP("GET", addr, "/status", auth)
		if err != nil || code != 401 || strings.Contains(body, "links") {
			t.Errorf("Authorization %q: %d %q %v, want 401 and no status", auth, code, body, err)
		}
	}
	code, body, err := testutil.HTTP("GET", addr, "/status", "Bearer "+token)
	if err != nil || code != 200 || body != "{\n  \"links\": [\n    1\n  ],\n  \"role\": \"server\"\n}\n" {
		t.Errorf("with the token: %d %q %v", code, body, err)
	}
	if code, _ := testutil.Request(t, "POST", startServer(t, Options{Status: status}), "/status"); code != 405 {
		t.Errorf("POST /status: %d, want 405", code)
	}
	if code, _, err := testutil.HTTP("GET", startServer(t, Options{}), "/status", ""); err != nil || code != 404 {
		t.Errorf("no Status: %d %v, want 404", code, err)
	}
}
