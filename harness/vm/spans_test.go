package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// feedSpans runs marker lines through a report whose host samples come
// from a fake clock: each line advances wall time by 1s and qemu CPU by
// cpuStep.
func feedSpans(t *testing.T, cpuStep time.Duration, lines ...string) *report {
	t.Helper()
	r := newReport("n1")
	wall, cpu := time.Unix(1000, 0), time.Duration(0)
	r.sample = func() cpuSample {
		wall, cpu = wall.Add(time.Second), cpu+cpuStep
		return cpuSample{Wall: wall, CPU: cpu, CPUOK: true}
	}
	for _, l := range lines {
		r.feed(l)
	}
	return r
}

func TestSpans(t *testing.T) {
	r := feedSpans(t, 2*time.Second,
		"@@offload-vm span-begin name=wg ref=1 id=n1",
		"@@offload-vm span-end name=wg bytes=4000000 guest_s=1 guest_busy_s=0.9 id=n1",
		"@@offload-vm span-begin name=wg ref=1 id=other", // another run's nonce: ignored
		"@@offload-vm span-begin name=off id=n1",
		"@@offload-vm span-end name=off bytes=1000000 guest_s=0.25 id=n1",
	)
	if errs := r.Spans.errs(); len(errs) > 0 {
		t.Fatalf("errs: %v", errs)
	}
	if len(r.Spans.Done) != 2 {
		t.Fatalf("%d spans, want 2", len(r.Spans.Done))
	}
	g := groupSpans(r.Spans.Done)
	// wg: 4 MB over 1 host second and 2 qemu CPU seconds.
	if g[0].Name != "wg" || !g[0].Ref || g[0].Host != 4 || g[0].PerCS != 2 || g[0].Guest != 4 || g[0].Clock != 1 {
		t.Errorf("wg group %+v", *g[0])
	}
	// off: guest clock says 4 MB/s but the host saw 1 MB/s: a stall.
	if g[1].Guest != 4 || g[1].Host != 1 || g[1].Clock != 0.25 {
		t.Errorf("off group %+v", *g[1])
	}
	var b bytes.Buffer
	writeSpanTable(&b, r.Spans.Done, 4242)
	for _, want := range []string{"qemu pid 4242", "wg ", "0.25x", "stalled emulated timer: off"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("span table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestSpansMalformed(t *testing.T) {
	r := feedSpans(t, time.Second,
		"@@offload-vm span-end name=never id=n1",
		"@@offload-vm span-begin name=a id=n1",
		"@@offload-vm span-begin name=a id=n1",
		"@@offload-vm span-begin name=b id=n1",
		"@@offload-vm span-end name=b bytes=x id=n1",
		"@@offload-vm span-begin name=c id=n1",
	)
	got := fmt.Sprint(r.Spans.errs())
	for _, want := range []string{"never\" ended without beginning", "a began twice", "bad bytes", "span a began but never ended", "span c began but never ended"} {
		if !strings.Contains(got, want) {
			t.Errorf("errs lack %q: %s", want, got)
		}
	}
	if err := r.verdict(nil); err == nil {
		t.Error("verdict passes with malformed spans")
	}
}

func fileLines(path string, data []byte, sum string) []string {
	b64 := base64.StdEncoding.EncodeToString(data)
	lines := []string{fmt.Sprintf("@@offload-vm file-begin path=%s size=%d sha256=%s id=n1", path, len(data), sum)}
	for len(b64) > 76 {
		lines = append(lines, b64[:76])
		b64 = b64[76:]
	}
	return append(lines, b64, "@@offload-vm file-end path="+path+" id=n1")
}

func TestFetchFile(t *testing.T) {
	data := bytes.Repeat([]byte("profile\x00\x01"), 100)
	sum := sha256.Sum256(data)
	good := hex.EncodeToString(sum[:])
	steps := []string{"fetch:/tmp/p"}
	done := []string{"@@offload-vm step=fetch:/tmp/p rc=0 id=n1", "@@offload-vm done passed=1 failed=0 id=n1"}

	r := newReport("n1")
	for _, l := range append(fileLines("/tmp/p", data, good), done...) {
		r.feed(l)
	}
	if err := r.verdict(steps); err != nil {
		t.Fatalf("verdict: %v", err)
	}
	if f := r.Files["/tmp/p"]; f == nil || !bytes.Equal(f.Data, data) {
		t.Fatal("file data differs")
	}

	// A digest that does not match (a console line cut by a kernel
	// message, say) fails the run.
	r = newReport("n1")
	for _, l := range append(fileLines("/tmp/p", data, strings.Repeat("0", 64)), done...) {
		r.feed(l)
	}
	if err := r.verdict(steps); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("verdict with a bad digest: %v", err)
	}

	// A file that never came fails too, even if the step said rc=0.
	r = newReport("n1")
	for _, l := range done {
		r.feed(l)
	}
	if err := r.verdict(steps); err == nil || !strings.Contains(err.Error(), "never came") {
		t.Errorf("verdict without the file: %v", err)
	}

	// An end that never came.
	r = newReport("n1")
	lines := fileLines("/tmp/p", data, good)
	for _, l := range append(lines[:len(lines)-1], done...) {
		r.feed(l)
	}
	if err := r.verdict(steps); err == nil {
		t.Error("verdict passes a file whose end never came")
	}
}

func TestInitScriptEnvAndFetch(t *testing.T) {
	p := testPlan()
	p.Env = []string{"OFFLOAD_ANCHOR_MIB=4", "X=it's"}
	p.Fetch = []string{"/tmp/cpu.prof"}
	s := p.initScript()
	for _, want := range []string{
		"export OFFLOAD_VM_ID=$id",
		"export OFFLOAD_ANCHOR_MIB='4'",
		`export X='it'\''s'`,
		"step 'fetch:/tmp/cpu.prof' fetch_file '/tmp/cpu.prof'",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("init script lacks %q", want)
		}
	}
	if steps := p.steps(); steps[len(steps)-1] != "fetch:/tmp/cpu.prof" {
		t.Errorf("steps %v: want the fetch last", steps)
	}
}

func TestParseFlagsEnvFetchDeb(t *testing.T) {
	for _, args := range [][]string{
		{"-env", "NOEQUALS"},
		{"-env", "1X=2"},
		{"-fetch", "relative/path", "-out", "x"},
		{"-fetch", "/tmp/a b", "-out", "x"},
		{"-fetch", "/tmp/a"}, // no -out
		{"-pprof", "/tmp/a=b"},
		{"-deb", "wireguard-tools:mipsel"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
	o, err := parseFlags([]string{"-env", "A=1=2", "-pprof", "/tmp/p", "-deb", "wireguard-tools"}, &bytes.Buffer{})
	if err != nil || len(o.env) != 1 || len(o.pprof) != 1 || len(o.debs) != 1 {
		t.Fatalf("parseFlags: %+v, %v", o, err)
	}
}

func TestInRoot(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "lib", "mipsel-linux-gnu"), 0o755))
	must(os.WriteFile(filepath.Join(root, "lib", "mipsel-linux-gnu", "ld.so.1"), []byte("x"), 0o755))
	// An absolute link is relative to the package root, not the host.
	must(os.Symlink("/lib/mipsel-linux-gnu/ld.so.1", filepath.Join(root, "lib", "ld.so.1")))
	must(os.Symlink("ld.so.1", filepath.Join(root, "lib", "mipsel-linux-gnu", "ld-rel.so")))
	must(os.Symlink("loop", filepath.Join(root, "lib", "loop")))
	want := filepath.Join(root, "lib", "mipsel-linux-gnu", "ld.so.1")
	for _, g := range []string{"/lib/ld.so.1", "/lib/mipsel-linux-gnu/ld-rel.so", "/lib/mipsel-linux-gnu/ld.so.1"} {
		if got, ok := inRoot(root, g); !ok || got != want {
			t.Errorf("inRoot(%s) = %q, %v; want %q", g, got, ok, want)
		}
	}
	for _, g := range []string{"/lib/loop", "/lib/missing", "/lib"} {
		if got, ok := inRoot(root, g); ok {
			t.Errorf("inRoot(%s) = %q, want not found", g, got)
		}
	}
	if dirs := libDirs([]string{root}); dirs[0] != "/lib/mipsel-linux-gnu" {
		t.Errorf("libDirs = %v", dirs)
	}
}

// TestKernelDebWireguardTools resolves wg's libraries from the packages a
// harness run fetched into the cache, when there are some.
func TestKernelDebWireguardTools(t *testing.T) {
	cache, err := cacheDir()
	if err != nil {
		t.Skip(err)
	}
	a, _ := lookupArch("mipsle")
	wg := filepath.Join(cache, a.DebArch, "deb", "wireguard-tools", "root")
	libc := filepath.Join(cache, a.DebArch, "deb", "libc6", "root")
	if _, err := os.Stat(libc); err != nil {
		t.Skip("no wireguard-tools:mipsel and libc6:mipsel in the cache; go run ./harness/vm -arch mipsle -deb wireguard-tools fetches them")
	}
	progs, err := debPrograms(wg, a.ELF)
	if err != nil || len(progs) != 1 || progs[0].Guest != "/usr/bin/wg" {
		t.Fatalf("debPrograms = %+v, %v; want /usr/bin/wg only (wg-quick is a script)", progs, err)
	}
	libs, err := resolveLibs(progs, []string{wg, libc}, a.ELF)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range libs {
		names = append(names, l.Guest)
	}
	got := strings.Join(names, " ")
	if !strings.Contains(got, "/lib/ld.so.1") || !strings.Contains(got, "/libc.so.6") {
		t.Errorf("wg's libraries %q: want the loader and libc", got)
	}
	if _, err := resolveLibs(progs, []string{wg}, a.ELF); err == nil {
		t.Error("resolveLibs without libc6: no error")
	}
}

func TestPprofComponents(t *testing.T) {
	top := `File: offload
Type: cpu
Showing nodes accounting for 1.74s, 100% of 1.74s total
      flat  flat%   sum%        cum   cum%
     0.34s 19.54% 19.54%      0.39s 22.41%  crypto/internal/fips140/aes.encryptBlockGeneric
     230ms 13.22% 32.76%      0.23s 13.22%  internal/runtime/syscall/linux.Syscall6
     0.20s 11.49% 44.25%      0.20s 11.49%  runtime.asyncPreempt
     0.06s  3.45% 64.94%      0.17s  9.77%  golang.org/x/crypto/internal/poly1305.updateGeneric
     0.05s  2.87% 67.81%      0.05s  2.87%  github.com/offload-dev/offload/tunnel/record.(*poly32).blocks
     0.03s  1.72% 69.53%      0.03s  1.72%  runtime.nanotime1
     0.02s  1.15% 70.68%      0.02s  1.15%  runtime.findRunnable
     0.04s  2.30% 70.11%      0.04s  2.30%  math/bits.Add64 (inline)
     0.01s  0.57% 72.41%      0.01s  0.57%  crypto/internal/fips140/hmac.New[go.shape.interface { BlockSize int; Reset }]
     0.02s  1.15% 74.71%      0.02s  1.15%  hash/crc32.slicingUpdate
     0.01s  0.57% 74.71%      0.02s  1.15%  encoding/binary.littleEndian.Uint64 (inline)
         0     0% 74.71%      0.02s  1.15%  github.com/hashicorp/yamux.(*Session).sendLoop
`
	var b bytes.Buffer
	if err := pprofComponents(top, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(1.01s sampled)", "AES in Go", "340ms  33.7%", "Poly1305", "150ms", "system calls", "230ms",
		"async preemption", "200ms", "clock reads", "30ms", "HMAC", "load generator", "other", "Go runtime"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("breakdown lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "yamux") {
		t.Errorf("a component with no flat time is listed:\n%s", b.String())
	}
	if err := pprofComponents("no samples here\n", &b); err == nil {
		t.Error("no error for output without samples")
	}
}

// TestSpanFile writes spans as JSON lines with qemu's CPU seconds and every
// key of the span-end line.
func TestSpanFile(t *testing.T) {
	r := feedSpans(t, 2*time.Second,
		"@@offload-vm span-begin name=wg ref=1 id=n1",
		"@@offload-vm span-end name=wg bytes=4000000 irq=7 id=n1",
	)
	file := filepath.Join(t.TempDir(), "spans.jsonl")
	if err := writeSpanFile(file, r.Spans.Done); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rec spanRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if rec.Name != "wg" || !rec.Ref || rec.Bytes != 4000000 || rec.QemuS != 2 || rec.HostS != 1 || rec.End["irq"] != "7" {
		t.Errorf("record %+v from %s", rec, b)
	}
}
