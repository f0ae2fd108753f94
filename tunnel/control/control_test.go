package control

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func serve(t *testing.T, path string, h map[string]Handler) (*Listener, func()) {
	t.Helper()
	l, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, h) }()
	return l, func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

// A command is answered with its JSON; an unknown one with an error; the
// socket is mode 0600 and goes away when Serve ends.
func TestAskAndMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "end.sock")
	l, stop := serve(t, path, map[string]Handler{
		"status": func() (any, error) { return map[string]int{"links": 1}, nil },
		"broken": func() (any, error) { return nil, errors.New("no\nway") },
	})
	fi, err := os.Stat(l.Path())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket of mode 0600 (only its user and root)", fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != uint32(os.Geteuid()) {
		t.Errorf("socket owned by uid %d, want the end's %d", st.Uid, os.Geteuid())
	}
	body, err := Ask(context.Background(), path, "status")
	if err != nil || string(body) != `{"links":1}` {
		t.Fatalf("status: %q, %v", body, err)
	}
	if _, err := Ask(context.Background(), path, "nope"); err == nil || !strings.Contains(err.Error(), `unknown command "nope"`) {
		t.Errorf("unknown command: %v", err)
	}
	if _, err := Ask(context.Background(), path, "broken"); err == nil || !strings.Contains(err.Error(), "no way") {
		t.Errorf("failing handler: %v", err)
	}
	stop()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Serve ended: %v", err)
	}
}

// Only root and the end's user pass the peer check.
func TestUIDAllowed(t *testing.T) {
	for _, tc := range []struct {
		peer, self uint32
		ok         bool
	}{{0, 1000, true}, {1000, 1000, true}, {1001, 1000, false}, {0, 0, true}, {1000, 0, false}} {
		if got := uidAllowed(tc.peer, tc.self); got != tc.ok {
			t.Errorf("peer %d, end %d: %v, want %v", tc.peer, tc.self, got, tc.ok)
		}
	}
}

// A socket file left by a killed end (no process behind it) is replaced;
// one a running end serves is refused with ErrInUse; a file that is not a
// socket is left alone and named.
func TestStaleAndInUse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "end.sock")
	// A killed end's socket: bound, then the process gone. Without
	// unlink on close, the file stays as a killed process leaves it.
	dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false)
	_ = dead.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	_, stop := serve(t, path, map[string]Handler{"status": func() (any, error) { return 1, nil }})
	defer stop()
	if b, err := Ask(context.Background(), path, "status"); err != nil || string(b) != "1" {
		t.Fatalf("after replacing a stale socket: %q, %v", b, err)
	}
	if _, err := Listen(path); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), path) {
		t.Fatalf("second end on the same socket: %v; want ErrInUse naming %s", err, path)
	}
	if b, err := Ask(context.Background(), path, "status"); err != nil || string(b) != "1" {
		t.Fatalf("the first end after a second was refused: %q, %v", b, err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(plain); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a plain file: %v", err)
	}
}

// The default path follows the end's user: systemd's RUNTIME_DIRECTORY
// first, /var/run/offload for root, else the user's runtime directory.
func TestDefaultPath(t *testing.T) {
	t.Setenv("RUNTIME_DIRECTORY", "/run/offload:/run/other")
	if got := DefaultPath("server-1"); got != "/run/offload/server-1.sock" {
		t.Errorf("with RUNTIME_DIRECTORY: %s", got)
	}
	t.Setenv("RUNTIME_DIRECTORY", "")
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	want := "/run/user/1000/offload/server-1.sock"
	if os.Geteuid() == 0 {
		want = "/var/run/offload/server-1.sock"
	}
	if got := DefaultPath("server-1"); got != want {
		t.Errorf("DefaultPath = %s, want %s", got, want)
	}
}
