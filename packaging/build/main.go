// Command build makes offload's OpenWrt packages from this tree:
//
//	go run ./packaging/build -o dist/
//
// For each OpenWrt target (mipsel_24kc, mips_24kc,
// arm_cortex-a7_neon-vfpv4, aarch64_cortex-a53, x86_64) it builds
// cmd/offload (CGO_ENABLED=0 and internal/buildflags: -trimpath, -ldflags
// '-s -w -X main.buildVersion=<git describe>', no inlining in the cold
// packages; harness/budget measures the same build) and packs it with the procd init
// script, /etc/config/offload (a conffile), the fw4 rule helper and its
// uci-defaults script (packaging/openwrt/offload/files, the one source of
// each) into
//
//	dist/TARGET/offload_VERSION_TARGET.ipk   opkg, OpenWrt 24.10
//	dist/TARGET/offload-VERSION.apk          apk-tools v3, OpenWrt 25.12
//
// with luci-app-offload, the LuCI pages (packaging/openwrt/luci-app-offload,
// with the Settings page's schema made from the init script), for every
// target:
//
//	dist/all/luci-app-offload_VERSION_all.ipk
//	dist/noarch/luci-app-offload-VERSION.apk
//
// and writes the source of the feed package: dist/offload-VERSION.tar.gz
// (the tree's tracked files as they are in the work tree), its sha256, and
// dist/feed/net/offload/Makefile, which builds that tarball in an OpenWrt
// SDK (docs/routers.md).
//
// The same tree gives the same bytes: every archive entry has the commit's
// time, uid/gid 0 and a sorted place, and nothing of the host goes in.
//
// The archive formats come from goreleaser/nfpm (ipk: the gzip'd tar of
// ./debian-binary, ./control.tar.gz and ./data.tar.gz that opkg reads;
// apk: the v2 layout, which apk-tools v3 installs). It is a main package of
// its own so that none of that reaches the router binary
// (internal/treecheck keeps it so).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	if err := build(ctx, o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "build: %v\n", err)
		return 1
	}
	return 0
}
