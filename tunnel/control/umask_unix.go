//go:build unix

package control

import "syscall"

// withUmask runs f under umask mask, then restores the old one.
func withUmask(mask int, f func()) {
	old := syscall.Umask(mask)
	defer syscall.Umask(old)
	f()
}
