package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/offload-dev/offload/harness/wgcompare"
)

// -baseline takes a binary as it is, under the guest name the *-base
// paths run; a revision git does not know is an error that says so.
func TestBuildBaseline(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "prebuilt")
	if err := os.WriteFile(bin, []byte("\x7fELF a mipsle offload"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := buildBaseline(context.Background(), bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if filepath.Base(out) != wgcompare.Baseline || err != nil || !bytes.Equal(got, []byte("\x7fELF a mipsle offload")) {
		t.Fatalf("baseline %s: %q, %v", out, got, err)
	}
	if st, _ := os.Stat(out); st.Mode()&0o111 == 0 {
		t.Errorf("baseline %s is not executable (%v)", out, st.Mode())
	}
	if _, err := buildBaseline(context.Background(), "no-such-revision-here", dir); err == nil || !strings.Contains(err.Error(), "git archive") {
		t.Errorf("an unknown revision: %v, want git archive's failure", err)
	}
}
