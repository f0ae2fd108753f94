package config

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"unicode"
)

// Changed returns the settings, by their names in the file ("max_frame",
// "log"), whose values differ between two configs of the same kind (two
// *Server or two *Client), leaving out those in live: what a reload can
// not apply without a restart. Every exported field counts, those of
// Common included, so a setting added later is reported as needing a
// restart until its reload is written and it is named live.
func Changed(old, new any, live ...string) []string {
	a, b := reflect.ValueOf(old), reflect.ValueOf(new)
	if a.Type() != b.Type() {
		panic("config.Changed: configs of different kinds")
	}
	skip := map[string]bool{"file": true} // where it was read from, not a setting
	for _, l := range live {
		skip[l] = true
	}
	var out []string
	changed(reflect.Indirect(a), reflect.Indirect(b), skip, &out)
	return out
}

func changed(a, b reflect.Value, skip map[string]bool, out *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			changed(a.Field(i), b.Field(i), skip, out)
			continue
		}
		name := snake(f.Name)
		if skip[name] {
			continue
		}
		if !sameSetting(a.Field(i).Interface(), b.Field(i).Interface()) {
			*out = append(*out, name)
		}
	}
}

// sameSetting reports whether two values of a setting are equal: their JSON
// encodings are, which compares what the setting holds (nil and empty
// differ, maps by key, netip prefixes and log levels by their text) and
// not the bookkeeping in unexported fields. Not reflect.DeepEqual: that
// is 8 KB of the router binary, and the encoder is linked anyway (zap,
// /status). A value that will not encode counts as changed.
func sameSetting(a, b any) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// snake turns a Go field name into its config name: MaxHandshakesPerSource
// → max_handshakes_per_source, UDPForwards → udp_forwards.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			// An acronym is one word: UDPServices → udp_services, not
			// u_d_p_services (which no live list would match).
			prevLower := i > 0 && !unicode.IsUpper(rs[i-1])
			endsAcronym := i > 0 && i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if prevLower || endsAcronym {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
