package config

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// The decoder walks go-yaml's AST by hand rather than unmarshalling into
// tagged structs: that way every value keeps its line and column, unknown
// fields are reported where they are, and one pass collects every error
// instead of stopping at the first.

// decoder collects errors for one file.
type decoder struct {
	file string
	errs Errors
	// schema, if set, is told each object's field path and specs as
	// object meets them, present or not: the settings reference's test
	// (settings_test.go) walks the decoder this way, so that the specs
	// stay the one list of settings.
	schema func(path string, specs []fieldSpec)
}

// pos returns the line and column of n, or 0, 0.
func pos(n ast.Node) (line, col int) {
	if n == nil {
		return 0, 0
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// at is a place in the file to blame: a node, or the key above it when the
// node has no useful position (an empty value).
type at struct {
	line, col int
}

func atNode(n ast.Node, fallback at) at {
	if l, c := pos(n); l > 0 {
		return at{l, c}
	}
	return fallback
}

func (d *decoder) errorf(a at, field, format string, args ...any) {
	d.add(a, field, fmt.Errorf(format, args...))
}

// add records err at a. The message is err's text; err stays reachable
// through errors.Is/As.
func (d *decoder) add(a at, field string, err error) {
	line := a.line
	if line < 1 {
		line = 1
	}
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Col: a.col, Field: field, Msg: err.Error(), Err: err})
}

// result sorts the errors by position (stably, so a field's errors keep
// their order) and returns them as an error, or nil.
func (d *decoder) result() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i], d.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return d.errs
}

// parse parses data into the body of its single document. It returns nil
// (with errors recorded) if there is nothing to decode.
func (d *decoder) parse(data []byte) ast.Node {
	if len(data) > MaxFileSize {
		d.add(at{1, 0}, "", &sentinelError{fmt.Sprintf("file is larger than %d bytes", MaxFileSize), ErrTooLarge})
		return nil
	}
	// Duplicate keys are left to mapping, which reports them with the
	// line of the first and carries on.
	f, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		var ye yaml.Error
		a := at{1, 0}
		msg := err.Error()
		if errors.As(err, &ye) {
			if tk := ye.GetToken(); tk != nil && tk.Position != nil && tk.Position.Line > 0 {
				a = at{tk.Position.Line, tk.Position.Column}
			}
			msg = ye.GetMessage()
		}
		d.add(a, "", &sentinelError{"YAML: " + msg, err})
		return nil
	}
	var body ast.Node
	docs := 0
	for _, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, isComment := doc.Body.(*ast.CommentGroupNode); isComment {
			continue
		}
		docs++
		if docs == 2 {
			d.errorf(atNode(doc.Body, at{1, 0}), "", "more than one YAML document; a config file holds one")
			return nil
		}
		body = doc.Body
	}
	if body == nil {
		d.errorf(at{1, 0}, "", "config is empty")
	}
	return body
}

// value is one value in the file, where it is, and its field path.
type value struct {
	node  ast.Node // nil or *ast.NullNode for an empty value
	at    at       // where to blame errors about it
	field string
}

// deref strips anchors and tags. Aliases are refused: a config file is
// short enough to write out, and refusing them rules out alias bombs.
func (d *decoder) deref(v value) (ast.Node, bool) {
	n := v.node
	for {
		switch t := n.(type) {
		case *ast.AnchorNode:
			n = t.Value
		case *ast.TagNode:
			n = t.Value
		case *ast.AliasNode:
			d.errorf(v.at, v.field, "YAML aliases (*name) are not supported; write the value out")
			return nil, false
		default:
			return n, true
		}
	}
}

// kindName says what a node is, for messages.
func kindName(n ast.Node) string {
	switch n.(type) {
	case nil, *ast.NullNode:
		return "nothing"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "a boolean"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	}
	return n.Type().String()
}

// scalar returns the text of a scalar value: the decoded string of a string
// node, the source text of a number or bool. It reports an error for an
// empty value, a mapping or a list.
func (d *decoder) scalar(v value) (string, bool) {
	n, ok := d.deref(v)
	if !ok {
		return "", false
	}
	switch t := n.(type) {
	case *ast.StringNode:
		return t.Value, true
	case *ast.LiteralNode:
		if t.Value == nil {
			return "", true
		}
		return t.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, true
		}
	}
	switch n.(type) {
	case nil, *ast.NullNode:
		d.errorf(v.at, v.field, "has no value")
	default:
		d.errorf(v.at, v.field, "want a single value, got %s", kindName(n))
	}
	return "", false
}

// entry is one key: value of a mapping.
type entry struct {
	key string
	value
}

// mapping returns the entries of a mapping value, reporting duplicate and
// non-scalar keys.
func (d *decoder) mapping(v value) ([]entry, bool) {
	n, ok := d.deref(v)
	if !ok {
		return nil, false
	}
	var mvs []*ast.MappingValueNode
	switch t := n.(type) {
	case *ast.MappingNode:
		mvs = t.Values
	case *ast.MappingValueNode:
		mvs = []*ast.MappingValueNode{t}
	default:
		d.errorf(v.at, v.field, "want a mapping (key: value lines), got %s", kindName(n))
		return nil, false
	}
	seen := map[string]int{}
	out := make([]entry, 0, len(mvs))
	for _, mv := range mvs {
		keyAt := atNode(mv.Key, atNode(mv, v.at))
		key, ok := d.key(mv.Key, keyAt, v.field)
		if !ok {
			continue
		}
		field := join(v.field, key)
		if line, dup := seen[key]; dup {
			d.errorf(keyAt, field, "duplicate field (first on line %d)", line)
			continue
		}
		seen[key] = keyAt.line
		out = append(out, entry{key, value{node: mv.Value, at: atNode(mv.Value, keyAt), field: field}})
		// An empty value's node may sit on the next line, and a block
		// mapping or list starts on the line after its key: blame the key.
		switch mv.Value.(type) {
		case nil, *ast.NullNode, *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode:
			out[len(out)-1].at = keyAt
		}
	}
	return out, true
}

func (d *decoder) key(k ast.MapKeyNode, a at, parent string) (string, bool) {
	var n ast.Node = k
	if mk, ok := n.(*ast.MappingKeyNode); ok {
		n = mk.Value
	}
	if _, ok := n.(*ast.MergeKeyNode); ok {
		d.errorf(a, parent, "YAML merge keys (<<) are not supported")
		return "", false
	}
	n, ok := d.deref(value{node: n, at: a, field: parent})
	if !ok {
		return "", false
	}
	switch t := n.(type) {
	case *ast.StringNode:
		return t.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, true
		}
	}
	d.errorf(a, parent, "a key must be a plain name, not %s", kindName(n))
	return "", false
}

// sequence returns the items of a list value.
func (d *decoder) sequence(v value) ([]value, bool) {
	n, ok := d.deref(v)
	if !ok {
		return nil, false
	}
	s, ok := n.(*ast.SequenceNode)
	if !ok {
		d.errorf(v.at, v.field, "want a list, got %s", kindName(n))
		return nil, false
	}
	out := make([]value, len(s.Values))
	for i, item := range s.Values {
		out[i] = value{node: item, at: atNode(item, v.at), field: fmt.Sprintf("%s[%d]", v.field, i)}
		if _, null := item.(*ast.NullNode); null {
			out[i].at = v.at
			if i < len(s.Entries) && s.Entries[i] != nil {
				out[i].at = atNode(s.Entries[i], v.at)
			}
		}
	}
	return out, true
}

// fieldSpec decodes one known field of an object.
type fieldSpec struct {
	name     string
	required bool
	decode   func(value)
}

// object decodes a mapping with a fixed set of fields: each present field
// goes to its decode; unknown fields and missing required ones are errors.
func (d *decoder) object(v value, specs []fieldSpec) {
	if d.schema != nil {
		d.schema(v.field, specs)
	}
	entries, ok := d.mapping(v)
	if !ok {
		return
	}
	byName := make(map[string]*fieldSpec, len(specs))
	names := make([]string, len(specs))
	for i := range specs {
		byName[specs[i].name] = &specs[i]
		names[i] = specs[i].name
	}
	present := map[string]bool{}
	for _, e := range entries {
		spec := byName[e.key]
		if spec == nil {
			hint := ""
			if s := suggestion(e.key, names); s != "" {
				hint = fmt.Sprintf("; did you mean %q?", s)
			}
			d.errorf(e.at, e.field, "unknown field%s (known: %s)", hint, strings.Join(names, ", "))
			continue
		}
		present[e.key] = true
		spec.decode(e.value)
	}
	for _, s := range specs {
		if s.required && !present[s.name] {
			d.errorf(v.at, join(v.field, s.name), "missing (required)")
		}
	}
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}
