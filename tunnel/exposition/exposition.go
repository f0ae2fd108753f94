// Package exposition is the page /metrics serves: every family offload
// writes, with its Prometheus type and help line, and the writer that
// groups a metrics.Set's samples under them. The samples are written by
// the tunnel and its subpackages; this package knows only their names.
package exposition

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"github.com/offload-dev/offload/internal/metrics"
)

// metricFamily is one family's Prometheus type and help line.
type metricFamily struct {
	typ  string // "counter" or "gauge"
	help string
}

// metricFamilies is every family offload's /metrics exposes, with the
// type and the one-line help /metrics writes before its samples (the
// Prometheus text format's # TYPE and # HELP). docs/observability.md's table
// gives each family's labels and their values; TestMetricFamilies
// holds the code's writers, this table and that one to each other.
var metricFamilies = map[string]metricFamily{
	"offload_auth_failures_total":          {"counter", "Frames whose tag did not verify; each closes its link."},
	"offload_build_info":                   {"gauge", "1, labelled with the running build: version, revision, Go version, platform."},
	"offload_bytes_total":                  {"counter", "Bytes each engine encrypted or decrypted."},
	"offload_client_link_bytes_total":      {"counter", "Plaintext bytes sent and received on a client's links, counted as they pass."},
	"offload_client_link_errors_total":     {"counter", "A client's links that ended with a record-layer error."},
	"offload_client_links_active":          {"gauge", "A client's links up now."},
	"offload_client_stream_bytes_total":    {"counter", "Bytes a client's streams carried to and from their targets, counted when each stream ends."},
	"offload_client_streams_active":        {"gauge", "A client's streams open now."},
	"offload_client_streams_total":         {"counter", "A client's streams that ended, by result."},
	"offload_engine_check_failures_total":  {"counter", "Engine checks that failed, by engine and check (kat, verify, stall)."},
	"offload_engine_check_rounds_total":    {"counter", "Known-answer check rounds finished (start and periodic)."},
	"offload_engine_fallbacks_total":       {"counter", "Frames an engine failed and software redid."},
	"offload_engine_out":                   {"gauge", "1 once a failed check has taken the engine out."},
	"offload_engine_verified_frames_total": {"counter", "Frames an engine sealed or opened that software redid to check them (verify)."},
	"offload_failovers_total":              {"counter", "Moves of the client to its next server address."},
	"offload_frames_total":                 {"counter", "Record frames each engine sealed or opened."},
	"offload_handshakes_pending":           {"gauge", "Handshakes in progress now."},
	"offload_handshakes_total":             {"counter", "Handshakes by outcome."},
	"offload_hybrid_handed_total":          {"counter", "Frames of a device's band that hybrid handed to the CPU."},
	"offload_limit":                        {"gauge", "The caps in force, by name."},
	"offload_link_bytes_total":             {"counter", "Plaintext bytes sent and received on every link of this end, counted as they pass."},
	"offload_link_errors_total":            {"counter", "Links that ended with a record-layer error."},
	"offload_link_live_bytes_total":        {"counter", "Plaintext bytes sent and received on each link up now."},
	"offload_link_live_since_seconds":      {"gauge", "When each link up now came up, in Unix seconds."},
	"offload_link_up":                      {"gauge", "1 while the client's link to the server is up."},
	"offload_links_active":                 {"gauge", "Client links up now."},
	"offload_links_replaced_total":         {"counter", "Links closed because a newer link of the same client came up."},
	"offload_proxy_headers_pending":        {"gauge", "PROXY protocol headers being read now."},
	"offload_proxy_headers_total":          {"counter", "PROXY protocol headers read, by result."},
	"offload_resumptions_total":            {"counter", "Sessions resumed on a new link after their link died, and resumptions refused (with their reason in the log)."},
	"offload_redials_total":                {"counter", "Reconnects of the client after its link dropped."},
	"offload_rekeys_total":                 {"counter", "Key epochs started, this end's sending keys (encrypt) and its peer's (decrypt)."},
	"offload_server":                       {"gauge", "1 for the server address the client dials or is linked to, 0 for the others."},
	"offload_streams_active":               {"gauge", "Forwarded connections open now."},
	"offload_streams_reset_total":          {"counter", "Streams refused or reset for a peer's excess: past max_streams, or overrunning link_buffer."},
	"offload_streams_total":                {"counter", "Forwarded connections that ended, by result."},
	"offload_udp_datagrams_total":          {"counter", "UDP datagrams by result."},
	"offload_udp_flows_active":             {"gauge", "UDP flows open now."},
}

// Write writes set in the Prometheus text format, each family's
// samples together under its # HELP and # TYPE lines: the page /metrics
// serves (tunnel/metricsserver, whose Options.Metrics cmd/offload points
// here). The metrics package
// writes samples only (its own metadata has no help text), and writers
// registered by several parts of a process can each write samples of one
// family, so the samples are grouped here, in the order families first
// appear. The process_ and go_ families' metadata is the metrics
// package's (StandardFamilies). A family missing from both is written without
// metadata, which promtool reports and TestMetricFamilies prevents.
func Write(w io.Writer, set *metrics.Set) {
	var raw bytes.Buffer
	set.WritePrometheus(&raw)
	var order []string
	samples := map[string][]string{}
	for _, line := range strings.Split(raw.String(), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		// A summary's _sum and _count are samples of its family.
		for _, suffix := range []string{"_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && metrics.StandardFamilies[base].Type == "summary" {
				name = base
			}
		}
		if _, seen := samples[name]; !seen {
			order = append(order, name)
		}
		samples[name] = append(samples[name], line)
	}
	for _, name := range order {
		if f, ok := metricFamilies[name]; ok {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, f.help, name, f.typ)
		} else if f, ok := metrics.StandardFamilies[name]; ok {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, f.Help, name, f.Type)
		}
		for _, l := range samples[name] {
			_, _ = io.WriteString(w, l+"\n")
		}
	}
}

// Known reports whether name is a family offload writes (packaging's
// alert rules may name no other).
func Known(name string) bool {
	_, ok := metricFamilies[name]
	return ok
}

// BuildInfo labels offload_build_info: which build answers, so a scrape
// (and an alert) can tell the ends' versions apart.
type BuildInfo struct {
	Version, Revision, GoVersion, Platform string
}

// WritePrometheus writes offload_build_info, 1 with the build's labels.
func (b BuildInfo) WritePrometheus(w io.Writer) {
	metrics.WriteGaugeUint64(w, fmt.Sprintf("offload_build_info{version=%q,revision=%q,goversion=%q,platform=%q}", b.Version, b.Revision, b.GoVersion, b.Platform), 1)
}
