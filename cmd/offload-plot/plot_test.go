package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/engine"
	"github.com/offload-dev/offload/selector"
)

func testProfile() *selector.Profile {
	hw := &engine.Driver{Name: "virtio_crypto_aes_cbc", Hardware: true}
	sw := &engine.Driver{Name: "go/generic"}
	var points []selector.Point
	for size := 16; size <= 65536; size *= 4 {
		points = append(points, selector.Point{Size: size, BPS: map[string]float64{
			"software": 20e6, "afalg:virtio_crypto_aes_cbc": 80e6 * float64(size) / float64(size+16384),
		}})
	}
	return &selector.Profile{
		Version: selector.Version, Kernel: "linux 6.1.0-57-amd64", MaxFrame: 65536,
		Tables: []selector.Table{{
			Cipher: "aes-256-cbc", Direction: "encrypt",
			Engines: []selector.EngineInfo{
				{Name: "software", Driver: sw},
				{Name: "afalg:virtio_crypto_aes_cbc", Driver: hw},
				{Name: "cryptodev", Unavailable: "no /dev/crypto"},
			},
			Points: points,
			Bands:  []selector.Band{{From: 1, To: 6143, Engine: "software"}, {From: 6144, To: 65536, Engine: "afalg:virtio_crypto_aes_cbc"}},
		}},
	}
}

// element is a generic XML element, enough to inspect the SVG.
type element struct {
	XMLName  xml.Name
	Attrs    []xml.Attr `xml:",any,attr"`
	Children []element  `xml:",any"`
	Text     string     `xml:",chardata"`
}

func (e element) attr(name string) string {
	for _, a := range e.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func (e element) walk(f func(element)) {
	f(e)
	for _, c := range e.Children {
		c.walk(f)
	}
}

func render(t *testing.T, c *chart) (element, string) {
	t.Helper()
	var b bytes.Buffer
	if err := writeSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, every token.
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b.String())
		}
	}
	var root element
	if err := xml.Unmarshal(b.Bytes(), &root); err != nil {
		t.Fatal(err)
	}
	if root.XMLName.Local != "svg" || root.XMLName.Space != "http://www.w3.org/2000/svg" {
		t.Fatalf("root %v", root.XMLName)
	}
	return root, b.String()
}

func TestSVGFromProfile(t *testing.T) {
	js, _ := json.Marshal(testProfile())
	c, err := parse(js, "", "")
	if err != nil {
		t.Fatal(err)
	}
	root, text := render(t, c)
	var polylines, markers []element
	var engines []string
	root.walk(func(e element) {
		switch {
		case e.XMLName.Local == "g" && e.attr("class") == "engine":
			engines = append(engines, e.attr("data-engine"))
			for _, ch := range e.Children {
				if ch.XMLName.Local == "polyline" {
					polylines = append(polylines, ch)
				}
			}
		case e.XMLName.Local == "g" && e.attr("class") == "crossover":
			markers = append(markers, e)
		}
	})
	// One polyline per measured engine (cryptodev was unavailable).
	if len(polylines) != 2 || strings.Join(engines, ",") != "software,afalg:virtio_crypto_aes_cbc" {
		t.Fatalf("engines %v, %d polylines", engines, len(polylines))
	}
	if n := len(strings.Fields(polylines[1].attr("points"))); n != 7 {
		t.Errorf("device polyline has %d points, want 7", n)
	}
	// The crossover marker sits at x(6144) on the log2 axis: 16 B at the
	// left edge, 64 KiB at the right one.
	if len(markers) != 1 || markers[0].attr("data-size") != "6144" {
		t.Fatalf("crossover markers %+v", markers)
	}
	a := newAxes(c)
	wantX := float64(marginLeft) + (12.584962500721156-4)/(16-4)*float64(width-marginLeft-marginRight)
	if got := fmt.Sprintf("%.1f", a.x(6144)); got != fmt.Sprintf("%.1f", wantX) {
		t.Fatalf("x(6144) = %s, want %.1f", got, wantX)
	}
	var line element
	for _, ch := range markers[0].Children {
		if ch.XMLName.Local == "line" {
			line = ch
		}
	}
	if line.attr("x1") != fmt.Sprintf("%.1f", wantX) || line.attr("x2") != line.attr("x1") {
		t.Errorf("crossover line at x1=%s x2=%s, want %.1f", line.attr("x1"), line.attr("x2"), wantX)
	}
	for _, want := range []string{
		"6144 B: software → afalg:virtio_crypto_aes_cbc",                                 // label
		"aes-256-cbc encrypt", "linux 6.1.0-57-amd64", "virtio_crypto_aes_cbc, hardware", // title, legend
		"MB/s", "block (frame) size", ">16<", ">64K<",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestSVGFromSpeedReport(t *testing.T) {
	js := `{"kernel":"linux 6.1","cipher":"aes-256-cbc","direction":"encrypt","cpu_aes":false,
	"engines":[
	 {"engine":"software","driver":{"name":"go/generic"},"results":[{"size":16,"ops":1000,"elapsed_ns":1000000000},{"size":16384,"ops":1000,"elapsed_ns":1000000000}]},
	 {"engine":"afalg","available":false,"unavailable":"no AF_ALG"},
	 {"engine":"cryptodev","driver":{"name":"mtk-aes","hardware":true},"results":[{"size":16,"ops":10,"elapsed_ns":1000000000},{"size":16384,"ops":5000,"elapsed_ns":1000000000}]}],
	"bands":[{"from":16,"to":16,"engine":"software"},{"from":16384,"to":16384,"engine":"cryptodev"}]}`
	c, err := parse([]byte(js), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Series) != 2 || c.Series[1].Points[1].BPS != 5000*16384 {
		t.Fatalf("series %+v", c.Series)
	}
	// Between 16 and 16384: drawn at the geometric mean, 512, marked ≈.
	if len(c.Crossovers) != 1 || c.Crossovers[0].Size != 512 || c.Crossovers[0].Exact {
		t.Fatalf("crossovers %+v", c.Crossovers)
	}
	_, text := render(t, c)
	if !strings.Contains(text, "≈512 B: software → cryptodev") || !strings.Contains(text, "CPU AES instructions off") {
		t.Errorf("labels missing:\n%s", text)
	}
}

func TestParseRejects(t *testing.T) {
	for _, in := range []string{`[]`, `{}`, `{"engines":[]}`, `{"tables":[]}`, `not json`} {
		if _, err := parse([]byte(in), "", ""); !errors.Is(err, ErrInput) {
			t.Errorf("parse(%s): %v, want ErrInput", in, err)
		}
	}
	js, _ := json.Marshal(testProfile())
	if _, err := parse(js, "aes-128-ctr", ""); !errors.Is(err, ErrInput) {
		t.Errorf("missing table: %v", err)
	}
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	in, out := filepath.Join(dir, "p.json"), filepath.Join(dir, "p.svg")
	js, _ := json.Marshal(testProfile())
	os.WriteFile(in, js, 0o644)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-i", in, "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("output: %v %.100s", err, b)
	}
	if code := run(nil, &stdout, &stderr); code != 2 {
		t.Errorf("no -i: exit %d", code)
	}
	if code := run([]string{"-i", filepath.Join(dir, "none.json")}, &stdout, &stderr); code != 1 {
		t.Errorf("missing input: exit %d", code)
	}
}
