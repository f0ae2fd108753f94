// Package metrics is the little of a Prometheus client that offload uses:
// a set of writers, each writing its samples in the text exposition
// format when /metrics is scraped. Counters live where they are counted
// (atomics in the tunnel); nothing here holds a value.
//
// It replaces github.com/VictoriaMetrics/metrics (its summaries,
// histograms, process metrics and push client), which cost the mipsle
// router binary 384 KiB (docs/budgets.md). The process_* and go_*
// families that client libraries write are here too (standard.go,
// process_linux.go), with their help texts, for the same reason.
//
// Wire format (Prometheus text format 0.0.4), one sample a line:
//
//	name{label="value",...} 123
//
// The caller formats the name and labels (quoted with %q); # HELP and
// # TYPE lines are written by tunnel/exposition.Write from its table and
// StandardFamilies.
package metrics

import (
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Set is the writers of one process's /metrics.
type Set struct {
	mu      sync.Mutex
	writers []func(io.Writer)
}

// NewSet returns an empty set.
func NewSet() *Set { return &Set{} }

// RegisterMetricsWriter adds f, called with the output at every
// WritePrometheus, after the writers registered before it.
func (s *Set) RegisterMetricsWriter(f func(w io.Writer)) {
	s.mu.Lock()
	s.writers = append(s.writers, f)
	s.mu.Unlock()
}

// WritePrometheus writes every writer's samples to w, in the order the
// writers were registered.
func (s *Set) WritePrometheus(w io.Writer) {
	s.mu.Lock()
	writers := slices.Clone(s.writers)
	s.mu.Unlock()
	for _, f := range writers {
		f(w)
	}
}

// WriteCounterUint64 writes one sample of a counter: name (with its
// labels, if any) and v.
func WriteCounterUint64(w io.Writer, name string, v uint64) { writeSample(w, name, v) }

// WriteGaugeUint64 writes one sample of a gauge.
func WriteGaugeUint64(w io.Writer, name string, v uint64) { writeSample(w, name, v) }

// Label quotes a label value as the text format wants it: in double
// quotes, with backslash, double quote and newline escaped.
func Label(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func writeSample(w io.Writer, name string, v uint64) {
	writeLine(w, name, func(b []byte) []byte { return strconv.AppendUint(b, v, 10) })
}

// writeLine writes "name value\n" in one Write, the value appended by
// appendValue.
func writeLine(w io.Writer, name string, appendValue func([]byte) []byte) {
	b := make([]byte, 0, len(name)+32)
	b = append(b, name...)
	b = append(b, ' ')
	b = appendValue(b)
	b = append(b, '\n')
	_, _ = w.Write(b)
}
