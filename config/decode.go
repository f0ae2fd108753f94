package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/offload-dev/offload/config/yamlite"
)

// The decoder walks yamlite's tree by hand rather than unmarshalling into
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

// at is a place in the file to blame: a node, or the key above it when the
// node has no useful position (an empty value).
type at struct {
	line, col int
}

func atNode(n *yamlite.Node, fallback at) at {
	if n != nil && n.Line > 0 {
		return at{n.Line, n.Col}
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
func (d *decoder) parse(data []byte) *yamlite.Node {
	if len(data) > MaxFileSize {
		d.add(at{1, 0}, "", &sentinelError{fmt.Sprintf("file is larger than %d bytes", MaxFileSize), ErrTooLarge})
		return nil
	}
	// Duplicate keys are left to mapping, which reports them with the
	// line of the first and carries on.
	docs, err := yamlite.Parse(data)
	if err != nil {
		a := at{1, 0}
		msg := err.Error()
		var ye *yamlite.Error
		if errors.As(err, &ye) {
			a, msg = at{ye.Line, ye.Col}, ye.Msg
		}
		d.add(a, "", &sentinelError{"YAML: " + msg, err})
		return nil
	}
	var body *yamlite.Node
	n := 0
	for _, doc := range docs {
		if doc == nil {
			continue
		}
		n++
		if n == 2 {
			d.errorf(atNode(doc, at{1, 0}), "", "more than one YAML document; a config file holds one")
			return nil
		}
		body = doc
	}
	if body == nil {
		d.errorf(at{1, 0}, "", "config is empty")
	}
	return body
}

// value is one value in the file, where it is, and its field path.
type value struct {
	node  *yamlite.Node // a Null node for an empty value
	at    at            // where to blame errors about it
	field string
}

// deref refuses aliases: a config file is short enough to write out, and
// refusing them rules out alias bombs. (yamlite drops anchors.)
func (d *decoder) deref(v value) (*yamlite.Node, bool) {
	if v.node != nil && v.node.Kind == yamlite.Alias {
		d.errorf(v.at, v.field, "YAML aliases (*name) are not supported; write the value out")
		return nil, false
	}
	return v.node, true
}

// kindName says what a node is, for messages.
func kindName(n *yamlite.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yamlite.Null:
		return "nothing"
	case yamlite.Map:
		return "a mapping"
	case yamlite.Seq:
		return "a list"
	case yamlite.Alias:
		return "an alias"
	}
	if !n.Quoted {
		switch strings.ToLower(n.Value) {
		case "true", "false":
			return "a boolean"
		case ".inf", "+.inf", "-.inf", ".nan":
			return "a number"
		}
		if _, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return "a number"
		}
		if _, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
			return "a number"
		}
	}
	return "a string"
}

// scalar returns the text of a scalar value: the decoded string of a quoted
// one, the source text of a plain one. It reports an error for an empty
// value, a mapping or a list.
func (d *decoder) scalar(v value) (string, bool) {
	n, ok := d.deref(v)
	if !ok {
		return "", false
	}
	switch {
	case n != nil && n.Kind == yamlite.Scalar:
		return n.Value, true
	case n == nil || n.Kind == yamlite.Null:
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
	if n == nil || n.Kind != yamlite.Map {
		d.errorf(v.at, v.field, "want a mapping (key: value lines), got %s", kindName(n))
		return nil, false
	}
	seen := map[string]int{}
	out := make([]entry, 0, len(n.Pairs))
	for _, p := range n.Pairs {
		keyAt := atNode(p.Key, v.at)
		key, ok := d.key(p.Key, keyAt, v.field)
		if !ok {
			continue
		}
		field := join(v.field, key)
		if line, dup := seen[key]; dup {
			d.errorf(keyAt, field, "duplicate field (first on line %d)", line)
			continue
		}
		seen[key] = keyAt.line
		out = append(out, entry{key, value{node: p.Value, at: atNode(p.Value, keyAt), field: field}})
		// An empty value has no place of its own, and a block mapping or
		// list starts on the line after its key: blame the key.
		switch p.Value.Kind {
		case yamlite.Null, yamlite.Map, yamlite.Seq:
			out[len(out)-1].at = keyAt
		}
	}
	return out, true
}

func (d *decoder) key(k *yamlite.Node, a at, parent string) (string, bool) {
	if k.Kind == yamlite.Scalar && !k.Quoted && k.Value == "<<" {
		d.errorf(a, parent, "YAML merge keys (<<) are not supported")
		return "", false
	}
	if k.Kind == yamlite.Scalar {
		return k.Value, true
	}
	d.errorf(a, parent, "a key must be a plain name, not %s", kindName(k))
	return "", false
}

// sequence returns the items of a list value.
func (d *decoder) sequence(v value) ([]value, bool) {
	n, ok := d.deref(v)
	if !ok {
		return nil, false
	}
	if n == nil || n.Kind != yamlite.Seq {
		d.errorf(v.at, v.field, "want a list, got %s", kindName(n))
		return nil, false
	}
	out := make([]value, len(n.Items))
	for i, item := range n.Items {
		// An empty item is at its "-".
		out[i] = value{node: item, at: atNode(item, v.at), field: fmt.Sprintf("%s[%d]", v.field, i)}
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
