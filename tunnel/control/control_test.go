package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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

// A directory others may write, or another user's, is refused: whoever
// could swap the socket there could answer offload status in the end's
// place.
func TestListenRefusesOpenDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(filepath.Join(dir, "end.sock")); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a directory of mode 0777: %v", err)
	}
	if os.Geteuid() != 0 {
		return
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(filepath.Join(dir, "end.sock")); err == nil || !strings.Contains(err.Error(), "belongs to uid 65534") {
		t.Errorf("another user's directory: %v", err)
	}
}

// askAsEnv names the socket TestAskAsOtherUser's child asks.
const askAsEnv = "OFFLOAD_CONTROL_TEST_ASK"

// TestAskAsOtherUser (as root): another user (nobody) cannot ask the end:
// the socket's mode keeps it out (the kernel refuses the connect), and
// with the mode loosened by hand the end's peer check (SO_PEERCRED)
// closes the connection unanswered. The child is this test binary, run
// as nobody.
func TestAskAsOtherUser(t *testing.T) {
	if path := os.Getenv(askAsEnv); path != "" {
		// The child: print what the end answered.
		b, err := Ask(context.Background(), path, "status")
		fmt.Printf("answer %q err %v\n", b, err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs a child as another user")
	}
	dir, err := os.MkdirTemp("", "offload-control-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // nobody may reach the socket, not open it
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "control.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "end.sock")
	_, stop := serve(t, path, map[string]Handler{"status": func() (any, error) { return "secret", nil }})
	defer stop()
	askAs := func() string {
		cmd := exec.Command(bin, "-test.run=^TestAskAsOtherUser$")
		cmd.Env = append(os.Environ(), askAsEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := askAs(); !strings.Contains(out, "permission denied") || strings.Contains(out, "secret") {
		t.Errorf("nobody, socket mode 0600: %s; want the connect refused", out)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if out := askAs(); !strings.Contains(out, "no answer") || strings.Contains(out, "secret") {
		t.Errorf("nobody, socket mode loosened to 0666: %s; want the end's peer check to close it unanswered", out)
	}
	if b, err := Ask(context.Background(), path, "status"); err != nil || string(b) != `"secret"` {
		t.Errorf("root: %q, %v", b, err)
	}
}
