//go:build !linux

package metrics

import "io"

// WriteProcess writes nothing off Linux: the process_* series come from
// /proc (process_linux.go), and offload's ends run on Linux; other
// systems build it for development only.
func WriteProcess(w io.Writer) {}
