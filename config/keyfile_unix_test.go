//go:build unix

package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// safeDir returns a new directory that passes the directory rule: mode 0700
// under t.TempDir (itself under the sticky /tmp or $TMPDIR).
func safeDir(t *testing.T) string {
	t.Helper()
	d := filepath.Join(t.TempDir(), "safe")
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkDir(filepath.Dir(d), uint32(os.Geteuid())); err != nil {
		t.Skipf("the test's temporary directory fails the directory rule itself: %v", err)
	}
	return d
}

func writeKey(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "offload.key")
	if err := os.WriteFile(p, EncodeKey(testKey()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// otherUID is a user that is neither root nor the test's user.
const otherUID = 54321

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("chown to another user needs root")
	}
}

// TestLoadKeyOwner: a key file owned by another user is refused with the
// owner rule; one owned by the running user or root is accepted.
func TestLoadKeyOwner(t *testing.T) {
	p := writeKey(t, safeDir(t))
	if _, err := LoadKey(p); err != nil {
		t.Fatalf("own key file: %v", err)
	}
	needRoot(t)
	if err := os.Chown(p, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKey(p)
	if !errors.Is(err, ErrKeyOwner) {
		t.Fatalf("key file of uid %d: %v, want ErrKeyOwner", otherUID, err)
	}
	for _, want := range []string{p, "rule owner", "belongs to uid 54321"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// TestLoadKeyDirectory: every directory up to / must be writable only by
// its owner (the running user or root), except a sticky one.
func TestLoadKeyDirectory(t *testing.T) {
	tests := []struct {
		name  string
		mode  os.FileMode // of the key's directory
		owner int         // -1: leave as created
		want  error       // nil: accepted
	}{
		{"0700", 0o700, -1, nil},
		{"0755", 0o755, -1, nil},
		{"group writable", 0o770, -1, ErrKeyDirectory},
		{"world writable", 0o777, -1, ErrKeyDirectory},
		{"sticky world writable", 0o777 | os.ModeSticky, -1, nil},
		{"root sticky", 0o777 | os.ModeSticky, 0, nil},
		{"other user", 0o755, otherUID, ErrKeyDirectory},
		{"other user sticky", 0o777 | os.ModeSticky, otherUID, ErrKeyDirectory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.owner >= 0 {
				needRoot(t)
			}
			d := safeDir(t)
			p := writeKey(t, d)
			if err := os.Chmod(d, tt.mode); err != nil {
				t.Fatal(err)
			}
			if tt.owner >= 0 {
				if err := os.Chown(d, tt.owner, tt.owner); err != nil {
					t.Fatal(err)
				}
			}
			_, err := LoadKey(p)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("LoadKey: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("LoadKey: %v, want %v", err, tt.want)
			}
			for _, want := range []string{"rule directory", "directory " + d + " "} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
	// A grandparent counts as much as the parent.
	t.Run("grandparent", func(t *testing.T) {
		d := safeDir(t)
		sub := filepath.Join(d, "sub")
		if err := os.Mkdir(sub, 0o700); err != nil {
			t.Fatal(err)
		}
		p := writeKey(t, sub)
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKey(p); !errors.Is(err, ErrKeyDirectory) || !strings.Contains(err.Error(), "directory "+d+" ") {
			t.Fatalf("LoadKey: %v, want ErrKeyDirectory naming %s", err, d)
		}
	})
}

// TestLoadKeySymlink: the rules apply to where a symlink leads.
func TestLoadKeySymlink(t *testing.T) {
	safe := safeDir(t)
	open := safeDir(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	// A link in a safe directory to a key in an open one is refused.
	p := writeKey(t, open)
	link := filepath.Join(safe, "link.key")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(link); !errors.Is(err, ErrKeyDirectory) || !strings.Contains(err.Error(), open) {
		t.Fatalf("link to a key in %s: %v, want ErrKeyDirectory naming it", open, err)
	}
	// A link in an open directory to a key in a safe one is refused too:
	// whoever can replace the link picks the key (OpenSSH looks only at
	// the real path here).
	p2 := writeKey(t, safe)
	link2 := filepath.Join(open, "link2.key")
	if err := os.Symlink(p2, link2); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(link2); !errors.Is(err, ErrKeyDirectory) || !strings.Contains(err.Error(), open) {
		t.Fatalf("link in %s: %v, want ErrKeyDirectory naming it", open, err)
	}
	// A link in a safe directory to a key in a safe one is fine.
	link3 := filepath.Join(safe, "link3.key")
	if err := os.Symlink(p2, link3); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(link3); err != nil {
		t.Fatalf("link in a safe directory: %v", err)
	}
}

// TestLoadKeySymlinkChain: every directory a lookup happens in counts,
// including those of the links in between. A link in a safe directory to
// a link in an open one, which leads back to a key in a safe directory,
// passes both the real path and the path as written; whoever can write
// the open directory replaces the middle link and picks the key.
func TestLoadKeySymlinkChain(t *testing.T) {
	safe := safeDir(t)
	open := safeDir(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	p := writeKey(t, safe)
	mid := filepath.Join(open, "mid")
	if err := os.Symlink(p, mid); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(safe, "link.key")
	if err := os.Symlink(mid, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(link); !errors.Is(err, ErrKeyDirectory) || !strings.Contains(err.Error(), "directory "+open+" ") {
		t.Fatalf("file link: %v, want ErrKeyDirectory naming %s", err, open)
	}
	// The same with a directory link: safe/d -> open/dl -> safe/real/.
	real := filepath.Join(safe, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	writeKey(t, real)
	dl := filepath.Join(open, "dl")
	if err := os.Symlink(real, dl); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(safe, "d")
	if err := os.Symlink(dl, d); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(filepath.Join(d, "offload.key")); !errors.Is(err, ErrKeyDirectory) || !strings.Contains(err.Error(), "directory "+open+" ") {
		t.Fatalf("directory link: %v, want ErrKeyDirectory naming %s", err, open)
	}
	// Relative links that stay in safe directories are fine.
	if err := os.Symlink("real/offload.key", filepath.Join(safe, "rel.key")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(filepath.Join(safe, "rel.key")); err != nil {
		t.Fatalf("relative link in a safe directory: %v", err)
	}
	// A link loop is an error, not a hang.
	loop := filepath.Join(safe, "loop")
	if err := os.Symlink(loop, loop); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(loop); err == nil {
		t.Fatal("a link loop was accepted")
	}
}

// TestLoadKeySymlinkOwner: a link another user made in a sticky directory
// (/tmp) is theirs to point anywhere, though the sticky bit keeps files
// safe; the kernel's protected_symlinks may be off. It is refused, naming
// the link and its owner.
func TestLoadKeySymlinkOwner(t *testing.T) {
	needRoot(t)
	sticky := safeDir(t)
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	p := writeKey(t, safeDir(t))
	link := filepath.Join(sticky, "link.key")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(link); err != nil {
		t.Fatalf("own link in a sticky directory: %v", err)
	}
	if err := os.Lchown(link, otherUID, otherUID); err != nil {
		t.Fatal(err)
	}
	_, err := LoadKey(link)
	if !errors.Is(err, ErrKeyDirectory) {
		t.Fatalf("link of uid %d: %v, want ErrKeyDirectory", otherUID, err)
	}
	for _, want := range []string{"rule directory", "symlink " + link, "uid 54321"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}
