package main

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/config"
)

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestKeygen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "offload.key")
	if code, _, stderr := runCmd(t, "keygen", "-o", p); code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		t.Fatalf("key file mode %v", fi.Mode())
	}
	key, err := config.LoadKey(p)
	if err != nil {
		t.Fatal(err)
	}

	// No overwrite without -f.
	code, _, stderr := runCmd(t, "keygen", "-o", p)
	if code != 1 || !strings.Contains(stderr, "-f replaces it") {
		t.Fatalf("keygen over an existing file: exit %d: %s", code, stderr)
	}
	if again, _ := config.LoadKey(p); !bytes.Equal(again, key) {
		t.Fatal("existing key changed without -f")
	}

	if code, _, stderr := runCmd(t, "keygen", "-f", "-o", p); code != 0 {
		t.Fatalf("keygen -f: exit %d: %s", code, stderr)
	}
	if again, err := config.LoadKey(p); err != nil || bytes.Equal(again, key) {
		t.Fatalf("keygen -f did not write a new key: %v", err)
	}
}

func TestKeygenStdout(t *testing.T) {
	code, stdout, stderr := runCmd(t, "keygen", "-o", "-")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasSuffix(stdout, "\n") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("stdout %q is not one line", stdout)
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(stdout, "\n"))
	if err != nil || len(key) != config.KeySize {
		t.Fatalf("stdout %q: %d bytes, %v", stdout, len(key), err)
	}
}

func TestKeygenUsage(t *testing.T) {
	for _, args := range [][]string{{"keygen"}, {"keygen", "-o", "x", "extra"}} {
		if code, _, stderr := runCmd(t, args...); code != 2 || !strings.Contains(stderr, "usage: offload keygen") {
			t.Errorf("%q: exit %d: %s", args, code, stderr)
		}
	}
}

// TestKeygenFingerprint: keygen -o prints the new key's fingerprint and
// -fingerprint the same for the file, and neither prints the key.
func TestKeygenFingerprint(t *testing.T) {
	p := filepath.Join(t.TempDir(), "offload.key")
	code, made, stderr := runCmd(t, "keygen", "-o", p)
	if code != 0 {
		t.Fatalf("keygen: exit %d: %s", code, stderr)
	}
	key, err := config.LoadKey(p)
	if err != nil {
		t.Fatal(err)
	}
	want := config.KeyFingerprint(key) + "\n"
	if made != want {
		t.Fatalf("keygen -o printed %q, want the fingerprint %q", made, want)
	}
	code, shown, stderr := runCmd(t, "keygen", "-fingerprint", p)
	if code != 0 || shown != want {
		t.Fatalf("keygen -fingerprint: exit %d, %q (want %q): %s", code, shown, want, stderr)
	}
	enc := strings.TrimSpace(string(config.EncodeKey(key)))
	if strings.Contains(made+shown+stderr, enc) || strings.Contains(made+shown+stderr, enc[:12]) {
		t.Fatal("keygen printed the key")
	}
	if code, _, _ := runCmd(t, "keygen", "-fingerprint", p, "-o", p); code != 2 {
		t.Fatalf("-o with -fingerprint: exit %d, want 2 (usage)", code)
	}
	if code, _, stderr := runCmd(t, "keygen", "-fingerprint", filepath.Join(t.TempDir(), "none")); code != 1 || stderr == "" {
		t.Fatalf("-fingerprint of a missing file: exit %d: %s", code, stderr)
	}
}
