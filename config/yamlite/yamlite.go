// Package yamlite parses the part of YAML that offload's config files use
// into a tree of nodes that know their line and column, and refuses the
// rest with a positioned error. It stands in for a full YAML library,
// which cost 448 KiB of the MIPS binary (docs/budgets.md), for files a few
// KiB long.
//
// Accepted:
//
//	# comments, on their own line or after a value
//	key: value              block mappings; keys plain or quoted
//	list:                   block sequences, indented or not under a key,
//	  - item                and "- key: value" items (compact mappings)
//	flow: [a, 'b', {k: v}]  flow sequences and mappings, across lines too
//	'single ''quoted'''     single-quoted scalars ('' is a quote)
//	"double \"quoted\"\n"   double-quoted scalars with YAML's escapes
//	--- and ...             document markers (Parse returns each document)
//	&anchor                 anchors (ignored), *alias (an Alias node, for
//	                        the caller to refuse)
//
// Refused, each with its line and column: tabs but between a value and
// its comment or after a key's ":" (in indentation, in keys and values,
// quoted or not: write \t in double quotes), block scalars (| and >),
// tags (!x), complex keys (? ), directives (%YAML), values continued on
// the next line, an anchor without a value on its line, an alias to no
// anchor, empty documents between markers, control characters, and
// anything that is not YAML. Where go-yaml (the parser offload used
// before) reads a construct another way than the YAML spec, yamlite
// refuses it; its test fuzzes the two against each other.
//
// Scalars keep their text: a plain scalar is its source (64KiB, 0x10,
// true), a quoted one its decoded value. The plain words null, Null,
// NULL and ~, and an empty value, are Null nodes.
package yamlite

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kind is what a node is.
type Kind uint8

// The node kinds.
const (
	Null   Kind = iota // an empty value, null or ~
	Scalar             // a plain or quoted scalar: Value
	Map                // a block or flow mapping: Pairs
	Seq                // a block or flow sequence: Items
	Alias              // *name: Value is the name
)

// Node is one value of a document and where it starts (1-based; a
// mapping at its first key, a block sequence at its first "-", a flow
// collection at its bracket, a quoted scalar at its quote).
type Node struct {
	Kind      Kind
	Line, Col int
	Value     string  // Scalar: its text; Alias: the anchor's name
	Quoted    bool    // Scalar: written in quotes
	Pairs     []Pair  // Map, in file order, duplicates kept
	Items     []*Node // Seq
}

// Pair is one key: value of a mapping.
type Pair struct {
	Key, Value *Node
}

// Error is a syntax error at a place in the file.
type Error struct {
	Line, Col int
	Msg       string
}

func (e *Error) Error() string { return fmt.Sprintf("%d:%d: %s", e.Line, e.Col, e.Msg) }

// maxDepth bounds nesting, so that no input can exhaust the stack.
const maxDepth = 64

// Parse parses data into its documents, in order; a document with no
// content (nothing, or only comments) is nil.
func Parse(data []byte) ([]*Node, error) {
	if !utf8.Valid(data) {
		return nil, &Error{1, 1, "not UTF-8 text"}
	}
	text := strings.TrimPrefix(string(data), "\ufeff")
	var lines []string
	for i, l := range strings.SplitAfter(text, "\n") {
		l = strings.TrimSuffix(strings.TrimSuffix(l, "\n"), "\r")
		if c := strings.IndexByte(l, '\r'); c >= 0 {
			return nil, &Error{i + 1, c + 1, "a carriage return without a line feed"}
		}
		if (strings.HasPrefix(l, "---") || strings.HasPrefix(l, "...")) && marker(l) == "" {
			return nil, &Error{i + 1, 1, "a line that starts with --- or ... is a document marker; put a blank after it"}
		}
		if lead := l[:len(l)-len(strings.TrimLeft(l, " \t"))]; strings.Contains(lead, "\t") {
			return nil, &Error{i + 1, strings.IndexByte(l, '\t') + 1, "a tab in the indentation; indent with spaces"}
		}
		if c := strings.IndexFunc(l, control); c >= 0 {
			return nil, &Error{i + 1, c + 1, fmt.Sprintf("control character %U; write it as an escape in double quotes", []rune(l[c:])[0])}
		}
		lines = append(lines, l)
	}
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	p := &parser{lines: lines}
	var docs []*Node
	for {
		doc, more, err := p.document()
		if err != nil {
			return nil, err
		}
		if doc != nil || more {
			docs = append(docs, doc)
		}
		if !more {
			return docs, nil
		}
	}
}

// control reports the characters YAML does not allow in a file as they
// are: C0 and C1 controls but tab (and the line breaks, already split
// off), DEL, and the non-characters U+FFFE and U+FFFF.
func control(r rune) bool {
	return r < 0x20 && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f && r != 0x85 || r == 0xfffe || r == 0xffff
}

type parser struct {
	lines []string
	ln    int // current line index
	col   int // current byte offset in lines[ln]
	depth int
	// ended: a ... ended the last document, so the next needs a ---.
	ended bool
	// anchors are the names of the anchors met so far.
	anchors map[string]bool
}

func (p *parser) errf(ln, col int, format string, args ...any) error {
	return &Error{ln + 1, col + 1, fmt.Sprintf(format, args...)}
}

// marker reports whether line l is a document marker ("---" or "...",
// alone or followed by a blank).
func marker(l string) string {
	for _, m := range []string{"---", "..."} {
		if l == m || strings.HasPrefix(l, m+" ") || strings.HasPrefix(l, m+"\t") {
			return m
		}
	}
	return ""
}

// blank reports whether s holds nothing but blanks and a comment.
func blank(s string) bool {
	t := strings.TrimLeft(s, " \t")
	return t == "" || t[0] == '#'
}

// document parses one document from the current line; more says another
// follows (a "---" ended this one).
func (p *parser) document() (doc *Node, more bool, err error) {
	started := false
	for p.ln < len(p.lines) {
		l := p.lines[p.ln]
		switch m := marker(l); {
		case m == "---":
			if doc != nil {
				return doc, true, nil
			}
			if started {
				return nil, false, p.errf(p.ln, 0, "an empty document before this ---")
			}
			if !blank(l[3:]) {
				return nil, false, p.errf(p.ln, 3, "put the document on the line after ---")
			}
			started, p.ended = true, false
			p.ln++
			continue
		case m == "...":
			if !blank(l[3:]) {
				return nil, false, p.errf(p.ln, 3, "nothing may follow ... on its line")
			}
			p.ln++
			p.ended = true
			return doc, p.ln < len(p.lines), nil
		case strings.HasPrefix(l, "%"):
			return nil, false, p.errf(p.ln, 0, "YAML directives (%%) are not supported")
		case blank(l):
			p.ln++
			continue
		}
		if doc != nil {
			return nil, false, p.errf(p.ln, 0, "more content after the document's top-level value")
		}
		if p.ended {
			return nil, false, p.errf(p.ln, 0, "after ..., a document starts with ---")
		}
		ind, err := p.indent()
		if err != nil {
			return nil, false, err
		}
		p.col = ind
		if doc, err = p.block(ind); err != nil {
			return nil, false, err
		}
	}
	return doc, false, nil
}

// indent returns the indentation of the current line, refusing tabs in it.
func (p *parser) indent() (int, error) {
	l := p.lines[p.ln]
	n := 0
	for n < len(l) && l[n] == ' ' {
		n++
	}
	if n < len(l) && l[n] == '\t' {
		return 0, p.errf(p.ln, n, "a tab in the indentation; indent with spaces")
	}
	return n, nil
}

// nextContent moves to the next line with content (not blank, not a
// comment) and returns its indentation, or -1 at the end of the document.
func (p *parser) nextContent() (int, error) {
	for p.ln < len(p.lines) {
		l := p.lines[p.ln]
		if marker(l) != "" {
			return -1, nil
		}
		if blank(l) {
			p.ln++
			continue
		}
		ind, err := p.indent()
		if err != nil {
			return 0, err
		}
		p.col = ind
		return ind, nil
	}
	return -1, nil
}

func (p *parser) rest() string { return p.lines[p.ln][p.col:] }

// isDash reports whether s starts a block sequence item.
func isDash(s string) bool {
	return s == "-" || strings.HasPrefix(s, "- ")
}

// block parses the block node at the cursor, whose column is ind.
func (p *parser) block(ind int) (*Node, error) {
	if p.depth++; p.depth > maxDepth {
		return nil, p.errf(p.ln, p.col, "nested more than %d deep", maxDepth)
	}
	defer func() { p.depth-- }()
	s := p.rest()
	if isDash(s) {
		return p.blockSeq(ind)
	}
	if _, ok, err := p.keyEnd(); err != nil {
		return nil, err
	} else if ok {
		return p.blockMap(ind)
	}
	return p.inline()
}

// blockSeq parses "- item" lines at column ind.
func (p *parser) blockSeq(ind int) (*Node, error) {
	seq := &Node{Kind: Seq, Line: p.ln + 1, Col: ind + 1}
	for {
		dashLn, dashCol := p.ln, p.col
		p.col++ // past "-"
		p.skipBlanks()
		var item *Node
		var err error
		if blank(p.rest()) {
			p.ln++
			item, err = p.blockValue(ind, dashLn, dashCol, false)
		} else {
			if strings.Contains(p.lines[p.ln][dashCol:p.col], "\t") {
				return nil, p.errf(p.ln, p.col, "a tab between - and its item; use spaces")
			}
			item, err = p.block(p.col)
		}
		if err != nil {
			return nil, err
		}
		seq.Items = append(seq.Items, item)
		next, err := p.nextContent()
		if err != nil {
			return nil, err
		}
		if next < ind {
			return seq, nil
		}
		if next > ind {
			return nil, p.errf(p.ln, next, "indented more than the list item above it")
		}
		if !isDash(p.rest()) {
			// A key of the mapping this list is the value of; after an
			// empty item that reads two ways (go-yaml takes the key
			// into the item).
			if item.Kind == Null && item.Line == dashLn+1 && item.Col == dashCol+1 {
				return nil, p.errf(dashLn, dashCol, "an empty list item right above a key; write ~ after the - or indent the list")
			}
			return seq, nil
		}
	}
}

// blockValue parses what follows a key or a dash that ends its line: a
// more indented block, a list at the key's column (seqAtInd: only under a
// key), or nothing (a Null node at the key or dash).
func (p *parser) blockValue(ind, ln, col int, seqAtInd bool) (*Node, error) {
	next, err := p.nextContent()
	if err != nil {
		return nil, err
	}
	if next > ind || (seqAtInd && next == ind && isDash(p.rest())) {
		return p.block(next)
	}
	return &Node{Kind: Null, Line: ln + 1, Col: col + 1}, nil
}

// blockMap parses "key: value" lines at column ind.
func (p *parser) blockMap(ind int) (*Node, error) {
	m := &Node{Kind: Map, Line: p.ln + 1, Col: ind + 1}
	for {
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		p.skipBlanks()
		var val *Node
		if blank(p.rest()) {
			p.ln++
			val, err = p.blockValue(ind, key.Line-1, key.Col-1, true)
		} else {
			val, err = p.valueOnLine()
		}
		if err != nil {
			return nil, err
		}
		m.Pairs = append(m.Pairs, Pair{key, val})
		next, err := p.nextContent()
		if err != nil {
			return nil, err
		}
		if next < ind {
			return m, nil
		}
		if next > ind {
			return nil, p.errf(p.ln, next, "indented more than the key above it")
		}
		if isDash(p.rest()) {
			return nil, p.errf(p.ln, p.col, "a list item where a key: value was expected")
		}
		if _, ok, err := p.keyEnd(); err != nil {
			return nil, err
		} else if !ok {
			return nil, p.errf(p.ln, p.col, "want key: value")
		}
	}
}

// valueOnLine parses a value after "key: " on the key's line.
func (p *parser) valueOnLine() (*Node, error) {
	if isDash(p.rest()) {
		return nil, p.errf(p.ln, p.col, "a list must start on the line after its key")
	}
	return p.inline()
}

// inline parses a value that ends on this line (a flow collection may
// span lines), checks nothing but a comment follows, and moves to the
// next line.
func (p *parser) inline() (*Node, error) {
	n, err := p.flowNode(false)
	if err != nil {
		return nil, err
	}
	p.skipBlanks()
	if !blank(p.rest()) {
		s := p.rest()
		if strings.HasPrefix(s, ":") {
			return nil, p.errf(p.ln, p.col, "a key: value inside a value; quote the value")
		}
		return nil, p.errf(p.ln, p.col, "unexpected %q after the value", firstRune(s))
	}
	p.ln++
	return n, nil
}

func firstRune(s string) string {
	r, _ := utf8.DecodeRuneInString(s)
	return string(r)
}

func (p *parser) skipBlanks() {
	l := p.lines[p.ln]
	for p.col < len(l) && (l[p.col] == ' ' || l[p.col] == '\t') {
		p.col++
	}
}

// keyEnd finds the ": " (or ":" at the end of the line) after a block key
// at the cursor, outside quotes; ok is false if the line is no key.
func (p *parser) keyEnd() (end int, ok bool, err error) {
	s := p.rest()
	switch {
	case s == "":
		return 0, false, nil
	case s[0] == '?' && (len(s) == 1 || s[1] == ' ' || s[1] == '\t'):
		return 0, false, p.errf(p.ln, p.col, "complex keys (? ) are not supported")
	case s[0] == '\'' || s[0] == '"':
		save := p.col
		if _, err := p.quoted(); err != nil {
			p.col = save
			return 0, false, err
		}
		e := p.col - save
		p.col = save
		t := strings.TrimLeft(s[e:], " ")
		if strings.HasPrefix(t, ":") && (len(t) == 1 || t[1] == ' ' || t[1] == '\t') {
			return len(s) - len(t), true, nil
		}
		return 0, false, nil
	case strings.ContainsRune("[{", rune(s[0])):
		return 0, false, nil
	}
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t'):
			return 0, false, nil
		case s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\t'):
			return i, true, nil
		}
	}
	return 0, false, nil
}

// key parses a block mapping's key and its ":".
func (p *parser) key() (*Node, error) {
	end, ok, err := p.keyEnd()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, p.errf(p.ln, p.col, "want key: value")
	}
	start := p.col
	var k *Node
	switch s := p.rest(); s[0] {
	case '\'', '"':
		if k, err = p.quoted(); err != nil {
			return nil, err
		}
	case '&', '*', '!', '|', '>', '@', '`', '%', ',', ']', '}':
		return nil, p.errf(p.ln, p.col, "a key must be a plain name, not %q", s[:1])
	default:
		if end == 0 {
			return nil, p.errf(p.ln, p.col, "a key is missing before :")
		}
		text := strings.TrimRight(s[:end], " ")
		if i := strings.IndexByte(text, '\t'); i >= 0 {
			return nil, p.errf(p.ln, p.col+i, "a tab inside or after a key; quote the key, and use spaces")
		}
		k = plain(text, p.ln, p.col)
	}
	p.col = start + end + 1
	return k, nil
}

// plain makes the node of a plain scalar's text.
func plain(s string, ln, col int) *Node {
	n := &Node{Kind: Scalar, Line: ln + 1, Col: col + 1, Value: s}
	switch s {
	case "", "~", "null", "Null", "NULL":
		n.Kind, n.Value = Null, ""
	}
	return n
}

// anchor skips "&name" and the blanks after it.
func (p *parser) anchor() error {
	l := p.lines[p.ln]
	start := p.col
	p.col++
	for p.col < len(l) && nameByte(l[p.col]) {
		p.col++
	}
	if p.col == start+1 || l[start+1] == '-' || p.col < len(l) && !strings.ContainsRune(" \t,]}", rune(l[p.col])) {
		return p.errf(p.ln, start, "an anchor or alias name (%c) is letters, digits, _ and - (not first) only", l[start])
	}
	if l[start] == '&' {
		if p.anchors == nil {
			p.anchors = map[string]bool{}
		}
		p.anchors[l[start+1:p.col]] = true
	}
	if p.col < len(l) && l[p.col] == '\t' {
		return p.errf(p.ln, p.col, "a tab after an anchor or alias; use a space")
	}
	p.skipBlanks()
	if r := p.rest(); l[start] == '&' && r != "" && (r[0] == '*' || r[0] == '&') {
		return p.errf(p.ln, p.col, "an anchor (&) must be followed by a value")
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// flowNode parses a scalar, an alias or a flow collection at the cursor;
// inFlow says it sits inside [ ] or { }, where , ] } end a plain scalar.
func (p *parser) flowNode(inFlow bool) (*Node, error) {
	if p.depth++; p.depth > maxDepth {
		return nil, p.errf(p.ln, p.col, "nested more than %d deep", maxDepth)
	}
	defer func() { p.depth-- }()
	if err := p.flowSpace(inFlow); err != nil {
		return nil, err
	}
	s := p.rest()
	if s == "" {
		return &Node{Kind: Null, Line: p.ln + 1, Col: p.col + 1}, nil
	}
	switch s[0] {
	case '&':
		ln, col := p.ln, p.col
		if err := p.anchor(); err != nil {
			return nil, err
		}
		if s := p.rest(); s == "" || s[0] == '#' || strings.ContainsRune(",]}", rune(s[0])) {
			return nil, p.errf(ln, col, "an anchor (&) without a value on its line")
		}
		return p.flowNode(inFlow)
	case '*':
		ln, col := p.ln, p.col
		if err := p.anchor(); err != nil {
			return nil, err
		}
		name := strings.TrimRight(p.lines[ln][col+1:p.col], " \t")
		if !p.anchors[name] {
			return nil, p.errf(ln, col, "alias *%s names no anchor above it", name)
		}
		return &Node{Kind: Alias, Line: ln + 1, Col: col + 1, Value: name}, nil
	case '!':
		return nil, p.errf(p.ln, p.col, "YAML tags (!) are not supported")
	case '|', '>':
		return nil, p.errf(p.ln, p.col, "block scalars (| and >) are not supported; write the value on one line, quoted")
	case ']', '}', ',':
		if inFlow {
			return nil, p.errf(p.ln, p.col, "a value is missing before %q", s[:1])
		}
		return nil, p.errf(p.ln, p.col, "a plain value cannot start with %q; quote it", s[:1])
	case '@', '`', '%':
		return nil, p.errf(p.ln, p.col, "a plain value cannot start with %q; quote it", s[:1])
	case '\'', '"':
		return p.quoted()
	case '[':
		return p.flowSeq()
	case '{':
		return p.flowMap()
	case '#':
		return &Node{Kind: Null, Line: p.ln + 1, Col: p.col + 1}, nil
	}
	if (s[0] == '-' || s[0] == '?' || s[0] == ':') && (len(s) == 1 || s[1] == ' ' || s[1] == '\t') {
		return nil, p.errf(p.ln, p.col, "unexpected %q", s[:1])
	}
	// A plain scalar ends at " #", at ": " (a key), and in flow at , ] }
	// or ":" followed by one of those.
	end := len(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '#' && i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
			end = i
			break
		}
		if c == ':' && (i+1 == len(s) || s[i+1] == ' ' || s[i+1] == '\t' || inFlow && strings.ContainsRune(",[]{}", rune(s[i+1]))) {
			end = i
			break
		}
		if inFlow && strings.ContainsRune(",[]{}", rune(c)) {
			end = i
			break
		}
	}
	if end == 0 {
		return nil, p.errf(p.ln, p.col, "a value is missing before %q", s[:1])
	}
	text := strings.TrimRight(s[:end], " \t")
	if i := strings.IndexByte(text, '\t'); i >= 0 {
		return nil, p.errf(p.ln, p.col+i, "a tab inside a plain value; quote the value")
	}
	n := plain(text, p.ln, p.col)
	p.col += end
	return n, nil
}

// flowSpace skips blanks, and in flow also comments and line ends.
func (p *parser) flowSpace(inFlow bool) error {
	for {
		p.skipBlanks()
		s := p.rest()
		if !inFlow || !(s == "" || s[0] == '#') {
			return nil
		}
		p.ln++
		p.col = 0
		if p.ln >= len(p.lines) || marker(p.lines[p.ln]) != "" {
			p.ln--
			p.col = len(p.lines[p.ln])
			return p.errf(p.ln, p.col, "a [ or { is not closed")
		}
		if _, err := p.indent(); err != nil {
			return err
		}
	}
}

// flowSeq parses [a, b, ...].
func (p *parser) flowSeq() (*Node, error) {
	seq := &Node{Kind: Seq, Line: p.ln + 1, Col: p.col + 1}
	p.col++
	for {
		if err := p.flowSpace(true); err != nil {
			return nil, err
		}
		if strings.HasPrefix(p.rest(), "]") {
			p.col++
			return seq, nil
		}
		item, err := p.flowNode(true)
		if err != nil {
			return nil, err
		}
		if err := p.flowSpace(true); err != nil {
			return nil, err
		}
		if strings.HasPrefix(p.rest(), ":") {
			return nil, p.errf(p.ln, p.col, "key: value pairs in a [ ] list are not supported; use { }")
		}
		seq.Items = append(seq.Items, item)
		if err := p.flowNext(']'); err != nil {
			return nil, err
		}
		if strings.HasPrefix(p.rest(), "]") {
			p.col++
			return seq, nil
		}
	}
}

// flowNext expects "," or the closing bracket after a flow item.
func (p *parser) flowNext(closing byte) error {
	s := p.rest()
	switch {
	case strings.HasPrefix(s, ","):
		p.col++
		return nil
	case s != "" && s[0] == closing:
		return nil
	case s == "":
		return p.errf(p.ln, p.col, "want , or %c", closing)
	}
	return p.errf(p.ln, p.col, "want , or %c, not %q", closing, firstRune(s))
}

// flowMap parses {k: v, ...}.
func (p *parser) flowMap() (*Node, error) {
	m := &Node{Kind: Map, Line: p.ln + 1, Col: p.col + 1}
	p.col++
	for {
		if err := p.flowSpace(true); err != nil {
			return nil, err
		}
		if strings.HasPrefix(p.rest(), "}") {
			p.col++
			return m, nil
		}
		if s := p.rest(); s[0] == '[' || s[0] == '{' || s[0] == '*' || s[0] == '?' && (len(s) == 1 || s[1] == ' ') {
			return nil, p.errf(p.ln, p.col, "a key must be a plain name, not %q", s[:1])
		}
		key, err := p.flowNode(true)
		if err != nil {
			return nil, err
		}
		if key.Kind == Scalar && !key.Quoted && strings.Contains(key.Value, ":") {
			return nil, p.errf(key.Line-1, key.Col-1, "a key in { } with a : in it; put a blank after the key's : or quote the key")
		}
		keyLn := p.ln
		if err := p.flowSpace(true); err != nil {
			return nil, err
		}
		val := &Node{Kind: Null, Line: key.Line, Col: key.Col}
		if strings.HasPrefix(p.rest(), ":") {
			if p.ln != keyLn {
				return nil, p.errf(p.ln, p.col, "the : after a key in { } must be on the key's line")
			}
			p.col++
			if err := p.flowSpace(true); err != nil {
				return nil, err
			}
			if s := p.rest(); !strings.HasPrefix(s, ",") && !strings.HasPrefix(s, "}") {
				if val, err = p.flowNode(true); err != nil {
					return nil, err
				}
				if err := p.flowSpace(true); err != nil {
					return nil, err
				}
			}
		}
		m.Pairs = append(m.Pairs, Pair{key, val})
		if err := p.flowNext('}'); err != nil {
			return nil, err
		}
		if strings.HasPrefix(p.rest(), "}") {
			p.col++
			return m, nil
		}
	}
}

// quoted parses a single- or double-quoted scalar that ends on its line.
func (p *parser) quoted() (*Node, error) {
	l := p.lines[p.ln]
	q := l[p.col]
	n := &Node{Kind: Scalar, Line: p.ln + 1, Col: p.col + 1, Quoted: true}
	var b strings.Builder
	i := p.col + 1
	for {
		if i >= len(l) {
			return nil, p.errf(p.ln, p.col, "a quoted value must end on its line (missing %c)", q)
		}
		c := l[i]
		switch {
		case c == q && q == '\'' && i+1 < len(l) && l[i+1] == '\'':
			b.WriteByte('\'')
			i += 2
			continue
		case c == q:
			n.Value = b.String()
			p.col = i + 1
			return n, nil
		case c == '\\' && q == '"':
			r, w, err := unescape(l[i:])
			if err != nil {
				return nil, p.errf(p.ln, i, "%v", err)
			}
			b.WriteString(r)
			i += w
			continue
		}
		if c == '\t' {
			return nil, p.errf(p.ln, i, "a tab inside quotes; write \\t in double quotes")
		}
		b.WriteByte(c)
		i++
	}
}

// unescape decodes the escape at the start of s (a backslash and what
// follows), returning its text and its length in s.
func unescape(s string) (string, int, error) {
	if len(s) < 2 {
		return "", 0, fmt.Errorf("a \\ at the end of the line")
	}
	simple := map[byte]string{'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", '\t': "\t", 'n': "\n", 'v': "\v", 'f': "\f",
		'r': "\r", 'e': "\x1b", ' ': " ", '"': "\"", '/': "/", '\\': "\\", 'N': "\u0085", '_': "\u00a0", 'L': "\u2028", 'P': "\u2029"}
	if r, ok := simple[s[1]]; ok {
		return r, 2, nil
	}
	width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[s[1]]
	if width == 0 {
		return "", 0, fmt.Errorf("unknown escape \\%s", firstRune(s[1:]))
	}
	if len(s) < 2+width {
		return "", 0, fmt.Errorf("\\%c wants %d hex digits", s[1], width)
	}
	v, err := strconv.ParseUint(s[2:2+width], 16, 32)
	if err != nil || !utf8.ValidRune(rune(v)) {
		return "", 0, fmt.Errorf("bad escape \\%s", s[1:2+width])
	}
	return string(rune(v)), 2 + width, nil
}
