package tunnel

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/internal/testutil"
	"github.com/offload-dev/offload/tunnel/exposition"
	"github.com/offload-dev/offload/tunnel/metricsserver"
	"github.com/offload-dev/offload/tunnel/record"
)

func TestMetricsAndStatus(t *testing.T) {
	testutil.LeakCheck(t)
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
	ln := testutil.Listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- metricsserver.Serve(ctx, ln, metricsserver.Options{Metrics: metricsPage(set)}) }()
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

// metricsPage is the /metrics page of set, as cmd/offload serves it.
func metricsPage(set *metrics.Set) func(io.Writer) {
	return func(w io.Writer) { exposition.Write(w, set) }
}

// startMetricsServer serves set on a new listener until the test ends,
// as cmd/offload wires it (tunnel/metricsserver).
func startMetricsServer(t *testing.T, set *metrics.Set, opt metricsserver.Options) string {
	t.Helper()
	ln := testutil.Listen(t)
	opt.Metrics = metricsPage(set)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- metricsserver.Serve(ctx, ln, opt) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// TestAlertRulesUseRealNames: every metric packaging/prometheus/alerts.yml
// names is a family /metrics writes (exposition.Known, or the standard
// process and Go ones), every handshake result it matches is one the
// server counts, and every alert has a row in docs/observability.md's alert
// table. promtool cannot know offload's names: a renamed family would
// leave an alert that never fires.
func TestAlertRulesUseRealNames(t *testing.T) {
	src, err := os.ReadFile("../packaging/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	rules := string(src)
	var exprs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*expr: (.*)$`).FindAllStringSubmatch(rules, -1) {
		exprs = append(exprs, m[1])
	}
	if len(exprs) < 5 {
		t.Fatalf("found only %d expr lines in alerts.yml", len(exprs))
	}
	names := 0
	for _, e := range exprs {
		for _, n := range regexp.MustCompile(`\b((?:offload|process|go)_[a-z_]+)\b`).FindAllString(e, -1) {
			names++
			_, std := metrics.StandardFamilies[n]
			if !exposition.Known(n) && !std {
				t.Errorf("alerts.yml: %s is not a family offload writes (expr %s)", n, e)
			}
		}
		for _, m := range regexp.MustCompile(`result(?:=~|!=|=)"([^"]*)"`).FindAllStringSubmatch(e, -1) {
			for _, r := range strings.Split(m[1], "|") {
				if !slices.Contains(handshakeResultNames[:], r) {
					t.Errorf("alerts.yml: handshake result %q is not one offload counts (%v)", r, handshakeResultNames)
				}
			}
		}
	}
	if names < 5 {
		t.Fatalf("found only %d metric names in alerts.yml's exprs", names)
	}
	doc, err := os.ReadFile("../docs/observability.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)$`).FindAllStringSubmatch(rules, -1) {
		if !strings.Contains(string(doc), "| `"+m[1]+"` |") {
			t.Errorf("docs/observability.md's alert table has no row for %s", m[1])
		}
	}
}
