//go:build !linux

package wgcompare

import (
	"errors"
	"net"
)

// pumpZeroCopy needs Linux's MSG_ZEROCOPY (zerocopy_linux.go).
func pumpZeroCopy(dst, src net.Conn) (ZeroCopyStats, error) {
	return ZeroCopyStats{}, errors.New("zero-copy relay: MSG_ZEROCOPY is Linux's")
}

// setLowat is Linux's here (zerocopy_linux.go).
func setLowat(net.Conn, int) error {
	return errors.New("SO_RCVLOWAT: the sealed relay's full frames are Linux's")
}
