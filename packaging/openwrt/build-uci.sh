#!/usr/bin/env bash
# Builds OpenWrt's uci command line tool and the libubox it links against
# from the fixture tarballs in third_party/openwrt/ (README.md there says
# what they are), for the packaging checks: the init script meets the real
# uci and the real config_* shell functions. Prints the install prefix:
#   PREFIX/bin/uci, PREFIX/lib (LD_LIBRARY_PATH), PREFIX/share/uci.sh
# (the config_get/config_foreach/... functions from uci's sh/uci.sh).
#
# A build is kept in the cache, keyed by the tarballs' checksums, so a
# second run costs nothing. Needs cmake, make, gcc, pkg-config and
# libjson-c-dev (scripts/deps.sh installs them).
#
# Environment:
#   OFFLOAD_UCI_CACHE  the cache folder (default ~/.cache/offload-uci)
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
src="$repo/third_party/openwrt"
cache=${OFFLOAD_UCI_CACHE:-$HOME/.cache/offload-uci}

tarball() { # NAME: the one fixture tarball of NAME
	local f
	for f in "$src"/openwrt-"$1"-*.tar.gz; do
		[ -f "$f" ] && { echo "$f"; return 0; }
	done
	echo "build-uci: no openwrt-$1-*.tar.gz in $src" >&2
	return 1
}
ubox=$(tarball libubox)
uci=$(tarball uci)
key=$(cat "$ubox" "$uci" "$0" | sha256sum | cut -c1-16)
prefix="$cache/$key"
if [ -x "$prefix/bin/uci" ] && [ -f "$prefix/share/uci.sh" ]; then
	echo "$prefix"
	exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/offload-uci.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar xzf "$ubox" -C "$work"
tar xzf "$uci" -C "$work"
ubox_dir=$(echo "$work"/libubox-*)
uci_dir=$(echo "$work"/uci-*)
stage="$work/inst"
# Quiet unless it fails: the output of a failed step is printed whole.
run() {
	"$@" >"$work/log" 2>&1 || {
		cat "$work/log" >&2
		echo "build-uci: failed: $*" >&2
		return 1
	}
}
echo "build-uci: building $(basename "$ubox") and $(basename "$uci") into $prefix" >&2
run cmake -S "$ubox_dir" -B "$ubox_dir/b" -DBUILD_LUA=OFF -DBUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="$stage"
run make -C "$ubox_dir/b" -j2 install
run cmake -S "$uci_dir" -B "$uci_dir/b" -DBUILD_LUA=OFF -DBUILD_TESTS=OFF -DCMAKE_PREFIX_PATH="$stage" \
	-Dubox_include_dir="$stage/include" -DCMAKE_INSTALL_PREFIX="$stage" \
	-DCMAKE_INSTALL_RPATH="$prefix/lib" -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
run make -C "$uci_dir/b" -j2 install
mkdir -p "$stage/share"
cp "$uci_dir/sh/uci.sh" "$stage/share/uci.sh"
# Move the finished tree in place at once, so that an interrupted build
# is never taken for a done one.
mkdir -p "$cache"
rm -rf "$prefix"
mv "$stage" "$prefix"
# It runs from there (its RPATH names the cache folder).
"$prefix/bin/uci" -c "$work" show >/dev/null
echo "$prefix"
