package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/metrics"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/offload-dev/offload/config"
)

// startMetrics reads metrics_token_file and serves with it: no token or
// another one is 401, the right one gets the metrics.
func TestStartMetricsToken(t *testing.T) {
	tok := filepath.Join(t.TempDir(), "metrics.token")
	if err := os.WriteFile(tok, []byte("start-metrics-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	c := &config.Common{Metrics: "127.0.0.1:0", MetricsTokenFile: tok}
	wait, err := startMetrics(ctx, c, func(s *metrics.Set) {
		s.RegisterMetricsWriter(func(w io.Writer) { metrics.WriteCounterUint64(w, "offload_cmd_test_total", 1) })
	}, nil, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	url, _ := logs.FilterMessage("metrics").All()[0].ContextMap()["url"].(string)
	for _, tc := range []struct {
		auth string
		code int
	}{{"", 401}, {"Bearer other-token-0123456789", 401}, {"Bearer start-metrics-token-0123456789", 200}} {
		req, _ := http.NewRequest("GET", url, nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || strings.Contains(string(body), "offload_cmd_test_total 1") != (tc.code == 200) {
			t.Errorf("%q: %d %q, want %d", tc.auth, resp.StatusCode, body, tc.code)
		}
	}
	// A token file others can read stops the start.
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := startMetrics(ctx, c, func(*metrics.Set) {}, nil, nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "rule mode") {
		t.Errorf("token file mode 0644: %v", err)
	}
}

// /metrics carries the process and Go runtime families with their
// metadata (a summary's _sum and _count under its # TYPE) and
// offload_build_info naming this build.
func TestMetricsProcessAndBuild(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := startMetrics(ctx, &config.Common{Metrics: "127.0.0.1:0"}, func(*metrics.Set) {}, nil, nil, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	url, _ := logs.FilterMessage("metrics").All()[0].ContextMap()["url"].(string)
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	page := string(body)
	bi := buildInfo()
	if bi.Version == "" || bi.GoVersion == "" {
		t.Errorf("build info %+v", bi)
	}
	want := []string{
		"# TYPE offload_build_info gauge\noffload_build_info{version=\"" + bi.Version + "\",revision=\"" + bi.Revision + "\",goversion=\"" + bi.GoVersion + "\",platform=\"" + bi.Platform + "\"} 1\n",
		"# TYPE go_goroutines gauge\ngo_goroutines ",
		"# TYPE go_memstats_heap_alloc_bytes gauge\n",
		"# TYPE go_gc_duration_seconds summary\ngo_gc_duration_seconds{quantile=\"0\"} ",
		"go_gc_duration_seconds{quantile=\"1\"} ",
	}
	if runtime.GOOS == "linux" {
		want = append(want, "# TYPE process_resident_memory_bytes gauge\n", "# TYPE process_open_fds gauge\n", "# TYPE process_cpu_seconds_total counter\n", "# TYPE process_start_time_seconds gauge\n")
	}
	for _, w := range want {
		if !strings.Contains(page, w) {
			t.Errorf("/metrics lacks %q:\n%s", w, page)
		}
	}
	// The summary's _sum and _count follow its quantiles, under its # TYPE.
	if i, j := strings.Index(page, "# TYPE go_gc_duration_seconds summary"), strings.Index(page, "go_gc_duration_seconds_count "); i < 0 || j < i || strings.Contains(page[i+1:j], "# TYPE") {
		t.Errorf("go_gc_duration_seconds_count is not in its family's group:\n%s", page)
	}
}
