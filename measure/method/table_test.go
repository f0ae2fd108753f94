package method

import (
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	tb := Table{Columns: []Column{{Title: "policy"}, {Title: "MB/s", Right: true, Min: 7}, {Title: "range", Right: true}, {Title: "note"}}}
	tb.Add("software", "5.2", "2.9–7.3", "")
	tb.Add("a", "12.5", "-", "x")
	tb.Add("auto-with-long-name", "failed: the tunnel did not come up in time")
	var b strings.Builder
	if err := tb.Write(&b); err != nil {
		t.Fatal(err)
	}
	// Widths in runes (the en dash is one), figures right-aligned, no
	// trailing blanks, and the failed row's text neither aligned nor
	// widening the MB/s column.
	want := "policy                  MB/s    range  note\n" +
		"software                 5.2  2.9–7.3\n" +
		"a                       12.5        -  x\n" +
		"auto-with-long-name  failed: the tunnel did not come up in time\n"
	if got := b.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}

	tb = Table{Sep: " ", Columns: []Column{{Title: "CPU", Min: 4}, {Title: "total", Right: true, Sep: "   "}, {Title: "sys", Right: true, Min: 6}}}
	tb.Add("x", "1.00", "")
	b.Reset()
	_ = tb.Write(&b)
	if want := "CPU    total    sys\nx       1.00\n"; b.String() != want {
		t.Errorf("table with separators:\n%q\nwant:\n%q", b.String(), want)
	}
}

func TestMarkdown(t *testing.T) {
	tb := Table{Columns: []Column{{Title: "target"}, {Title: "bytes", Right: true}}}
	var b strings.Builder
	_ = tb.WriteMarkdownHeader(&b)
	_ = WriteMarkdownRow(&b, "linux/arm64", "123")
	if want := "| target | bytes |\n|---|---:|\n| linux/arm64 | 123 |\n"; b.String() != want {
		t.Errorf("markdown:\n%q\nwant:\n%q", b.String(), want)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{512: "512 B", 16 << 10: "16.0 KiB", 24 << 20: "24.0 MiB", 3 << 29: "1.5 GiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
