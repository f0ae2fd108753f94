//go:build !linux

package record

import "net"

// vecReader is readv_linux.go's; elsewhere a body and the next header are
// two reads.
type vecReader struct{}

func (*vecReader) init(net.Conn) {}

func (*vecReader) ok() bool { return false }

func (*vecReader) read(p, ahead []byte) (int, error) { panic("record: no readv here") }
