//go:build unix

package config

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// checkOwnerAndDirs applies the owner and directory rules of OpenPrivate to
// the file opened at path, whose FileInfo (from the open file) is fi.
func checkOwnerAndDirs(path string, fi os.FileInfo, what string) error {
	uid := uint32(os.Geteuid())
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s %s: rule owner: %w: no owner information", what, path, ErrKeyOwner)
	}
	if st.Uid != uid && st.Uid != 0 {
		return &sentinelError{fmt.Sprintf("%s %s: rule owner: it belongs to uid %d; it must belong to uid %d (the user offload runs as) or root (chown)", what, path, st.Uid, uid), ErrKeyOwner}
	}
	// Walk the real path, as OpenSSH's safe_path does: a symlink's target
	// is what can be replaced.
	real, err := filepath.EvalSymlinks(path)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("%s %s: rule directory: %w", what, path, err)
	}
	// The walk checks the file that was opened, not one put there since.
	if rfi, err := os.Stat(real); err != nil || !os.SameFile(fi, rfi) {
		return &sentinelError{fmt.Sprintf("%s %s: rule directory: %s changed while it was checked", what, path, real), ErrKeyDirectory}
	}
	if err := checkDirs(real, uid); err != nil {
		return &sentinelError{fmt.Sprintf("%s %s: rule directory: %v", what, path, err), ErrKeyDirectory}
	}
	// Unlike OpenSSH, the directories of a symlink count too: whoever can
	// replace the link chooses which file is the key.
	if abs, err := filepath.Abs(path); err == nil && abs != real {
		if err := checkDirs(abs, uid); err != nil {
			return &sentinelError{fmt.Sprintf("%s %s: rule directory: %v", what, path, err), ErrKeyDirectory}
		}
	}
	return nil
}

// checkDirs runs checkDir on every directory above the absolute path p.
func checkDirs(p string, uid uint32) error {
	for dir := filepath.Dir(p); ; dir = filepath.Dir(dir) {
		if err := checkDir(dir, uid); err != nil {
			return err
		}
		if dir == "/" || dir == "." {
			return nil
		}
	}
}

// checkDir says why dir lets someone other than uid or root replace what is
// in it, or returns nil.
func checkDir(dir string, uid uint32) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("directory %s: no owner information", dir)
	}
	if st.Uid != uid && st.Uid != 0 {
		return fmt.Errorf("directory %s belongs to uid %d; it must belong to uid %d (the user offload runs as) or root", dir, st.Uid, uid)
	}
	// A sticky directory (/tmp) lets others add entries but not rename or
	// remove ours.
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && fi.Mode()&os.ModeSticky == 0 {
		return fmt.Errorf("directory %s is mode %#o: group or others can write it and it is not sticky (chmod go-w)", dir, perm)
	}
	return nil
}
