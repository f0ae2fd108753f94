package yamlite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"
	goyaml "github.com/goccy/go-yaml/parser"
)

// show renders a node as one line: scalars quoted with their line:col,
// so that a test compares values and places at once.
func show(n *Node) string { return render(n, true) }

// render is show, with columns or without (go-yaml counts trailing blanks
// into some columns, so the comparison with it leaves them out).
func render(n *Node, cols bool) string {
	if n == nil {
		return "<nil>"
	}
	var b strings.Builder
	var walk func(n *Node)
	walk = func(n *Node) {
		switch n.Kind {
		case Null:
			b.WriteString("~")
		case Scalar:
			fmt.Fprintf(&b, "%q@%d", n.Value, n.Line)
			if cols {
				fmt.Fprintf(&b, ":%d", n.Col)
			}
		case Alias:
			fmt.Fprintf(&b, "*%s", n.Value)
		case Map:
			b.WriteString("{")
			for i, p := range n.Pairs {
				if i > 0 {
					b.WriteString(", ")
				}
				walk(p.Key)
				b.WriteString(": ")
				walk(p.Value)
			}
			b.WriteString("}")
		case Seq:
			b.WriteString("[")
			for i, it := range n.Items {
				if i > 0 {
					b.WriteString(", ")
				}
				walk(it)
			}
			b.WriteString("]")
		}
	}
	walk(n)
	return b.String()
}

func TestParse(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"a: 1\nb: x y  # c\n", `{"a"@1:1: "1"@1:4, "b"@2:1: "x y"@2:4}`},
		{"a:\n  b: 'it''s'\n  c: \"t\\tx\\u00e9\"\n", `{"a"@1:1: {"b"@2:3: "it's"@2:6, "c"@3:3: "t\txé"@3:6}}`},
		{"l:\n  - a\n  -\n  - b: 1\n    c: 2\n", `{"l"@1:1: ["a"@2:5, ~, {"b"@4:5: "1"@4:8, "c"@5:5: "2"@5:8}]}`},
		{"l:\n- a\n- b\nk: v\n", `{"l"@1:1: ["a"@2:3, "b"@3:3], "k"@4:1: "v"@4:4}`},
		{"f: [a, 'b', {k: v}, []]\n", `{"f"@1:1: ["a"@1:5, "b"@1:8, {"k"@1:14: "v"@1:17}, []]}`},
		{"f: {a: 'b:1', c: d:2}\n", `{"f"@1:1: {"a"@1:5: "b:1"@1:8, "c"@1:15: "d:2"@1:18}}`},
		{"f: [a,\n  # comment\n  b]\n", `{"f"@1:1: ["a"@1:5, "b"@3:3]}`},
		{"a: ~\nb: null\nc:\nd: ''\n", `{"a"@1:1: ~, "b"@2:1: ~, "c"@3:1: ~, "d"@4:1: ""@4:4}`},
		{"a: &x 1\nb: *x\n", `{"a"@1:1: "1"@1:7, "b"@2:1: *x}`},
		{"---\na: 1\n...\n", `{"a"@2:1: "1"@2:4}`},
		{"\ufeffa: http://x:80/#y\n", `{"a"@1:1: "http://x:80/#y"@1:4}`},
		{"a: b\r\n", `{"a"@1:1: "b"@1:4}`},
		{"'k': v\n\"q\": w\n", `{"k"@1:1: "v"@1:6, "q"@2:1: "w"@2:6}`},
		{"- - a\n  - b\n- c\n", `[["a"@1:5, "b"@2:5], "c"@3:3]`},
	} {
		docs, err := Parse([]byte(c.src))
		if err != nil {
			t.Errorf("Parse(%q): %v", c.src, err)
			continue
		}
		if len(docs) != 1 || show(docs[0]) != c.want {
			var got []string
			for _, d := range docs {
				got = append(got, show(d))
			}
			t.Errorf("Parse(%q) =\n%s\nwant\n%s", c.src, strings.Join(got, " | "), c.want)
		}
	}
}

func TestDocuments(t *testing.T) {
	docs, err := Parse([]byte("# only a comment\n---\na: 1\n---\nb: 2\n...\n# end\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range docs {
		got = append(got, show(d))
	}
	if want := `{"a"@3:1: "1"@3:4} | {"b"@5:1: "2"@5:4}`; strings.Join(got, " | ") != want {
		t.Errorf("documents %s, want %s", strings.Join(got, " | "), want)
	}
	if docs, err := Parse([]byte("# nothing\n")); err != nil || len(docs) != 0 {
		t.Errorf("a comment only: %d documents, %v", len(docs), err)
	}
	if _, err := Parse([]byte("---\n# empty\n---\na: 1\n")); err == nil || !strings.Contains(err.Error(), "3:1: an empty document") {
		t.Errorf("an empty document between markers: %v", err)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"a: 1\n\tb: 2\n", "2:1: a tab in the indentation"},
		{"a: \"x\n", "1:4: a quoted value must end on its line"},
		{"a: 'x\n", "1:4: a quoted value must end on its line"},
		{"a: |\n  x\n", "1:4: block scalars"},
		{"a: >\n  x\n", "1:4: block scalars"},
		{"a: !!str 1\n", "1:4: YAML tags"},
		{"? a\n: b\n", "1:1: complex keys"},
		{"%YAML 1.2\n---\na: 1\n", "1:1: YAML directives"},
		{"a: 1\n  b: 2\n", "2:3: indented more than the key above it"},
		{"a: b: c\n", "1:5: a key: value inside a value"},
		{"a: [b, c\n", "1:9: a [ or { is not closed"},
		{"a: {b: c\n", "1:9: a [ or { is not closed"},
		{"a: [b c: d]\n", "1:8: key: value pairs in a [ ] list"},
		{"a: \"\\q\"\n", "1:5: unknown escape \\q"},
		{"a: \"\\u12\"\n", "1:5: \\u wants 4 hex digits"},
		{"a: 1\n- b\n", "2:1: a list item where a key: value was expected"},
		{"a: - b\n", "1:4: a list must start on the line after its key"},
		{"a: 1\nb\n", "2:1: want key: value"},
		{"a\nb: 1\n", "2:1: more content after the document's top-level value"},
		{"a: [b] c\n", "1:8: unexpected \"c\" after the value"},
		{"--- a: 1\n", "1:4: put the document on the line after ---"},
		{"a: @x\n", "1:4: a plain value cannot start with \"@\""},
		{"a: " + strings.Repeat("[", 100) + "\n", "nested more than 64 deep"},
		{"a: 1\n\xff\n", "1:1: not UTF-8"},
	} {
		_, err := Parse([]byte(c.src))
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.src, err, c.want)
		}
	}
}

// fromGoYAML converts go-yaml's tree to yamlite's by the rules the
// config decoder used on it: anchors dropped, a plain scalar's source
// text, a quoted one's value, null words and empty values as Null. ok is
// false for what yamlite refuses anyway (tags, block scalars).
func fromGoYAML(n ast.Node) (out *Node, ok bool) {
	ok = true
	var conv func(n ast.Node) *Node
	conv = func(n ast.Node) *Node {
		switch t := n.(type) {
		case nil, *ast.NullNode:
			return &Node{Kind: Null}
		case *ast.AnchorNode:
			return conv(t.Value)
		case *ast.AliasNode:
			return &Node{Kind: Alias, Value: t.Value.GetToken().Value}
		case *ast.StringNode:
			return &Node{Kind: Scalar, Value: t.Value, Line: t.Token.Position.Line}
		case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
			tk := n.GetToken()
			return &Node{Kind: Scalar, Value: tk.Value, Line: tk.Position.Line}
		case *ast.MappingNode:
			m := &Node{Kind: Map}
			for _, mv := range t.Values {
				m.Pairs = append(m.Pairs, convPair(mv, conv))
			}
			return m
		case *ast.MappingValueNode:
			return &Node{Kind: Map, Pairs: []Pair{convPair(t, conv)}}
		case *ast.SequenceNode:
			s := &Node{Kind: Seq}
			for _, it := range t.Values {
				s.Items = append(s.Items, conv(it))
			}
			return s
		}
		ok = false
		return &Node{}
	}
	out = conv(n)
	return out, ok
}

func convPair(mv *ast.MappingValueNode, conv func(ast.Node) *Node) Pair {
	var k ast.Node = mv.Key
	if mk, isKey := k.(*ast.MappingKeyNode); isKey {
		k = mk.Value
	}
	return Pair{conv(k), conv(mv.Value)}
}

// goYAML parses src with go-yaml as the config loader did before yamlite:
// the rendering of each document with content, or ok false if go-yaml
// refuses src or holds something yamlite does not produce.
func goYAML(src []byte) (docs []string, ok bool) {
	f, err := goyaml.ParseBytes(src, 0, goyaml.AllowDuplicateMapKey())
	if err != nil {
		return nil, false
	}
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, isComment := doc.Body.(*ast.CommentGroupNode); isComment {
			continue
		}
		n, ok := fromGoYAML(doc.Body)
		if !ok {
			return nil, false
		}
		docs = append(docs, render(n, false))
	}
	return docs, true
}

// compare checks that yamlite and go-yaml agree on src where yamlite
// accepts it.
func compare(t *testing.T, src []byte) {
	docs, err := Parse(src)
	if err != nil {
		return // refusing is allowed; what is accepted must agree
	}
	if bytes.ContainsRune(src, '\r') {
		return // go-yaml counts a CRLF after a comment as two lines
	}
	var got []string
	for _, d := range docs {
		if d != nil {
			got = append(got, render(d, false))
		}
		if d != nil && d.Kind != Map && d.Kind != Seq {
			return // a bare scalar document: go-yaml misplaces some, and no config is one
		}
	}
	if strings.Contains(strings.Join(got, " "), "<<") {
		return // a merge key (go-yaml takes any key with << in it for one): the config decoder refuses <<, go-yaml reads it its own way
	}
	want, ok := goYAML(src)
	if !ok {
		t.Fatalf("yamlite accepts what go-yaml refuses:\n%s\nyamlite: %s", src, strings.Join(got, " | "))
	}
	if strings.Join(got, " | ") != strings.Join(want, " | ") {
		t.Fatalf("for\n%s\nyamlite: %s\ngo-yaml: %s", src, strings.Join(got, " | "), strings.Join(want, " | "))
	}
}

// seeds are the config files offload ships and the shapes its tests and
// the OpenWrt init script write.
func seeds(t testing.TB) [][]byte {
	var out [][]byte
	for _, dir := range []string{"../../examples", "../../examples/loopback"} {
		names, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(names) == 0 {
			t.Fatalf("no examples in %s: %v", dir, err)
		}
		for _, n := range names {
			data, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, data)
		}
	}
	for _, s := range []string{
		"listen: ':7000'  # uci: offload.main.listen\nservices:\n  'web': '127.0.0.1:80'  # x\nsocks_allow:\n  - 'a''b:1'  # y\n",
		"forwards:\n  - listen: 127.0.0.1:8080\n    service: web\n  - {listen: ':1', service: a}\nredial: {min: 1s}\n",
		"a: [x, 'y', \"z\\n\", {k: v}]\nb:\n- 1\n- 2\nc: ~\nd:\n",
		"a: &x 1\nb: *x\n---\nc: 2\n",
		"a: 0x10\nb: 1e3\nc: true\nd: .inf\ne: -1\nf: 1.5\n",
	} {
		out = append(out, []byte(s))
	}
	return out
}

func TestAgainstGoYAML(t *testing.T) {
	for _, s := range seeds(t) {
		if _, err := Parse(s); err != nil {
			t.Errorf("yamlite refuses a seed: %v\n%s", err, s)
		}
		compare(t, s)
	}
}

// FuzzAgainstGoYAML: what yamlite accepts, go-yaml (the parser offload
// used before) accepts too, with the same values on the same lines.
func FuzzAgainstGoYAML(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		compare(t, src)
	})
}
