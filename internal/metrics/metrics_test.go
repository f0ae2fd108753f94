package metrics

import (
	"bytes"
	"io"
	"testing"
)

// TestSet: writers write in the order they were registered, one sample a
// line in the text format.
func TestSet(t *testing.T) {
	s := NewSet()
	s.RegisterMetricsWriter(func(w io.Writer) {
		WriteCounterUint64(w, `a_total{role="server"}`, 18446744073709551615)
	})
	s.RegisterMetricsWriter(func(w io.Writer) { WriteGaugeUint64(w, "b", 0) })
	var b bytes.Buffer
	s.WritePrometheus(&b)
	want := "a_total{role=\"server\"} 18446744073709551615\nb 0\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
