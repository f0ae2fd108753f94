package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The guest's /init reports through marker lines on the console:
//
//	@@offload-vm boot kernel=6.1.0-57-amd64 arch=x86_64 id=NONCE
//	@@offload-vm begin step=test:engine id=NONCE
//	@@offload-vm step=test:engine rc=0 id=NONCE
//	@@offload-vm done passed=3 failed=0 id=NONCE
//
// -fetch copies a guest file out between two markers, in base64:
//
//	@@offload-vm file-begin path=/tmp/cpu.prof size=N sha256=HEX id=NONCE
//	...base64 lines...
//	@@offload-vm file-end path=/tmp/cpu.prof id=NONCE
//
// and span-begin/span-end lines time guest work from the host (spans.go).
//
// NONCE is fresh for every run, so output of a program inside the guest that
// happens to print such a line (the harness's own tests, say) is not taken
// for a result. A marker is found anywhere in a line, because a kernel
// message may land on the serial console in the middle of one.

const marker = "@@offload-vm"

// stepResult is one finished step.
type stepResult struct {
	Name string
	RC   int
}

// report accumulates what the guest said.
type report struct {
	nonce   string
	Kernel  string
	Begun   []string
	Steps   []stepResult
	Done    bool
	Passed  int
	Failed  int
	badLine []string

	// sample reads the host clock and qemu's CPU time for spans; nil
	// gives the host clock alone.
	sample func() cpuSample
	Spans  spanLog
	Files  map[string]*fetchedFile
	cur    *fetchedFile
}

// fetchedFile is a guest file copied out over the console.
type fetchedFile struct {
	Path   string
	size   int64
	sha256 string
	b64    strings.Builder
	Data   []byte
	Err    error // nil once the file arrived whole
}

func newReport(nonce string) *report { return &report{nonce: nonce} }

// capturing reports whether console lines are file content now.
func (r *report) capturing() bool { return r.cur != nil }

func (r *report) now() cpuSample {
	if r.sample != nil {
		return r.sample()
	}
	return cpuSample{Wall: time.Now()}
}

// finishFile decodes a fetched file and checks its size and digest.
func (f *fetchedFile) finish() {
	data, err := base64.StdEncoding.DecodeString(f.b64.String())
	switch {
	case err != nil:
		f.Err = fmt.Errorf("fetch %s: base64: %w (a console line was cut?)", f.Path, err)
	case int64(len(data)) != f.size:
		f.Err = fmt.Errorf("fetch %s: %d bytes arrived, the guest sent %d", f.Path, len(data), f.size)
	default:
		sum := sha256.Sum256(data)
		if hex.EncodeToString(sum[:]) != f.sha256 {
			f.Err = fmt.Errorf("fetch %s: SHA-256 differs from the guest's", f.Path)
		} else {
			f.Data = data
		}
	}
}

// parseMarker returns the kind and key=value fields of a marker line, or
// ok=false when the line carries no marker.
func parseMarker(line string) (kind string, kv map[string]string, ok bool) {
	i := strings.Index(line, marker+" ")
	if i < 0 {
		return "", nil, false
	}
	kv = map[string]string{}
	for _, f := range strings.Fields(line[i+len(marker):]) {
		k, v, found := strings.Cut(f, "=")
		if !found {
			if kind == "" {
				kind = f
			}
			continue
		}
		kv[k] = v
	}
	if kind == "" {
		kind = "step"
	}
	return kind, kv, true
}

// feed takes one console line (without its line ending).
func (r *report) feed(line string) {
	kind, kv, ok := parseMarker(line)
	if ok && kv["id"] != r.nonce {
		ok = false
	}
	if r.cur != nil && !ok {
		r.cur.b64.WriteString(strings.TrimSpace(line))
		return
	}
	if !ok {
		return
	}
	switch kind {
	case "span-begin":
		r.Spans.begin(kv, r.now())
	case "span-end":
		r.Spans.end(kv, r.now())
	case "file-begin":
		size, err := strconv.ParseInt(kv["size"], 10, 64)
		if kv["path"] == "" || err != nil || kv["sha256"] == "" || r.cur != nil {
			r.badLine = append(r.badLine, line)
			return
		}
		r.cur = &fetchedFile{Path: kv["path"], size: size, sha256: kv["sha256"]}
	case "file-end":
		if r.cur == nil || kv["path"] != r.cur.Path {
			r.badLine = append(r.badLine, line)
			return
		}
		r.cur.finish()
		if r.Files == nil {
			r.Files = map[string]*fetchedFile{}
		}
		r.Files[r.cur.Path] = r.cur
		r.cur = nil
	case "boot":
		r.Kernel = kv["kernel"]
	case "begin":
		r.Begun = append(r.Begun, kv["step"])
	case "step":
		rc, err := strconv.Atoi(kv["rc"])
		if kv["step"] == "" || err != nil {
			r.badLine = append(r.badLine, line)
			return
		}
		r.Steps = append(r.Steps, stepResult{Name: kv["step"], RC: rc})
	case "done":
		p, err1 := strconv.Atoi(kv["passed"])
		f, err2 := strconv.Atoi(kv["failed"])
		if err1 != nil || err2 != nil {
			r.badLine = append(r.badLine, line)
			return
		}
		r.Done, r.Passed, r.Failed = true, p, f
	}
}

// verdict returns nil only if every expected step ran and passed and the
// summary came and agrees with the steps.
func (r *report) verdict(expected []string) error {
	var errs []error
	for _, l := range r.badLine {
		errs = append(errs, fmt.Errorf("malformed result line %q", l))
	}
	got := map[string]int{}
	passed, failed := 0, 0
	for _, s := range r.Steps {
		got[s.Name]++
		if s.RC == 0 {
			passed++
		} else {
			failed++
			errs = append(errs, fmt.Errorf("step %s failed (rc=%d)", s.Name, s.RC))
		}
	}
	for _, name := range expected {
		if got[name] == 0 {
			if slices.Contains(r.Begun, name) {
				errs = append(errs, fmt.Errorf("step %s started but never finished", name))
			} else {
				errs = append(errs, fmt.Errorf("step %s never ran", name))
			}
		}
	}
	for name, n := range got {
		if !slices.Contains(expected, name) {
			errs = append(errs, fmt.Errorf("unexpected step %s in the results", name))
		} else if n > 1 {
			errs = append(errs, fmt.Errorf("step %s reported %d times", name, n))
		}
	}
	errs = append(errs, r.Spans.errs()...)
	if r.cur != nil {
		errs = append(errs, fmt.Errorf("fetch %s: the file's end never came", r.cur.Path))
	}
	for _, name := range expected {
		p, ok := strings.CutPrefix(name, "fetch:")
		if !ok {
			continue
		}
		switch f := r.Files[p]; {
		case f == nil:
			errs = append(errs, fmt.Errorf("fetch %s: the file never came over the console", p))
		case f.Err != nil:
			errs = append(errs, f.Err)
		}
	}
	switch {
	case !r.Done:
		errs = append(errs, errors.New("no summary line from the guest (it crashed, hung or was cut short)"))
	case r.Failed != failed || r.Passed != passed:
		errs = append(errs, fmt.Errorf("summary says passed=%d failed=%d, step lines say passed=%d failed=%d",
			r.Passed, r.Failed, passed, failed))
	}
	return errors.Join(errs...)
}
