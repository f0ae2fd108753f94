//go:build unix

package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// Resolve the path one name at a time, checking every directory a
	// name is looked up in and every symlink on the way (walkPath): that
	// covers the real path, as OpenSSH's safe_path checks it, the path as
	// written, and the directories of links in between.
	real, err := walkPath(path, uid)
	if err != nil {
		return &sentinelError{fmt.Sprintf("%s %s: rule directory: %v", what, path, err), ErrKeyDirectory}
	}
	// The walk checked the file that was opened, not one put there since.
	if rfi, err := os.Stat(real); err != nil || !os.SameFile(fi, rfi) {
		return &sentinelError{fmt.Sprintf("%s %s: rule directory: %s changed while it was checked", what, path, real), ErrKeyDirectory}
	}
	return nil
}

// maxLinks bounds the symlinks walkPath follows (Linux's MAXSYMLINKS).
const maxLinks = 40

// walkPath resolves path as the kernel does, one name at a time, and
// returns the real path of what it names. Every directory it looks a name
// up in must pass checkDir, and every symlink it follows must belong to
// uid or root: whoever can replace a link, or an entry of a directory the
// lookup passes through, chooses the file. Stricter than OpenSSH, which
// checks only the directories of the real path: here the directories of
// the path as written and of every link in between count too.
func walkPath(path string, uid uint32) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	todo := strings.Split(abs, "/")
	cur, links := "/", 0
	if err := checkDir(cur, uid); err != nil {
		return "", err
	}
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// cur is a real path, so its parent is lexical; it was
			// checked on the way down.
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if links++; links > maxLinks {
				return "", fmt.Errorf("%s: more than %d symlinks", path, maxLinks)
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok || (st.Uid != uid && st.Uid != 0) {
				owner := "unknown"
				if ok {
					owner = fmt.Sprint(st.Uid)
				}
				return "", fmt.Errorf("symlink %s belongs to uid %s; it must belong to uid %d (the user offload runs as) or root", next, owner, uid)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		cur = next
		if len(todo) > 0 && fi.IsDir() {
			// A name is looked up in it next (or ".." leaves it, which
			// costs nothing to check).
			if err := checkDir(cur, uid); err != nil {
				return "", err
			}
		}
	}
	return cur, nil
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
