//go:build unix

package control

import (
	"fmt"
	"os"
	"syscall"
)

// checkOwner: the directory is root's or this user's.
func checkOwner(fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := uint32(os.Geteuid()); !uidAllowed(st.Uid, uid) {
		return fmt.Errorf("%s belongs to uid %d, not to this user (%d) or root", fi.Name(), st.Uid, uid)
	}
	return nil
}
