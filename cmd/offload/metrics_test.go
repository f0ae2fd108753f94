package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
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
