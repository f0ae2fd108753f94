package main

import (
	"strings"
	"testing"
)

func feedAll(r *report, console string) {
	for _, l := range strings.Split(console, "\n") {
		r.feed(strings.TrimRight(l, "\r"))
	}
}

func TestVerdict(t *testing.T) {
	const id = "0123abcd"
	expected := []string{"modules", "test:engine", "cmd:1"}
	cases := []struct {
		name    string
		console string
		wantErr string // "" means the run passed
	}{
		{
			name: "all passed",
			console: `[    0.1] some kernel line
@@offload-vm boot kernel=6.1.0-57-amd64 arch=x86_64 id=0123abcd
@@offload-vm begin step=modules id=0123abcd
@@offload-vm step=modules rc=0 id=0123abcd
=== RUN   TestKernelX
--- PASS: TestKernelX (0.01s)
PASS
@@offload-vm step=test:engine rc=0 id=0123abcd
@@offload-vm step=cmd:1 rc=0 id=0123abcd
@@offload-vm done passed=3 failed=0 id=0123abcd
[    5.0] reboot: Power down`,
		},
		{
			name: "CRLF endings and a kernel message glued in front",
			console: "@@offload-vm step=modules rc=0 id=0123abcd\r\n" +
				"[    1.2] random: crng init done@@offload-vm step=test:engine rc=0 id=0123abcd\r\n" +
				"@@offload-vm step=cmd:1 rc=0 id=0123abcd\r\n" +
				"@@offload-vm done passed=3 failed=0 id=0123abcd\r\n",
		},
		{
			name: "a test failed",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
--- FAIL: TestKernelX (0.01s)
FAIL
@@offload-vm step=test:engine rc=1 id=0123abcd
@@offload-vm step=cmd:1 rc=0 id=0123abcd
@@offload-vm done passed=2 failed=1 id=0123abcd`,
			wantErr: "step test:engine failed (rc=1)",
		},
		{
			name: "no summary",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
@@offload-vm step=test:engine rc=0 id=0123abcd
@@offload-vm step=cmd:1 rc=0 id=0123abcd`,
			wantErr: "no summary line",
		},
		{
			name:    "empty console",
			console: ``,
			wantErr: "step modules never ran",
		},
		{
			name: "crash inside a step",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
@@offload-vm begin step=test:engine id=0123abcd
[    3.0] Kernel panic - not syncing: Fatal exception`,
			wantErr: "step test:engine started but never finished",
		},
		{
			name: "markers from another run are ignored",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
@@offload-vm step=test:engine rc=0 id=ffffffff
@@offload-vm step=cmd:1 rc=0 id=0123abcd
@@offload-vm done passed=3 failed=0 id=ffffffff`,
			wantErr: "step test:engine never ran",
		},
		{
			name: "summary disagrees with the steps",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
@@offload-vm step=test:engine rc=0 id=0123abcd
@@offload-vm step=cmd:1 rc=0 id=0123abcd
@@offload-vm done passed=2 failed=1 id=0123abcd`,
			wantErr: "summary says passed=2 failed=1",
		},
		{
			name: "malformed rc",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
@@offload-vm step=test:engine rc=x id=0123abcd
@@offload-vm step=cmd:1 rc=0 id=0123abcd
@@offload-vm done passed=3 failed=0 id=0123abcd`,
			wantErr: "malformed result line",
		},
		{
			name: "unexpected and repeated steps",
			console: `@@offload-vm step=modules rc=0 id=0123abcd
@@offload-vm step=test:engine rc=0 id=0123abcd
@@offload-vm step=test:engine rc=0 id=0123abcd
@@offload-vm step=cmd:1 rc=0 id=0123abcd
@@offload-vm step=cmd:9 rc=0 id=0123abcd
@@offload-vm done passed=5 failed=0 id=0123abcd`,
			wantErr: "step test:engine reported 2 times",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newReport(id)
			feedAll(r, c.console)
			err := r.verdict(expected)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("verdict: %v, want pass", err)
			case c.wantErr != "" && err == nil:
				t.Fatalf("verdict passed, want an error containing %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("verdict: %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
}

func TestReportKernel(t *testing.T) {
	r := newReport("ab")
	r.feed("@@offload-vm boot kernel=6.1.0-57-amd64 arch=x86_64 id=ab")
	if r.Kernel != "6.1.0-57-amd64" {
		t.Fatalf("Kernel = %q", r.Kernel)
	}
}

func TestParseMarker(t *testing.T) {
	if _, _, ok := parseMarker("@@offload-vmx step=a rc=0"); ok {
		t.Error("a longer word was taken for the marker")
	}
	kind, kv, ok := parseMarker("xx @@offload-vm done passed=1 failed=0 id=z")
	if !ok || kind != "done" || kv["passed"] != "1" || kv["failed"] != "0" || kv["id"] != "z" {
		t.Errorf("got %q %v %v", kind, kv, ok)
	}
	kind, kv, ok = parseMarker("@@offload-vm step=cmd:1 rc=127 id=z")
	if !ok || kind != "step" || kv["step"] != "cmd:1" || kv["rc"] != "127" {
		t.Errorf("got %q %v %v", kind, kv, ok)
	}
}
