package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The integration test boots real VMs (about 10 s each under TCG), so it
// runs only with OFFLOAD_VM_INTEGRATION=1 (scripts/test.sh sets it in its VM
// stage). It checks what CI relies on: a failing guest test, a failing
// command and a hung guest all make the harness exit non-zero.

// throwaway writes a tiny module with one passing and one failing guest
// test and returns its folder.
func throwaway(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/throwaway\n\ngo 1.22\n",
		"pass/pass_test.go": `package pass

import (
	"os"
	"testing"
)

func TestKernelPass(t *testing.T) {
	if os.Getenv("OFFLOAD_VM") != "1" {
		t.Fatal("OFFLOAD_VM is not 1 in the guest")
	}
	b, err := os.ReadFile("testdata/hello.txt")
	if err != nil || string(b) != "hello\n" {
		t.Fatalf("testdata: %q, %v", b, err)
	}
	if err := os.WriteFile("scratch", []byte("x"), 0o600); err != nil {
		t.Fatalf("working folder not writable: %v", err)
	}
}

func TestNotSelected(t *testing.T) { t.Fatal("-run did not filter") }
`,
		"pass/testdata/hello.txt": "hello\n",
		"fail/fail_test.go": `package fail

import "testing"

func TestKernelFails(t *testing.T) { t.Fatal("deliberate failure inside the guest") }
`,
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func runHarness(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"-smp", "1", "-timeout", "3m"}, args...), &out, &errb)
	all := out.String() + errb.String()
	t.Logf("harness %v exited %d", args, code)
	return code, all
}

func TestIntegrationHarness(t *testing.T) {
	if os.Getenv("OFFLOAD_VM_INTEGRATION") != "1" {
		t.Skip("boots VMs: set OFFLOAD_VM_INTEGRATION=1")
	}
	t.Chdir(throwaway(t))

	// The hung guest mostly waits for its timeout: boot it alongside the
	// others.
	type result struct {
		code int
		out  string
	}
	hung := make(chan result, 1)
	go func() {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"-smp", "1", "-timeout", "40s", "-cmd", "sleep 600"}, &out, &errb)
		hung <- result{code, out.String() + errb.String()}
	}()

	t.Run("pass", func(t *testing.T) {
		code, out := runHarness(t, "-test", "./pass", "-cmd", "test -d /proc/self", "-cmd", `[ "$OFFLOAD_VM" = 1 ]`)
		if code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, out)
		}
		for _, want := range []string{"--- PASS: TestKernelPass", "vm: 4 passed, 0 failed", "@@offload-vm done passed=4 failed=0"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "TestNotSelected") {
			t.Error("-run did not filter the guest tests")
		}
	})
	t.Run("failing test and command", func(t *testing.T) {
		code, out := runHarness(t, "-test", "./...", "-cmd", "true", "-cmd", "exit 3")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		for _, want := range []string{"deliberate failure inside the guest", "step test:fail failed (rc=1)",
			"step cmd:2 failed (rc=3)", "vm: 3 passed, 2 failed"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("guest powers off early", func(t *testing.T) {
		code, out := runHarness(t, "-cmd", "poweroff -f", "-cmd", "true")
		if code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", code, out)
		}
		if !strings.Contains(out, "no summary line") {
			t.Errorf("output lacks the missing summary:\n%s", out)
		}
	})
	t.Run("netns", func(t *testing.T) {
		code, out := runHarness(t, "-netns",
			"-cmd", "ip netns add a && ip -n a link add va type veth peer name vb && ip -n a addr add 10.99.0.1/24 dev va && ip -n a link set va up",
			"-cmd", "tc -n a qdisc add dev va root netem delay 20ms loss 1% && tc -n a qdisc show dev va")
		if code != 0 {
			t.Fatalf("exit %d, want 0:\n%s", code, out)
		}
		if !strings.Contains(out, "delay 20ms loss 1%") {
			t.Errorf("no netem qdisc in the output:\n%s", out)
		}
	})
	t.Run("hung guest", func(t *testing.T) {
		r := <-hung
		if r.code != 1 {
			t.Fatalf("exit %d, want 1:\n%s", r.code, r.out)
		}
		for _, want := range []string{"VM timed out", "no summary line", "step cmd:1 started but never finished"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("output lacks %q:\n%s", want, r.out)
			}
		}
	})
	t.Run("bad flags", func(t *testing.T) {
		if code, out := runHarness(t, "-arch", "sparc"); code != 2 || !strings.Contains(out, "unknown -arch") {
			t.Errorf("exit %d, want 2:\n%s", code, out)
		}
		if code, out := runHarness(t, "-modules", "no_such_module"); code != 2 || !strings.Contains(out, "module not found") {
			t.Errorf("exit %d, want 2:\n%s", code, out)
		}
	})
}
