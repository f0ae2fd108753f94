package method

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Column is one column of a Table.
type Column struct {
	Title string
	Right bool // aligned right (figures); left otherwise
	Min   int  // the narrowest it is, so that tables of different runs line up
	// Sep goes before the column; "" for the table's Sep. Unused for the
	// first column.
	Sep string
}

// Table is a report's text table: columns as wide as their widest cell
// (counted in runes: ranges and spreads hold en dashes, which fmt's
// widths would count as three bytes), lines without trailing blanks.
type Table struct {
	Columns []Column
	Sep     string // between columns; "  " if empty
	rows    [][]string
}

// Add adds a row. A row with fewer cells than columns ends in free text:
// its last cell follows the columns before it without alignment and
// without widening the column it starts in ("failed: ..." in a row of
// figures).
func (t *Table) Add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *Table) widths() []int {
	w := make([]int, len(t.Columns))
	for i, c := range t.Columns {
		w[i] = max(c.Min, runes(c.Title))
	}
	for _, r := range t.rows {
		for i, cell := range r {
			if i < len(w) && (len(r) == len(w) || i < len(r)-1) {
				w[i] = max(w[i], runes(cell))
			}
		}
	}
	return w
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// Write prints the title line and the rows.
func (t *Table) Write(w io.Writer) error {
	widths := t.widths()
	var b strings.Builder
	line := func(cells []string) {
		var l strings.Builder
		for i, cell := range cells {
			if i > 0 {
				l.WriteString(t.sep(i))
			}
			free := len(cells) < len(widths) && i == len(cells)-1
			pad := ""
			if !free && i < len(widths) {
				pad = strings.Repeat(" ", max(0, widths[i]-runes(cell)))
			}
			if !free && i < len(t.Columns) && t.Columns[i].Right {
				l.WriteString(pad + cell)
			} else {
				l.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	titles := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		titles[i] = c.Title
	}
	line(titles)
	for _, r := range t.rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (t *Table) sep(i int) string {
	if i < len(t.Columns) && t.Columns[i].Sep != "" {
		return t.Columns[i].Sep
	}
	if t.Sep != "" {
		return t.Sep
	}
	return "  "
}

// WriteMarkdownHeader prints the title and alignment lines of a GitHub
// table; rows follow with WriteMarkdownRow as they are measured (a
// harness that takes minutes per row shows each as it comes).
func (t *Table) WriteMarkdownHeader(w io.Writer) error {
	var titles, align []string
	for _, c := range t.Columns {
		titles = append(titles, c.Title)
		if c.Right {
			align = append(align, "---:")
		} else {
			align = append(align, "---")
		}
	}
	_, err := fmt.Fprintf(w, "| %s |\n|%s|\n", strings.Join(titles, " | "), strings.Join(align, "|"))
	return err
}

// WriteMarkdownRow prints one row of a GitHub table.
func WriteMarkdownRow(w io.Writer, cells ...string) error {
	_, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	return err
}

// Size prints a byte count in binary units, as the reports do: "512 B",
// "16.0 KiB", "64.0 MiB", "1.0 GiB".
func Size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Plural is "1 stream", "8 streams".
func Plural(n int, what string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}
