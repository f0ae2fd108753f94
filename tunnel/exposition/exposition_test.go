package exposition

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/offload-dev/offload/internal/metrics"
)

// TestMetricFamilies holds three lists to each other: the families the
// writers of tunnel and its subpackages can emit (read from the source,
// so a family that appears only under some configuration is covered too),
// metricFamilies (type and help), and the metrics tables in docs/.
func TestMetricFamilies(t *testing.T) {
	// tunnel/proxyproto writes the offload_proxy_headers families.
	var files []string
	for _, pattern := range []string{"../*.go", "../*/*.go"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	write := regexp.MustCompile("metrics\\.Write(Counter|Gauge)Uint64\\(w,\\s*(?:fmt\\.Sprintf\\()?[`\"](offload_[a-z_]+)")
	written := map[string]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range write.FindAllStringSubmatch(string(src), -1) {
			typ := strings.ToLower(m[1])
			if prev, ok := written[m[2]]; ok && prev != typ {
				t.Errorf("%s: %s written as %s and as %s", f, m[2], prev, typ)
			}
			written[m[2]] = typ
		}
	}
	if len(written) < 20 {
		t.Fatalf("found only %d families in the writers: has the way they are written changed? %v", len(written), written)
	}
	for name, typ := range written {
		f, ok := metricFamilies[name]
		switch {
		case !ok:
			t.Errorf("%s is written but has no entry in metricFamilies", name)
		case f.typ != typ:
			t.Errorf("%s is written as a %s, metricFamilies says %s", name, typ, f.typ)
		case f.help == "" || strings.ContainsAny(f.help, "\n\\"):
			t.Errorf("%s: help %q must be one line without backslashes", name, f.help)
		}
		if strings.HasSuffix(name, "_total") != (typ == "counter") {
			t.Errorf("%s: a %s; counters and only counters end in _total", name, typ)
		}
	}
	for name := range metricFamilies {
		if _, ok := written[name]; !ok {
			t.Errorf("metricFamilies has %s, which no writer emits", name)
		}
	}

	// docs/observability.md's table is the reference: every family has a row (a
	// row may name several). docs/routers.md's shorter table for router
	// users may leave families out but must not name one that is gone.
	row := regexp.MustCompile("(?m)^\\| ((?:`offload_[a-z_]+`(?:, )?)+) \\|")
	name := regexp.MustCompile("`(offload_[a-z_]+)`")
	for _, doc := range []struct {
		path     string
		complete bool
	}{{"../../docs/observability.md", true}, {"../../docs/routers.md", false}} {
		src, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		documented := map[string]bool{}
		for _, m := range row.FindAllStringSubmatch(string(src), -1) {
			for _, n := range name.FindAllStringSubmatch(m[1], -1) {
				documented[n[1]] = true
				if _, ok := metricFamilies[n[1]]; !ok {
					t.Errorf("%s has a row for %s, which /metrics does not expose", doc.path, n[1])
				}
			}
		}
		if !doc.complete {
			continue
		}
		var missing []string
		for n := range metricFamilies {
			if !documented[n] {
				missing = append(missing, n)
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("%s's metrics table has no row for %s", doc.path, strings.Join(missing, ", "))
		}
	}
}

// TestWrite: samples of one family written by two writers come
// out together under one # HELP and # TYPE; a family not in the table
// gets none.
func TestWrite(t *testing.T) {
	set := metrics.NewSet()
	set.RegisterMetricsWriter(func(w io.Writer) {
		metrics.WriteCounterUint64(w, `offload_streams_total{role="server",result="ok"}`, 1)
		metrics.WriteGaugeUint64(w, `offload_links_active`, 2)
	})
	set.RegisterMetricsWriter(func(w io.Writer) {
		metrics.WriteCounterUint64(w, `offload_streams_total{role="client",result="ok"}`, 3)
		metrics.WriteCounterUint64(w, `offload_unlisted_total`, 4)
	})
	var b bytes.Buffer
	Write(&b, set)
	want := "# HELP offload_streams_total " + metricFamilies["offload_streams_total"].help + "\n" +
		"# TYPE offload_streams_total counter\n" +
		`offload_streams_total{role="server",result="ok"} 1` + "\n" +
		`offload_streams_total{role="client",result="ok"} 3` + "\n" +
		"# HELP offload_links_active " + metricFamilies["offload_links_active"].help + "\n" +
		"# TYPE offload_links_active gauge\n" +
		"offload_links_active 2\n" +
		"offload_unlisted_total 4\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}
