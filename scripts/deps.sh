#!/usr/bin/env bash
# Installs what offload's tests need and is not there yet; safe to run again.
#
#   Debian packages: qemu-system-x86 (+ qemu-system-arm, qemu-system-mips
#   and the dpkg architectures armhf, mipsel for the 32-bit guests, which
#   the VM harness takes kernels and busybox-static from), busybox-static,
#   qemu-user-static, iproute2, xz-utils, shellcheck and systemd (for
#   systemd-analyze verify), cmake, pkgconf and libjson-c-dev (OpenWrt's
#   uci and libubox for the packaging checks, packaging/openwrt/build-uci.sh),
#   meson, ninja-build, libssl-dev, zlib1g-dev and libcrypt-dev (OpenWrt's
#   opkg and apk-tools for the openwrt-pkg stage), chromium and openssl
#   (the luci stage),
#   prometheus (the prometheus stage; its service, which the package
#   starts, is stopped and disabled again), haproxy (the load-balancer test); for the cryptodev stage's module builds
#   (scripts/cryptodev-ko.sh) make, gcc and libelf1 (the kernel's build
#   tools), and Debian's cross compilers gcc-arm-linux-gnueabihf and
#   gcc-mipsel-linux-gnu for the 32-bit guests; curl, iperf3 and dnsutils
#   (dig) for the SOCKS5 and UDP tests; python3-cryptography for the
#   protocol-from-the-docs test; staticcheck (pinned) with
#   go install. The kernel headers are not installed: cryptodev-ko.sh
#   unpacks the VM kernel's own into the VM cache. The VM harness fetches
#   what goes into guests itself with apt-get download (kernels,
#   busybox-static, and wireguard-tools + libc6 for mipsel's router
#   anchor), so only the package lists must know them.
#
# As root, missing packages are installed with apt-get (apt-get update first,
# once, when the package lists are missing or stale). Not as root, it lists
# what is missing and fails, unless OFFLOAD_SKIP_VM=1 (then the VM and
# qemu-user stages are skipped by scripts/test.sh and only a warning is
# printed).
#
# Environment:
#   OFFLOAD_SKIP_VM=1        do not fail for missing VM/emulation packages
#   OFFLOAD_VM_ARCHES="..."  guest architectures to prepare (default:
#                            "amd64 arm mipsle", as scripts/test.sh)
set -euo pipefail

STATICCHECK_VERSION=v0.8.2 # staticcheck 2026.2.2

say() { printf 'deps: %s\n' "$*"; }

arches=${OFFLOAD_VM_ARCHES-amd64 arm mipsle}
packages=(qemu-system-x86 busybox-static qemu-user-static iproute2 xz-utils)
# harness/compare: the tools offload is measured beside (socat, ssh -L, spiped),
# and iperf3, its second load generator (-load iperf3).
packages+=(socat openssh-server openssh-client spiped iperf3)
# packaging checks: shellcheck (procd init script), systemd-analyze verify.
packages+=(shellcheck systemd)
# packaging checks: building OpenWrt's uci and libubox from third_party/openwrt.
packages+=(cmake pkgconf libjson-c-dev)
# openwrt-pkg stage: OpenWrt's opkg and apk-tools v3 (and uci) built from
# ../shared/third_party by build-openwrt-userland.sh; busybox-static (above)
# is the shell of the chroot that plays the router.
packages+=(meson ninja-build libssl-dev zlib1g-dev libcrypt-dev)
# luci stage: Debian's chromium, driven headless by chromedp (no browser
# download), and openssl (run-openwrt-luci.sh hashes the test password).
packages+=(chromium openssl)
# prometheus stage: Debian's Prometheus (prometheus, promtool) against a
# running server and client; only the binaries are used.
packages+=(prometheus)
# cmd/offload TestE2EHAProxy: two servers behind a real HAProxy (mode tcp,
# send-proxy-v2, health checks); it fails under CI=true without it. Only
# the binary is used: the test runs its own haproxy -db on loopback.
packages+=(haproxy)
# cryptodev stage: building cryptodev-linux against the VM kernels' headers.
packages+=(make gcc libelf1)
# tunnel tests: curl (SOCKS5), iperf3 -u and dig (UDP forwards); with
# CI=true those tests fail rather than skip when one is missing.
packages+=(curl iperf3 dnsutils)
# cmd/offload TestE2EProtocolFromDocs: a client written from
# docs/protocol.md in Python (testdata/refclient.py) takes its primitives
# from python3-cryptography; it fails under CI=true without it.
packages+=(python3 python3-cryptography)
foreign=()
for a in $arches; do
	case $a in
	amd64) ;;
	arm) packages+=(qemu-system-arm gcc-arm-linux-gnueabihf); foreign+=(armhf) ;;
	mipsle) packages+=(qemu-system-mips gcc-mipsel-linux-gnu); foreign+=(mipsel) ;;
	*) say "unknown architecture '$a' in OFFLOAD_VM_ARCHES (want amd64, arm, mipsle)"; exit 2 ;;
	esac
done

installed() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

missing=()
for p in "${packages[@]}"; do
	installed "$p" || missing+=("$p")
done
missing_arch=()
for fa in "${foreign[@]}"; do
	dpkg --print-foreign-architectures | grep -qx "$fa" || missing_arch+=("$fa")
done

# The VM harness asks apt which kernel package is current, so the package
# lists must exist even when nothing is missing.
lists_ok() {
	apt-cache show --no-all-versions linux-image-amd64 >/dev/null 2>&1 || return 1
	local fa
	for fa in "${foreign[@]}"; do
		apt-cache show --no-all-versions "busybox-static:$fa" >/dev/null 2>&1 || return 1
	done
	# The router anchor's guest takes wg from wireguard-tools:mipsel (with
	# libc6:mipsel), fetched by harness/vm -deb with apt-get download.
	case " ${foreign[*]} " in
	*" mipsel "*) apt-cache show --no-all-versions wireguard-tools:mipsel libc6:mipsel >/dev/null 2>&1 || return 1 ;;
	esac
}

apt_opts=(-y -q -o DPkg::Lock::Timeout=300 -o Acquire::Retries=3)

if [ "$(id -u)" -eq 0 ]; then
	for fa in "${missing_arch[@]}"; do
		say "dpkg --add-architecture $fa"
		dpkg --add-architecture "$fa"
	done
	if [ ${#missing_arch[@]} -gt 0 ] || ! lists_ok; then
		say "apt-get update"
		# A mirror in mid-sync fails one index now and then; the install
		# below says clearly if something we need is really not there.
		apt-get "${apt_opts[@]}" update ||
			{ sleep 5; apt-get "${apt_opts[@]}" update; } ||
			say "warning: apt-get update reported errors; going on with the lists it has"
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		say "installing ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install --no-install-recommends "${missing[@]}"
		# The package starts Prometheus on *:9090 where systemd runs; the
		# stage runs its own on loopback, so the service goes again.
		case " ${missing[*]} " in
		*" prometheus "*)
			if [ -d /run/systemd/system ]; then
				say "systemctl disable --now prometheus (installed for its binaries only)"
				systemctl disable --now prometheus || say "warning: could not stop the prometheus service"
			fi
			;;
		esac
	fi
elif [ ${#missing[@]} -gt 0 ] || [ ${#missing_arch[@]} -gt 0 ]; then
	msg="missing: ${missing[*]}"
	[ ${#missing_arch[@]} -gt 0 ] && msg="$msg; dpkg architectures: ${missing_arch[*]}"
	if [ "${OFFLOAD_SKIP_VM:-}" = 1 ]; then
		say "warning: $msg (not root; OFFLOAD_SKIP_VM=1, so VM and qemu-user stages will be skipped)"
	else
		say "$msg"
		say "run as root: sudo bash scripts/deps.sh (or set OFFLOAD_SKIP_VM=1 to test without the VM)"
		exit 1
	fi
fi

gobin=$(go env GOBIN)
[ -n "$gobin" ] || gobin="$(go env GOPATH)/bin"
want=${STATICCHECK_VERSION#v}
if [ -x "$gobin/staticcheck" ] && "$gobin/staticcheck" -version 2>/dev/null | grep -q "($want)"; then
	:
else
	say "go install honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
	go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

say "ok: ${packages[*]} staticcheck@$STATICCHECK_VERSION"
