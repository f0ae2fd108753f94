//go:build !unix

package control

// withUmask: no umask here; Listen's chmod sets the mode.
func withUmask(_ int, f func()) { f() }
