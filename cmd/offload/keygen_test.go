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
