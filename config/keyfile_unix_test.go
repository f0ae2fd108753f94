//go:build unix

package config

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// A FIFO as key or config file must be refused, not block the open.
func TestFIFONotRegular(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if _, err := LoadKey(p); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("LoadKey(fifo) = %v, want ErrNotRegular", err)
	}
	if _, err := Load(p); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("Load(fifo) = %v, want ErrNotRegular", err)
	}
}
