// Package jsonlite decodes the JSON offload reads back, a calibration
// profile (selector.Load) and a running end's status (`offload status`),
// into Go values as encoding/json's Unmarshal does, without its decoder.
// That decoder and what it keeps linked (time.Time's UnmarshalJSON and
// with it time.Parse) are 90 KB of code in the mipsle router binary, more
// than a 64 KiB step of the file (docs/budgets.md); this package is a
// few KB, because it knows only the kinds those values are made of.
//
// Unmarshal takes structs (fields by their json tag or name, matched
// exactly or else case-insensitively, embedded structs' fields promoted,
// unknown keys skipped), pointers, slices, maps with string keys,
// strings, bools, integers, floats and time.Time (RFC 3339, as
// time.Time's MarshalJSON writes it); null leaves a value as it is, or
// sets a pointer, slice or map to nil. Any other kind is an error that
// names it, never a silent zero. Its tests compare it with
// encoding/json on the values offload writes and on fuzzed input.
package jsonlite

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// Unmarshal parses data, one JSON value with only white space around it,
// into the value v points to.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("jsonlite: Unmarshal needs a non-nil pointer, not %T", v)
	}
	d := &decoder{data: data}
	if err := d.value(rv.Elem()); err != nil {
		return err
	}
	d.space()
	if d.pos < len(d.data) {
		return d.errorf("data after the value")
	}
	return nil
}

type decoder struct {
	data []byte
	pos  int
}

var timeType = reflect.TypeFor[time.Time]()

func (d *decoder) errorf(format string, args ...any) error {
	return fmt.Errorf("jsonlite: offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *decoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next byte that is not white space, 0 at the end.
func (d *decoder) peek() byte {
	d.space()
	if d.pos == len(d.data) {
		return 0
	}
	return d.data[d.pos]
}

func (d *decoder) literal(word string) bool {
	if strings.HasPrefix(string(d.data[d.pos:]), word) {
		d.pos += len(word)
		return true
	}
	return false
}

// value decodes the next JSON value into v.
func (d *decoder) value(v reflect.Value) error {
	c := d.peek()
	if c == 'n' {
		if !d.literal("null") {
			return d.errorf("invalid literal")
		}
		switch v.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map:
			v.SetZero()
		}
		return nil
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.value(v.Elem())
	}
	if v.Type() == timeType {
		s, err := d.stringFor("time")
		if err != nil {
			return err
		}
		t, err := parseRFC3339(s)
		if err != nil {
			return d.errorf("%v", err)
		}
		v.Set(reflect.ValueOf(t))
		return nil
	}
	switch c {
	case '{':
		return d.object(v)
	case '[':
		return d.array(v)
	case '"', 't', 'f':
		var x any
		if c == '"' {
			s, err := d.str()
			if err != nil {
				return err
			}
			x = s
		} else {
			word := "false"
			if c == 't' {
				word = "true"
			}
			if !d.literal(word) {
				return d.errorf("invalid literal")
			}
			x = c == 't'
		}
		xv := reflect.ValueOf(x)
		switch v.Kind() {
		case reflect.Interface: // skip's target
		case xv.Kind():
			v.Set(xv.Convert(v.Type()))
		default:
			return d.errorf("a %v for %v", xv.Kind(), v.Type())
		}
		return nil
	}
	return d.number(v)
}

// stringFor reads a string where the Go type (what) needs one.
func (d *decoder) stringFor(what string) (string, error) {
	if d.peek() != '"' {
		return "", d.errorf("%s needs a string", what)
	}
	return d.str()
}

func (d *decoder) object(v reflect.Value) error {
	var fields []field
	switch v.Kind() {
	case reflect.Struct:
		fields = fieldsOf(v.Type())
	case reflect.Interface:
		// skip's target: every key is skipped.
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String {
			return d.errorf("unsupported map key in %v", v.Type())
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
	default:
		return d.errorf("an object for %v", v.Type())
	}
	d.pos++ // {
	if d.peek() == '}' {
		d.pos++
		return nil
	}
	for {
		key, err := d.stringFor("an object key")
		if err != nil {
			return err
		}
		if d.peek() != ':' {
			return d.errorf("want ':' after an object key")
		}
		d.pos++
		if v.Kind() == reflect.Map {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := d.value(e); err != nil {
				return err
			}
			v.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), e)
		} else if f, ok := lookup(fields, key); ok {
			if err := d.value(fieldByIndex(v, f.index)); err != nil {
				return err
			}
		} else if err := d.skip(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil
		default:
			return d.errorf("want ',' or '}' in an object")
		}
	}
}

func (d *decoder) array(v reflect.Value) error {
	if v.Kind() == reflect.Interface {
		// skip's target: each element is checked and dropped.
		v = reflect.New(reflect.TypeFor[[]any]()).Elem()
	}
	if v.Kind() != reflect.Slice {
		return d.errorf("an array for %v", v.Type())
	}
	d.pos++ // [
	s := reflect.MakeSlice(v.Type(), 0, 0)
	if d.peek() == ']' {
		d.pos++
		v.Set(s)
		return nil
	}
	for {
		e := reflect.New(v.Type().Elem()).Elem()
		if err := d.value(e); err != nil {
			return err
		}
		s = reflect.Append(s, e)
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			v.Set(s)
			return nil
		default:
			return d.errorf("want ',' or ']' in an array")
		}
	}
}

// skip passes over a value no field takes, checking its syntax.
func (d *decoder) skip() error {
	var x any
	return d.value(reflect.ValueOf(&x).Elem())
}

func (d *decoder) number(v reflect.Value) error {
	start := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	intStart := d.pos
	if n := digits(); n == 0 || (n > 1 && d.data[intStart] == '0') {
		d.pos = start
		return d.errorf("invalid value")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return d.errorf("invalid number")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return d.errorf("invalid number")
		}
	}
	s := string(d.data[start:d.pos])
	var err error
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var n int64
		if n, err = strconv.ParseInt(s, 10, v.Type().Bits()); err == nil {
			v.SetInt(n)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		var n uint64
		if n, err = strconv.ParseUint(s, 10, v.Type().Bits()); err == nil {
			v.SetUint(n)
		}
	case reflect.Float32, reflect.Float64:
		var f float64
		if f, err = strconv.ParseFloat(s, v.Type().Bits()); err == nil {
			v.SetFloat(f)
		}
	case reflect.Interface:
		// skip's target: the syntax was the point.
	default:
		return d.errorf("a number for %v", v.Type())
	}
	if err != nil {
		return d.errorf("number %s for %v: %v", s, v.Type(), err)
	}
	return nil
}

// str reads a string at d.pos (a '"'), its escapes resolved; invalid
// UTF-8 becomes U+FFFD, as encoding/json has it.
func (d *decoder) str() (string, error) {
	d.pos++ // "
	var b strings.Builder
	for {
		if d.pos >= len(d.data) {
			return "", d.errorf("unterminated string")
		}
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return b.String(), nil
		case c < 0x20:
			return "", d.errorf("control character in a string")
		case c == '\\':
			if d.pos+1 >= len(d.data) {
				return "", d.errorf("unterminated string")
			}
			e := d.data[d.pos+1]
			d.pos += 2
			switch e {
			case '"', '\\', '/':
				b.WriteByte(e)
			case 'b':
				b.WriteByte('\b')
			case 'f':
				b.WriteByte('\f')
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", d.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					// A pair makes one rune; a lone half is U+FFFD.
					save := d.pos
					if d.literal(`\u`) {
						if r2, ok := d.hex4(); ok {
							if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
								b.WriteRune(dec)
								continue
							}
						}
					}
					d.pos = save
					r = utf8.RuneError
				}
				b.WriteRune(r)
			default:
				return "", d.errorf("invalid escape \\%c", e)
			}
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			d.pos++
		default:
			r, n := utf8.DecodeRune(d.data[d.pos:])
			b.WriteRune(r) // RuneError for a bad byte, as encoding/json
			d.pos += n
		}
	}
}

func (d *decoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.data) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(d.data[d.pos:d.pos+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	d.pos += 4
	return rune(n), true
}

// field is a struct field JSON can set: its key and where it is (through
// embedded structs).
type field struct {
	name  string
	index []int
}

// fieldsOf lists t's fields by JSON key, shallower ones first, so that an
// outer field hides a promoted one of the same key, as in encoding/json.
func fieldsOf(t reflect.Type) []field {
	var out, embedded []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" && f.Type.Kind() == reflect.Struct {
			for _, g := range fieldsOf(f.Type) {
				embedded = append(embedded, field{g.name, append([]int{i}, g.index...)})
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		out = append(out, field{tag, []int{i}})
	}
	for _, e := range embedded {
		if _, ok := lookupExact(out, e.name); !ok {
			out = append(out, e)
		}
	}
	return out
}

func lookupExact(fields []field, key string) (field, bool) {
	for _, f := range fields {
		if f.name == key {
			return f, true
		}
	}
	return field{}, false
}

// lookup finds key's field, exactly or else ignoring case.
func lookup(fields []field, key string) (field, bool) {
	if f, ok := lookupExact(fields, key); ok {
		return f, true
	}
	for _, f := range fields {
		if strings.EqualFold(f.name, key) {
			return f, true
		}
	}
	return field{}, false
}

func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for _, i := range index {
		v = v.Field(i)
	}
	return v
}

// parseRFC3339 parses what time.Time's MarshalJSON writes, RFC 3339:
// 2006-01-02T15:04:05.999999999Z07:00, offsets under 24 hours. A parser
// of its own, because time.Parse is 20 KB of the router binary; it
// refuses what time.Parse lets through past the RFC (one-digit hours,
// a comma before the fraction, offsets of 24:00 or :60), which
// MarshalJSON never writes.
func parseRFC3339(s string) (time.Time, error) {
	const form = "0000-00-00T00:00:00" // 0: a digit
	ok := len(s) > len(form)
	for i := 0; ok && i < len(form); i++ {
		ok = form[i] == '0' && isDigit(s[i]) || form[i] != '0' && form[i] == s[i]
	}
	if !ok {
		return time.Time{}, errNotRFC3339(s)
	}
	year, month, day := atoi(s[0:4]), atoi(s[5:7]), atoi(s[8:10])
	hour, minute, sec := atoi(s[11:13]), atoi(s[14:16]), atoi(s[17:19])
	if month < 1 || month > 12 || day < 1 || day > daysIn(time.Month(month), year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, errNotRFC3339(s)
	}
	i, nsec := len(form), 0
	if s[i] == '.' {
		j := i + 1
		for j < len(s) && isDigit(s[j]) {
			j++
		}
		if j == i+1 {
			return time.Time{}, errNotRFC3339(s)
		}
		frac := s[i+1 : min(j, i+10)] // as time.Parse: digits past the 9th dropped
		nsec = atoi(frac)
		for range 9 - len(frac) {
			nsec *= 10
		}
		i = j
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	zone := s[i:]
	if zone == "Z" {
		return t, nil
	}
	if len(zone) != 6 || zone[0] != '+' && zone[0] != '-' || zone[3] != ':' ||
		!isDigit(zone[1]) || !isDigit(zone[2]) || !isDigit(zone[4]) || !isDigit(zone[5]) {
		return time.Time{}, errNotRFC3339(s)
	}
	oh, om := atoi(zone[1:3]), atoi(zone[4:6])
	if oh > 23 || om > 59 {
		return time.Time{}, errNotRFC3339(s)
	}
	off := oh*3600 + om*60
	if zone[0] == '-' {
		off = -off
	}
	t = t.Add(-time.Duration(off) * time.Second)
	// As time.Parse: the local zone where the offset is the local one.
	if _, localOff := t.In(time.Local).Zone(); localOff == off {
		return t.In(time.Local), nil
	}
	return t.In(time.FixedZone("", off)), nil
}

func errNotRFC3339(s string) error { return fmt.Errorf("time %q is not RFC 3339", s) }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// atoi is the value of s, digits only (checked by the caller).
func atoi(s string) int {
	n := 0
	for i := range len(s) {
		n = n*10 + int(s[i]-'0')
	}
	return n
}

func daysIn(m time.Month, year int) int {
	return time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
