#!/usr/bin/env bash
# Builds the cryptodev-linux module (/dev/crypto) for the kernel that the VM
# harness boots, and prints the path of the .ko:
#
#   bash scripts/cryptodev-ko.sh ARCH      (ARCH: amd64, arm, mipsle)
#
# cryptodev-linux is a test fixture, not part of offload (GPL-2.0; Debian
# does not package it). Its source is the git-archive tarball
# cryptodev-linux-*.tar.gz in $OFFLOAD_THIRD_PARTY (default: third_party/cryptodev-linux
# in the repository; see its README.md). Without it this script prints
# why on stderr and exits 3, which scripts/test.sh turns into a skip.
#
# The kernel is the one harness/vm picks: the linux-image package that
# apt-cache depends names for the architecture's meta package
# (linux-image-amd64, linux-image-armmp:armhf, linux-image-4kc-malta:mipsel).
# The matching linux-headers package, its -common package and the host's
# linux-kbuild are fetched with apt-get download and unpacked into the VM
# cache ($OFFLOAD_VM_CACHE, default ~/.cache/offload-vm) without installing
# anything: a foreign-architecture headers package cannot be installed
# beside the host's compiler (it wants gcc-12 of its own architecture).
# The 32-bit modules are cross-built with Debian's cross compilers
# (gcc-arm-linux-gnueabihf, gcc-mipsel-linux-gnu; scripts/deps.sh). The .ko
# is cached there too, keyed by tarball and kernel release.
#
# APT_CONFIG (scripts/apt-suite.sh) selects another suite's kernel, as for
# harness/vm. When the headers name a compiler the host lacks (Debian sid's
# 7.2 headers want gcc-16; bookworm has gcc-12, which does not know the
# flags in the 7.2 configuration), the amd64 module is built in a toolchain
# root of that suite: gcc-N, make, dwarves and a shell, resolved by apt-get
# install --download-only against an empty dpkg status, unpacked with
# dpkg-deb -x into the cache, entered with chroot inside a private mount
# namespace (unshare) that sees the headers tree and the build folder at
# their host paths. Nothing is installed on the host. This needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'cryptodev-ko: %s\n' "$*" >&2; }

arch=${1:?usage: cryptodev-ko.sh amd64|arm|mipsle}
case $arch in
amd64) debarch=amd64 meta=linux-image-amd64 karch=x86 cross="" ;;
arm) debarch=armhf meta=linux-image-armmp karch=arm cross=arm-linux-gnueabihf- ;;
mipsle) debarch=mipsel meta=linux-image-4kc-malta karch=mips cross=mipsel-linux-gnu- ;;
*) say "unknown architecture '$arch' (want amd64, arm, mipsle)"; exit 2 ;;
esac

third=${OFFLOAD_THIRD_PARTY:-third_party/cryptodev-linux}
shopt -s nullglob
tarballs=("$third"/cryptodev-linux-*.tar.gz)
shopt -u nullglob
if [ ${#tarballs[@]} -ne 1 ]; then
	say "no single cryptodev-linux-*.tar.gz in $third (found ${#tarballs[@]}); set OFFLOAD_THIRD_PARTY to the folder that holds it"
	exit 3
fi
tarball=${tarballs[0]}
src=$(basename "$tarball" .tar.gz)

# The same question harness/vm asks (kernel.go, kernelPackage).
image=$(apt-cache depends "$meta:$debarch" 2>/dev/null |
	sed -n 's/^ *Depends: <\{0,1\}\(linux-image-[^:> ]*\).*/\1/p' | grep -vx "$meta" | head -n1) || true
if [ -z "$image" ]; then
	say "apt-cache depends $meta:$debarch names no linux-image package (run scripts/deps.sh to update the package lists)"
	exit 1
fi
release=${image#linux-image-}
headers=linux-headers-$release

cache=${OFFLOAD_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/offload-vm}
sum=$(sha256sum "$tarball" | cut -c1-12)
ko="$cache/$debarch/cryptodev/$src-$sum-$release.ko"
if [ -s "$ko" ]; then
	say "cached $ko"
	echo "$ko"
	exit 0
fi

# deps NAME: the package names of NAME's Depends lines (first alternative).
deps() {
	apt-cache depends "$1" | sed -n 's/^ *Depends: <\{0,1\}\([^:> ]*\).*/\1/p'
}
common=$(deps "$headers:$debarch" | grep -- '-common$' | head -n1) || true
kbuild=$(deps "$headers:$debarch" | grep '^linux-kbuild-' | head -n1) || true
if [ -z "$common" ] || [ -z "$kbuild" ]; then
	say "apt-cache depends $headers:$debarch names no -common or linux-kbuild package"
	exit 1
fi

# The headers tree: the flavour's headers with the -common tree beside
# them and the host's kbuild tools (Multi-Arch: foreign) where their
# relative links point. Unpacked once into a temporary folder, then renamed.
tree="$cache/$debarch/$headers"
if [ ! -d "$tree/root" ]; then
	mkdir -p "$cache/$debarch"
	tmp=$(mktemp -d "$cache/$debarch/.headers-XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	say "downloading $headers:$debarch $common $kbuild"
	(cd "$tmp" && apt-get download -q "$headers:$debarch" "$common" "$kbuild" >/dev/null 2>"$tmp/apt.err") || {
		cat "$tmp/apt.err" >&2
		exit 1
	}
	for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
	rm -f "$tmp"/*.deb
	# The flavour's Makefile includes the -common Makefile by absolute path.
	sed -i "s#/usr/src/#$tree/root/usr/src/#" "$tmp/root/usr/src/$headers/Makefile"
	mv "$tmp" "$tree" 2>/dev/null || [ -d "$tree/root" ]
	rm -rf "$tmp"
	trap - EXIT
fi
kdir="$tree/root/usr/src/$headers"
[ -f "$kdir/Makefile" ] || { say "$kdir: no Makefile"; exit 1; }

if [ -n "$cross" ] && ! command -v "${cross}gcc-12" >/dev/null; then
	say "${cross}gcc-12 not found (scripts/deps.sh installs gcc-${cross%-})"
	exit 1
fi

# The compiler the kernel was built with, from the headers' own variables
# (CC = ... $(CROSS_COMPILE)gcc-12).
gccv=$(sed -n 's/^CC = .*gcc-\([0-9][0-9]*\).*/\1/p' "$kdir/.kernelvariables" 2>/dev/null | head -n1)
gccv=${gccv:-12}
hostcc="${cross:-x86_64-linux-gnu-}gcc-$gccv"

# toolchain_root prints a root with gcc-$gccv from the apt suite in use.
toolchain_root() {
	local tc="$cache/$debarch/toolchain-gcc-$gccv" tmp
	if [ ! -x "$tc/root/usr/bin/gcc-$gccv" ]; then
		mkdir -p "$cache/$debarch"
		tmp=$(mktemp -d "$cache/$debarch/.toolchain-XXXXXX")
		mkdir -p "$tmp/archives/partial" "$tmp/root"
		say "downloading gcc-$gccv and its build tools (a toolchain root; nothing is installed)"
		if ! apt-get install --download-only -y -q -o Dir::State::status=/dev/null \
			-o Dir::Cache::archives="$tmp/archives" \
			"gcc-$gccv" make dwarves libelf1t64 dash bash coreutils sed grep mawk findutils diffutils \
			>"$tmp/apt.log" 2>&1; then
			cat "$tmp/apt.log" >&2
			rm -rf "$tmp"
			return 1
		fi
		for deb in "$tmp"/archives/*.deb; do dpkg-deb -x "$deb" "$tmp/root"; done
		rm -rf "$tmp/archives"
		# Links that maintainer scripts would make (sh -> dash in newer dash).
		[ -e "$tmp/root/usr/bin/sh" ] || ln -s dash "$tmp/root/usr/bin/sh"
		[ -e "$tmp/root/usr/bin/awk" ] || ln -s mawk "$tmp/root/usr/bin/awk"
		rm -rf "$tc"
		mv "$tmp" "$tc" 2>/dev/null || [ -x "$tc/root/usr/bin/gcc-$gccv" ]
		rm -rf "$tmp"
	fi
	echo "$tc/root"
}

build=$(mktemp -d "${TMPDIR:-/tmp}/cryptodev-ko.XXXXXX")
trap 'rm -rf "$build"' EXIT
tar xzf "$tarball" -C "$build"
makeargs=(-s -C "$build/$src" KERNEL_DIR="$kdir" ARCH="$karch" CROSS_COMPILE="$cross" -j"$(nproc)")
if command -v "$hostcc" >/dev/null || [ -n "$cross" ]; then
	if ! command -v "$hostcc" >/dev/null; then
		say "$hostcc not found (scripts/deps.sh installs gcc-${cross%-})"
		exit 1
	fi
	say "make -C $src KERNEL_DIR=$kdir ARCH=$karch CROSS_COMPILE=$cross ($release)"
	make "${makeargs[@]}" >"$build/make.log" 2>&1 || status=$?
else
	if [ "$(id -u)" -ne 0 ]; then
		say "$release wants $hostcc, which this host lacks; building in a gcc-$gccv root of its suite needs root (chroot, unshare)"
		exit 1
	fi
	root=$(toolchain_root) || { say "no gcc-$gccv toolchain root for $release"; exit 1; }
	say "make -C $src KERNEL_DIR=$kdir ARCH=$karch in the gcc-$gccv root $root ($release)"
	mkdir -p "$root$tree" "$root$build"
	# A private mount namespace: the binds and /proc (objtool reads it) go
	# away with the build. The inner script takes its paths as arguments.
	# shellcheck disable=SC2016
	unshare --mount --fork /bin/sh -c '
		root=$1 tree=$2 build=$3; shift 3
		mount --make-rprivate / &&
		mount --bind "$tree" "$root$tree" &&
		mount --bind "$build" "$root$build" &&
		mount -t proc proc "$root/proc" &&
		exec chroot "$root" /usr/bin/env PATH=/usr/bin:/usr/sbin make "$@"' \
		sh "$root" "$tree" "$build" "${makeargs[@]}" >"$build/make.log" 2>&1 || status=$?
fi
if [ "${status:-0}" -ne 0 ]; then
	cat "$build/make.log" >&2
	say "build failed against $kdir"
	exit 1
fi
mkdir -p "$(dirname "$ko")"
cp "$build/$src/cryptodev.ko" "$ko.tmp$$"
mv "$ko.tmp$$" "$ko"
say "built $ko"
echo "$ko"
