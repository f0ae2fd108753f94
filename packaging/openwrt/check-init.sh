#!/bin/sh
# Runs start_service of offload.init (the procd script) with stand-ins for
# OpenWrt's config_* functions (reading a UCI file written here) and
# procd_* functions (printing each call), and checks the instance it would
# start for several /etc/config/offload settings. Run it with the shell
# OpenWrt has:  busybox sh packaging/openwrt/check-init.sh
set -eu
here=$(cd "$(dirname "$0")" && pwd)
init="$here/offload/files/offload.init"
shipped="$here/offload/files/offload.config"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
uci="$tmp/offload"

# config_get VAR SECTION OPTION [DEFAULT], for the one section of $uci.
config_load() { [ "$1" = offload ] || { echo "config_load $1" >&2; return 1; }; }
config_get() {
	_v=$(sed -n "s/^[[:space:]]*option $3 '\(.*\)'\$/\1/p" "$uci" | tail -n 1)
	grep -Eq "^[[:space:]]*option $3 " "$uci" || _v=${4-}
	eval "$1=\$_v"
}
config_get_bool() {
	config_get "$@"
	eval "_v=\$$1"
	case $_v in 1 | on | true | yes | enabled) eval "$1=1" ;; *) eval "$1=0" ;; esac
}
procd_open_instance() { echo "open $*"; }
procd_set_param() { echo "param $*"; }
procd_close_instance() { echo "close"; }
procd_add_reload_trigger() { echo "trigger $*"; }

# shellcheck source-path=SCRIPTDIR source=offload/files/offload.init
. "$init"

failed=0
# check NAME WANT_STATUS WANT_OUTPUT: start_service with $uci as it is now.
check() {
	set +e
	got=$(start_service 2>"$tmp/err")
	status=$?
	set -e
	if [ "$status" -ne "$2" ] || [ "$got" != "$3" ]; then
		printf 'check-init: %s: status %s, want %s\n--- got:\n%s\n--- want:\n%s\n--- stderr:\n%s\n' \
			"$1" "$status" "$2" "$got" "$3" "$(cat "$tmp/err")" >&2
		failed=1
	else
		echo "ok  $1"
	fi
}

instance() { # ROLE CONFIG [GOMEMLIMIT]
	echo "open $1"
	echo "param command /usr/bin/offload $1 -c $2"
	[ -z "${3-}" ] || echo "param env GOMEMLIMIT=$3"
	echo "param respawn 3600 5 5"
	echo "param limits nofile=4096 4096"
	echo "param stdout 1"
	echo "param stderr 1"
	echo "param file $2 /etc/config/offload"
	echo "param term_timeout 15"
	echo "close"
}

cp "$shipped" "$uci"
check "as shipped (disabled): nothing starts" 0 ""

sed "s/option enabled '0'/option enabled '1'/" "$shipped" >"$uci"
check "enabled server" 0 "$(instance server /etc/offload/server.yaml 16MiB)"

sed -e "s/option enabled '0'/option enabled '1'/" -e "s/option role 'server'/option role 'client'/" \
	-e "s/option memory_limit '16MiB'/option memory_limit ''/" "$shipped" >"$uci"
check "enabled client, no memory limit" 0 "$(instance client /etc/offload/client.yaml)"

sed -e "s/option enabled '0'/option enabled '1'/" -e "s/option role 'server'/option role 'client'/" \
	-e "s|#option config .*|option config '/mnt/usb/c.yaml'|" "$shipped" >"$uci"
check "client with its own config path" 0 "$(instance client /mnt/usb/c.yaml 16MiB)"

sed -e "s/option enabled '0'/option enabled '1'/" -e "s/option role 'server'/option role 'relay'/" "$shipped" >"$uci"
check "unknown role refused" 1 ""

[ "$failed" -eq 0 ] || exit 1
echo "check-init: start_service starts what /etc/config/offload says"
