//go:build !linux

package testutil

import (
	"context"
	"errors"
	"net"
)

// errNetns is the answer of DialIn and ListenIn where there are no Linux
// network namespaces: the harnesses that use them (harness/anchor's two
// routers) run on Linux only, and the other cross-builds must still build.
var errNetns = errors.New("testutil: network namespaces are Linux's")

// DialIn is netns_linux.go's; here every dial fails.
func DialIn(nsPath string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(context.Context, string, string) (net.Conn, error) { return nil, errNetns }
}

// ListenIn is netns_linux.go's; here it fails.
func ListenIn(nsPath, network, addr string) (net.Listener, error) { return nil, errNetns }
