package tunnel

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/record"
)

func TestMetricsAndStatus(t *testing.T) {
	leakCheck(t)
	echoT := startTarget(t, testutil.Echo)
	addrs, srv, cli, _, _ := pair(t, map[string]string{"echo": echoT.addr()}, "echo", "nope")
	if err := testutil.EchoRoundTrip(addrs["echo"], 100000, 1); err != nil {
		t.Fatal(err)
	}
	if err := dialAndRead(addrs["nope"]); !isAbortive(err) {
		t.Fatalf("unknown service: %v", err)
	}

	set := metrics.NewSet()
	srv.RegisterMetrics(set)
	cli.RegisterMetrics(set)
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, ln, set, MetricsOptions{}) }()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var body string
	eventually(t, 5*time.Second, "the counters to settle", func() bool {
		resp, err := hc.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, `offload_streams_total{role="server",result="ok"} 1`) &&
			strings.Contains(body, `offload_streams_total{role="client",result="ok"} 1`) &&
			strings.Contains(body, `offload_streams_active{role="client"} 0`)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Every sample follows its family's # HELP and # TYPE, and a family's
	// samples come together (the text format's rule; promtool's in CI).
	line := regexp.MustCompile(`^([a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9]+$`)
	meta := regexp.MustCompile(`^# (HELP|TYPE) ([a-z_]+) (.+)$`)
	var family string
	typed := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		if m := meta.FindStringSubmatch(l); m != nil {
			if m[1] == "TYPE" {
				if typed[m[2]] {
					t.Errorf("%s: a second # TYPE line", m[2])
				}
				family, typed[m[2]] = m[2], true
			}
			continue
		}
		m := line.FindStringSubmatch(l)
		switch {
		case m == nil:
			t.Errorf("not a Prometheus text line: %q", l)
		case m[1] != family:
			t.Errorf("%q is not under its family's # TYPE line (the last was %q)", l, family)
		}
	}
	for _, want := range []string{
		`offload_handshakes_total{role="server",result="ok"} 1`,
		`offload_handshakes_total{role="client",result="ok"} 1`,
		`offload_streams_total{role="server",result="refused"} 1`,
		`offload_streams_total{role="client",result="ok"} 1`,
		`offload_streams_active{role="client"} 0`,
		`offload_link_up 1`,
		`offload_links_active 1`,
		`offload_redials_total 0`,
		`offload_auth_failures_total{role="server"} 0`,
		`offload_rekeys_total{role="server",dir="encrypt"} 0`,
		`offload_rekeys_total{role="client",dir="decrypt"} 0`,
		`offload_engine_fallbacks_total{engine="software"} 0`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	// The client encrypted at least the 100,000 bytes it sent.
	m := regexp.MustCompile(`offload_bytes_total\{engine="software",dir="encrypt"\} ([0-9]+)`).FindAllStringSubmatch(body, -1)
	if len(m) != 2 {
		t.Fatalf("want the encrypt bytes of server and client, got %v", m)
	}

	core, logs := observer.New(zap.InfoLevel)
	cli.ctr.logStatus(zap.New(core))
	e := logs.All()
	if len(e) != 1 || e[0].Message != "status" {
		t.Fatalf("status log: %v", e)
	}
	f := e[0].ContextMap()
	if f["link_up"] != true || f["streams_ok"] != uint64(1) {
		t.Errorf("status fields %v", f)
	}
	eng, ok := f["engines"].(map[string]any)["software"].(map[string]any)
	if !ok || eng["encrypt_bytes"].(uint64) < 100000 {
		t.Errorf("status engines %v", f["engines"])
	}
}

// dialAndRead connects to addr and reads until the connection ends.
func dialAndRead(addr string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return readErr(c)
}

func TestBackoff(t *testing.T) {
	b := backoff{min: 100 * time.Millisecond, max: 2 * time.Second}
	var prevCeil time.Duration
	for i := range 12 {
		d := b.next()
		ceil := min(b.max, b.min<<i)
		if d < b.min || d > b.max || d > ceil || d < ceil/2 {
			t.Fatalf("delay %d = %v, want in [%v, %v] within [min, max]", i, d, max(b.min, ceil/2), ceil)
		}
		if ceil < prevCeil {
			t.Fatalf("ceiling shrank")
		}
		prevCeil = ceil
	}
	b.reset()
	if d := b.next(); d != b.min {
		t.Fatalf("after reset: %v, want %v", d, b.min)
	}
	// Jitter: the delays are not all the same.
	seen := map[time.Duration]bool{}
	for range 20 {
		b.attempt = 5
		seen[b.next()] = true
	}
	if len(seen) < 2 {
		t.Fatal("no jitter")
	}
	// A huge attempt count does not overflow.
	b.attempt = 1000
	if d := b.next(); d < b.max/2 || d > b.max {
		t.Fatalf("attempt 1000: %v", d)
	}
}

// The hand-written endpoint answers what a scraper asks and refuses the
// rest without hanging or growing.
func TestMetricsEndpointRequests(t *testing.T) {
	leakCheck(t)
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) { metrics.WriteCounterUint64(w, "offload_test_total", 3) })
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, ln, set, MetricsOptions{}) }()
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

type handedPolicy struct{ n uint64 }

func (handedPolicy) Pick(int, engine.Direction) int { return 0 }
func (h handedPolicy) HandedToCPU() uint64          { return h.n }

// A hybrid policy's handed-over frames show in the metrics and the status
// line; other policies add nothing.
func TestMetricsHybridHanded(t *testing.T) {
	for _, tc := range []struct {
		policy record.Policy
		want   bool
	}{{handedPolicy{n: 42}, true}, {record.SoftwareOnly{}, false}, {nil, false}} {
		c := newCounters("client", []engine.Engine{engine.Software{}}, nil, tc.policy)
		var b strings.Builder
		c.writePrometheus(&b)
		has := strings.Contains(b.String(), "offload_hybrid_handed_total{role=\"client\"} 42\n")
		if has != tc.want || (!tc.want && strings.Contains(b.String(), "hybrid")) {
			t.Errorf("policy %T: metrics\n%s", tc.policy, b.String())
		}
		core, logs := observer.New(zapcore.InfoLevel)
		c.logStatus(zap.New(core))
		f := logs.All()[0].ContextMap()
		if n, ok := f["hybrid_handed_to_cpu"]; ok != tc.want || (ok && n != uint64(42)) {
			t.Errorf("policy %T: status fields %v", tc.policy, f)
		}
	}
}

// startMetricsServer serves set on a new listener until the test ends.
func startMetricsServer(t *testing.T, set *metrics.Set, opt MetricsOptions) string {
	t.Helper()
	return serveMetricsOn(t, listen(t), set, opt)
}

// serveMetricsOn serves set on ln until the test ends.
func serveMetricsOn(t *testing.T, ln net.Listener, set *metrics.Set, opt MetricsOptions) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, ln, set, opt) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// scrape GETs /metrics with an optional Authorization header.
func scrape(addr, auth string) (int, string, error) { return httpGet(addr, "/metrics", auth) }

// httpGet GETs path with an optional Authorization header.
func httpGet(addr, path, auth string) (int, string, error) {
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// Connections that send nothing, or half a request, can not block a
// scrape: before, 8 idle connections made every scrape fail for 10 s.
func TestAttackMetricsIdleConnections(t *testing.T) {
	leakCheck(t)
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) { metrics.WriteCounterUint64(w, "offload_test_total", 5) })
	addr := startMetricsServer(t, set, MetricsOptions{})
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := range 4 * metricsMaxPending {
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
	leakCheck(t)
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) { metrics.WriteCounterUint64(w, "offload_test_total", 7) })
	log, logs := testLogger(t)
	addr := startMetricsServer(t, set, MetricsOptions{Token: []byte("s3cret-token-0123456789"), Logger: log})
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
	if code, _, err := scrape(startMetricsServer(t, set, MetricsOptions{}), ""); err != nil || code != 200 {
		t.Errorf("no token configured: %d %v", code, err)
	}
}
