package jsonlite

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// strict is RFC 3339's date-time, the form MarshalJSON writes.
var strict = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$`)

// laxTime reports whether err is jsonlite refusing a time that
// encoding/json takes only through time.Parse's leniency past RFC 3339
// (parseRFC3339's comment); a strict time refused fails the test.
func laxTime(t *testing.T, err error) bool {
	_, q, ok := strings.Cut(err.Error(), "time ")
	q, _, ok2 := strings.Cut(q, " is not RFC 3339")
	if !ok || !ok2 {
		return false
	}
	s, uerr := strconv.Unquote(q)
	if uerr != nil {
		t.Fatalf("%v: %v", err, uerr)
	}
	if strict.MatchString(s) {
		if _, perr := time.Parse(time.RFC3339, s); perr == nil {
			t.Fatalf("jsonlite refuses the RFC 3339 time %q", s)
		}
	}
	return true
}

// The shape of the values offload reads back (live.Status,
// selector.Profile): an embedded struct, pointers to times and structs,
// nested slices, maps, every number kind.
type traffic struct {
	Sent uint64  `json:"sent"`
	Rate float64 `json:"rate"`
}

type inner struct {
	Name string             `json:"name"`
	BPS  map[string]float64 `json:"bps"`
	At   *time.Time         `json:"at,omitempty"`
}

type sample struct {
	Role    string            `json:"role"`
	Started time.Time         `json:"started"`
	Last    *time.Time        `json:"last,omitempty"`
	Items   []inner           `json:"items"`
	Ptr     *inner            `json:"ptr,omitempty"`
	Total   map[string]uint64 `json:"total"`
	Names   []string          `json:"names"`
	traffic
	Sent  int64   `json:"outer_sent"`
	I8    int8    `json:"i8"`
	U16   uint16  `json:"u16"`
	I     int     `json:"i"`
	F32   float32 `json:"f32"`
	OK    bool    `json:"ok"`
	NoTag string
	Skip  string  `json:"-"`
	Grid  [][]int `json:"grid"`
}

// fill gives every field of v a value that is not zero, so that a field
// the decoder loses shows.
func fill(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Struct:
		if v.Type() == timeType {
			v.Set(reflect.ValueOf(time.Date(2026, 12, 7, 8, 0, *n, *n*1000, time.FixedZone("", 3600*(*n%5)))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(v.Index(0), n)
		fill(v.Index(1), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for _, k := range []string{"a", "b\u00e9\"\\"} {
			e := reflect.New(v.Type().Elem()).Elem()
			fill(e, n)
			v.SetMapIndex(reflect.ValueOf(k), e)
		}
	case reflect.String:
		v.SetString(strings.Repeat("x\u2028<\t", *n%3+1))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(-*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	default:
		panic("fill: " + v.Kind().String())
	}
}

// roundTrip fills v (a pointer), writes it with encoding/json and checks
// that Unmarshal reads back what it wrote, field for field.
func roundTrip(t *testing.T, v any) {
	t.Helper()
	n := 0
	fill(reflect.ValueOf(v).Elem(), &n)
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	got := reflect.New(reflect.TypeOf(v).Elem())
	if err := Unmarshal(b, got.Interface()); err != nil {
		t.Fatalf("Unmarshal: %v\n%s", err, b)
	}
	b2, _ := json.Marshal(got.Interface())
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip differs:\n%s\n%s", b, b2)
	}
}

func TestRoundTrip(t *testing.T) {
	roundTrip(t, &sample{})
}

// Unmarshal agrees with encoding/json: both accept or both refuse, and
// what they accept is the same value.
func check(t *testing.T, data []byte) {
	var want, got sample
	werr := json.Unmarshal(data, &want)
	gerr := Unmarshal(data, &got)
	if werr == nil && gerr != nil && laxTime(t, gerr) {
		return
	}
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%q: encoding/json: %v, jsonlite: %v", data, werr, gerr)
	}
	if werr != nil {
		return
	}
	wb, _ := json.Marshal(want)
	gb, _ := json.Marshal(got)
	if !bytes.Equal(wb, gb) {
		t.Fatalf("%q:\nencoding/json %s\njsonlite      %s", data, wb, gb)
	}
}

var seeds = []string{
	`{"role":"server","started":"2026-12-07T08:00:00.123+01:00","items":[{"name":"a","bps":{"x":1.5e3}}]}`,
	`{"total":{"ok":1,"ok":2},"names":["a\u00e9\ud83d\ude00\ud800","\"\\\/\b\f\n\r\t"],"grid":[[1,2],[],null]}`,
	`{"ROLE":"x","notag":"y","Skip":"z","hidden":1,"sent":5,"outer_sent":-6,"rate":0.5}`,
	`{"i8":128}`, `{"u16":-1}`, `{"i":1.0}`, `{"f32":1e39}`, `{"ok":1}`, `{"names":"x"}`,
	`{"last":null,"ptr":null,"items":null}`, `{"unknown":{"a":[1,{"b":null}],"c":true}}`,
	`{"started":"2026-02-30T00:00:00Z"}`, `{"started":"2026-12-07T24:00:00Z"}`,
	`{"started":"2026-12-07T08:00:00.1234567891Z"}`, `{"started":"2026-12-07T08:00:00+24:00"}`,
	`{"started":12}`, `{} x`, `{"role":"a",}`, `[1,]`, `01`, `-`, `"\x01"`, "\"\xff\"", `{"role":"\u00"}`,
	`  {"i": -0 , "f32" : -1.5E-2 }  `,
}

func TestAgainstEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		check(t, []byte(s))
	}
}

func FuzzAgainstEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { check(t, data) })
}
