#!/bin/sh
# Checks the procd init script (offload.init) the way OpenWrt runs it, with
# the shell OpenWrt has:
#   busybox sh packaging/openwrt/check-init.sh UCI_PREFIX OFFLOAD_BINARY
# OFFLOAD_CHECK_INIT and OFFLOAD_CHECK_CONFIG name an installed init
# script and /etc/config/offload to check instead of the tree's.
# UCI_PREFIX is what build-uci.sh prints: OpenWrt's real uci tool and
# config_* shell functions, built from third_party/openwrt; procd is
# played by test/procd.sh (each call printed; with PROCD_LIVE=1 real
# processes) under test/rc.common. It checks:
#   - the instance start_service asks procd for, per /etc/config/offload;
#   - the UCI examples (packaging/openwrt/examples) render into YAML that
#     offload validate passes, and every setting of examples/*.yaml has a
#     UCI option;
#   - a bad value is reported by its UCI option name and leaves the
#     rendered YAML as it was; no UCI value can add YAML of its own;
#   - reload sends SIGHUP to the running offload server (same pid, and it
#     logs the reload), refuses a bad config without touching the process,
#     and restarts it only for a changed memory_limit or YAML path (option
#     config, which reload then signals too); stop ends it;
#   - check FILE (what LuCI runs before Save & Apply) names a bad value by
#     its UCI option, enabled or not, and installs nothing.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
[ $# -eq 2 ] || {
	echo "usage: busybox sh $0 UCI_PREFIX OFFLOAD_BINARY" >&2
	exit 2
}
OFFLOAD_UCI=$(cd "$1" && pwd)
bin=$2
case $bin in /*) ;; *) bin="$PWD/$bin" ;; esac
# An installed tree's init script and UCI file instead of the tree's
# (packaging/build's install test: the files a package put in place).
init=${OFFLOAD_CHECK_INIT:-$here/offload/files/offload.init}
shipped=${OFFLOAD_CHECK_CONFIG:-$here/offload/files/offload.config}
tmp=$(mktemp -d)
conf="$tmp/conf"
etc="$tmp/etc"
run="$tmp/run"
mkdir -p "$conf" "$etc" "$run" "$tmp/procd"
cleanup() {
	for f in "$tmp"/procd/*.pid; do
		[ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
# (busybox sh runs its own applets for awk, sed and the rest, as on
# OpenWrt; logger is test/rc.common's, writing to $PROCD_DIR/syslog.)
# uci keeps uncommitted changes in /tmp/.uci unless told: this run's are
# its own (UCI_SAVE_DIR is for test/functions.sh).
mkdir -p "$tmp/uci-changes"
export OFFLOAD_UCI PATH="$OFFLOAD_UCI/bin:$PATH" UCI_CONFIG_DIR="$conf" UCI_SAVE_DIR="$tmp/uci-changes" PROCD_DIR="$tmp/procd"
export OFFLOAD_BIN="$bin" OFFLOAD_RUN_DIR="$run" OFFLOAD_ETC_DIR="$etc" OFFLOAD_UCI_FILE="$conf/offload"
uci() { command uci -c "$conf" -t "$UCI_SAVE_DIR" "$@"; }
rc() { busybox sh "$here/test/rc.common" "$init" "$@"; }

for k in offload alice bob bob-2 admin; do
	"$bin" keygen -o "$etc/$k.key" >/dev/null 2>&1
done
printf 'user:secret\n' >"$etc/socks.users"
chmod 600 "$etc/socks.users"

failed=0
bad() {
	printf 'check-init: %s\n' "$*" >&2
	failed=1
}
# check NAME WANT_STATUS WANT_STDOUT [WANT_IN_STDERR]: "start" with
# /etc/config/offload as it is now.
check() {
	set +e
	got=$(rc start 2>"$tmp/err")
	status=$?
	set -e
	if [ "$status" -ne "$2" ] || [ "$got" != "$3" ] || { [ -n "${4-}" ] && ! grep -qF -- "$4" "$tmp/err"; }; then
		bad "$(printf '%s: status %s, want %s\n--- got:\n%s\n--- want:\n%s\n--- stderr (want it to hold %s):\n%s' \
			"$1" "$status" "$2" "$got" "$3" "${4-}" "$(cat "$tmp/err")")"
	else
		echo "ok  $1"
	fi
}
instance() { # ROLE CONFIG GOMEMLIMIT
	echo "open $1"
	echo "param command $bin $1 -c $2"
	echo "param env GOMEMLIMIT=$3"
	echo "param respawn 3600 5 5"
	echo "param limits nofile=4096 4096"
	echo "param stdout 1"
	echo "param stderr 1"
	echo "param term_timeout 15"
	echo "close"
	echo "trigger offload"
}
use() { cp "$1" "$conf/offload"; }

echo "== the instance procd is asked for"
use "$shipped"
check "as shipped (disabled): nothing starts" 0 "trigger offload"
uci set offload.main.enabled=1 && uci commit offload
check "enabled server, rendered from UCI" 0 "$(instance server "$run/server.yaml" 16MiB)"
uci set offload.main.role=client && uci set offload.main.memory_limit=off && uci commit offload
check "enabled client, memory_limit off" 0 "$(instance client "$run/client.yaml" off)"
sed -e "s#/etc/offload/#$etc/#g" "$here/offload/files/client.yaml" >"$etc/c.yaml"
uci set offload.main.config="$etc/c.yaml" && uci commit offload
check "client with a YAML file (option config)" 0 "$(instance client "$etc/c.yaml" off)"
uci set offload.main.role=relay && uci commit offload
# A refused config registers the running instance again, so that procd
# keeps it (test/procd.sh would stop an instance left out).
check "unknown role refused, the running client kept" 1 "$(instance client "$etc/c.yaml" off)" "offload.main.role: 'relay': want server or client"
# An /etc/config/offload from before the UCI settings: main only.
printf "config offload 'main'\n\toption enabled '1'\n\toption role 'server'\n" >"$conf/offload"
sed -e "s#/etc/offload/#$etc/#g" "$here/offload/files/server.yaml" >"$etc/server.yaml"
check "main section only: /etc/offload/ROLE.yaml as before" 0 "$(instance server "$etc/server.yaml" 16MiB)"

echo "== the examples render into configs offload validate passes"
for ex in "$here"/examples/*; do
	name=$(basename "$ex")
	use "$ex"
	role=$(uci get offload.main.role)
	check "example $name" 0 "$(instance "$role" "$run/$role.yaml" 16MiB)"
	out=$("$bin" validate "$run/$role.yaml" 2>&1) || bad "example $name: validate: $out"
	echo "    $out"
done
# Every setting examples/*.yaml shows (set or commented out) has a UCI
# option: the role section's, or these that stand for YAML structures.
# (server.yaml and client.yaml show every setting; server-clients.yaml's
# clients are the peer sections.)
for role in server client; do
	yaml=$role
	opts=$(busybox sh -c ". '$init'; eval echo \"\\\$OPTS_$role\"")
	# shellcheck disable=SC2013 # the keys are words
	for key in $(sed -n 's/^#\{0,1\} \{0,1\}\([a-z_]*\):.*/\1/p' "$repo/examples/$yaml.yaml" | sort -u); do
		case " $opts " in *" $key "*) continue ;; esac
		case $role:$key in
		*:log | client:redial | *:memory_limit | server:services | server:udp_services | \
			client:servers | client:forwards | client:udp_forwards | client:reverse) continue ;;
		esac
		bad "examples/$yaml.yaml has '$key', which /etc/config/offload can't set: add it to OPTS_$role in offload.init (and docs/routers.md)"
	done
done
echo "ok  every setting of examples/*.yaml has a UCI option"

echo "== bad values are reported by their UCI option"
# bad_value NAME WANT_IN_STDERR: start must fail, leaving the rendered
# YAML as it was and the instance started with it registered.
bad_value() {
	uci commit offload
	cp "$run/$role.yaml" "$tmp/before"
	check "$1" 1 "$(instance "$role" "$run/$role.yaml" 16MiB)" "$2"
	cmp -s "$tmp/before" "$run/$role.yaml" || bad "$1: the rendered YAML changed"
}
use "$here/examples/server"
role=server
rc start >/dev/null
uci set offload.server.max_frame=2MiB
bad_value "a size out of range" "offload.server.max_frame: max_frame: 2MiB is more than"
grep -qF -- "-t offload -p daemon.err $conf/offload: offload.server.max_frame: max_frame: 2MiB" "$tmp/procd/syslog" ||
	bad "the problem did not go to logd too: $(cat "$tmp/procd/syslog" 2>/dev/null)"
use "$here/examples/server"
uci set offload.server.max_stream=5
bad_value "an option offload does not have" "offload.server.max_stream: unknown option, did you mean max_streams?"
use "$here/examples/server"
uci set offload.server.proxy_protocol=maybe
bad_value "a boolean that is not one" "offload.server.proxy_protocol: 'maybe': want 1 or 0"
use "$here/examples/server"
uci set offload.ssh.target=nohost
bad_value "a service target" "offload.ssh.target: services.ssh: target"
use "$here/examples/server"
uci add offload frobnicate >/dev/null
uci add offload fowrard >/dev/null
bad_value "an unknown section type" "offload.@frobnicate[0]: unknown section type 'frobnicate' (want offload server"
grep -qF "offload.@fowrard[0]: unknown section type 'fowrard', did you mean forward?" "$tmp/err" || bad "an unknown section type: $(cat "$tmp/err")"
use "$here/examples/server-clients"
rc start >/dev/null
uci set offload.alice.key_file=missing.key
bad_value "a client's key file" "offload.alice.key_file: clients.alice.key_file"
use "$here/examples/client"
role=client
rc start >/dev/null
uci set 'offload.@forward[1].listen=127.0.0.1:99999'
bad_value "an unnamed section's option" "offload.@forward[1].listen: forwards[1].listen"
use "$here/examples/client"
uci set offload.client.max_stream=3
uci set offload.client.max_frame=2MiB
bad_value "every problem at once (1: an unknown option)" "offload.client.max_stream: unknown option"
grep -qF "offload.client.max_frame: max_frame: 2MiB" "$tmp/err" || bad "every problem at once (2: max_frame): $(cat "$tmp/err")"

echo "== no UCI value adds YAML of its own"
use "$here/examples/server"
role=server
rc start >/dev/null
uci set offload.server.engine="software
max_streams: 1"
bad_value "a newline" "offload.server.engine: has a control character or a newline"
use "$here/examples/server"
# A target that would close a naively quoted scalar and open a field: it
# must come back whole in the error.
uci set offload.web.target="127.0.0.1:80', max_streams: '1"
bad_value "a quote in a value stays in the value" "offload.web.target: services.web: target \"127.0.0.1:80', max_streams: '1\""
use "$here/examples/server"
uci set offload.web.target='127.0.0.1:80" # {x: [*y]}'
bad_value "YAML's other specials stay in the value" "127.0.0.1:80\\\" # {x: [*y]}"
# A key file whose name has every YAML special: offload must find that
# very file.
weird="k'ey \"#1\": {a, [b]} &c *d !e |f >g %h @i \`j\\.key"
"$bin" keygen -o "$etc/$weird" >/dev/null 2>&1
use "$here/examples/server"
uci set offload.server.key_file="$weird" && uci commit offload
check "a file name full of YAML specials reaches offload intact" 0 "$(instance server "$run/server.yaml" 16MiB)"
rm -f "$etc/$weird"
check "... and it is that file (gone now: refused)" 1 "$(instance server "$run/server.yaml" 16MiB)" "offload.server.key_file: key_file:"

echo "== reload sends SIGHUP to the running process"
if command -v python3 >/dev/null 2>&1; then
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
else
	port=$((20000 + $$ % 20000))
fi
use "$here/examples/server"
uci set offload.server.listen="127.0.0.1:$port"
uci delete offload.server.metrics
uci commit offload
export PROCD_LIVE=1
log="$tmp/procd/server.log"
# wait_log TEXT COUNT: until the server's log holds TEXT COUNT times
# (bounded: 20 s).
wait_log() {
	i=0
	while n=$(grep -cF -- "$1" "$log" 2>/dev/null) || true; [ "${n:-0}" -lt "$2" ]; do
		i=$((i + 1))
		[ $i -le 200 ] || { bad "no '$1' (x$2) in the server's log:"; cat "$log" >&2; return 1; }
		sleep 0.1
	done
}
pid() { cat "$tmp/procd/server.pid"; }
alive() { kill -0 "$1" 2>/dev/null; }
rc start >/dev/null
wait_log "listening" 1
pid1=$(pid)
echo "ok  started: pid $pid1"
uci set offload.extra=service && uci set offload.extra.target=127.0.0.1:9999 && uci commit offload
out=$(rc reload)
[ "$out" = "signal offload server HUP" ] || bad "reload asked procd for: $out"
wait_log "SIGHUP: reloading" 1
if [ "$(pid)" != "$pid1" ] || ! alive "$pid1"; then bad "reload: pid $(pid), want $pid1 still running"; fi
grep -qF "'extra': '127.0.0.1:9999'" "$run/server.yaml" || bad "reload did not render the new service"
! grep -qF "reload refused" "$log" || bad "offload refused the reload: $(cat "$log")"
echo "ok  reload: SIGHUP to pid $pid1, which reloaded the new service"
uci set offload.server.max_frame=2MiB && uci commit offload
if rc reload >/dev/null 2>"$tmp/err"; then bad "reload of a bad config succeeded"; fi
grep -qF "offload.server.max_frame" "$tmp/err" || bad "reload of a bad config: $(cat "$tmp/err")"
sleep 0.2
[ "$(grep -cF "SIGHUP: reloading" "$log")" -eq 1 ] || bad "a bad config was signalled"
if [ "$(pid)" != "$pid1" ] || ! alive "$pid1"; then bad "a bad config touched the process"; fi
echo "ok  reload of a bad config: refused by option name, pid $pid1 left alone"
if rc start >/dev/null 2>"$tmp/err"; then bad "start with a bad config succeeded"; fi
grep -qF "not started; the running server keeps $run/server.yaml" "$tmp/err" || bad "start with a bad config: $(cat "$tmp/err")"
if [ "$(pid)" != "$pid1" ] || ! alive "$pid1"; then bad "start with a bad config stopped the running process"; fi
echo "ok  start with a bad config: refused, pid $pid1 kept running on its config"
uci set offload.server.max_frame=64KiB && uci set offload.main.memory_limit=24MiB && uci commit offload
rc reload >/dev/null
wait_log "listening" 2
pid2=$(pid)
if [ "$pid2" = "$pid1" ] || alive "$pid1" || ! alive "$pid2"; then bad "memory_limit: pid $pid2 (was $pid1); want a new process"; fi
echo "ok  reload with a new memory_limit: restarted as pid $pid2"
# The YAML alternative: a new path is a new process, then reload signals it.
sed -n '/^#/!p' "$run/server.yaml" >"$etc/server.yaml"
uci set offload.main.config="$etc/server.yaml" && uci commit offload
rc reload >/dev/null
wait_log "listening" 3
pid3=$(pid)
if [ "$pid3" = "$pid2" ] || alive "$pid2" || ! alive "$pid3"; then bad "option config: pid $pid3 (was $pid2); want a new process"; fi
out=$(rc reload)
[ "$out" = "signal offload server HUP" ] || bad "reload with option config asked procd for: $out"
wait_log "SIGHUP: reloading" 2
if [ "$(pid)" != "$pid3" ] || ! alive "$pid3"; then bad "reload with option config: pid $(pid), want $pid3 still running"; fi
echo "ok  option config: restarted as pid $pid3 for the new path, then SIGHUP on reload"
rc stop >/dev/null
! alive "$pid3" || bad "stop left pid $pid3 running"
echo "ok  stop ended pid $pid3"

echo "== check FILE: what LuCI's Save & Apply runs on the changes it is about to apply"
use "$here/examples/client"
uci set offload.main.enabled=0 && uci commit offload
cp "$conf/offload" "$tmp/staged"
cp "$conf/offload" "$tmp/conf-before"
out=$(rc check "$tmp/staged" 2>&1) || bad "check of a good file (disabled): $out"
[ "$out" = "offload: $tmp/staged: valid (client)" ] || bad "check of a good file: $out"
echo "ok  check passes a good file, disabled or not"
printf "\toption max_frame '2MiB'\n" >>"$tmp/staged" # into the last section, an unnamed one
sed -i "s/^config client 'client'\$/&\n\toption max_frame '2MiB'/" "$tmp/staged"
if out=$(rc check "$tmp/staged" 2>&1); then bad "check of a bad file passed: $out"; fi
case $out in
*"$tmp/staged: offload.client.max_frame: max_frame: 2MiB is more than"*) ;;
*) bad "check of a bad file: $out" ;;
esac
case $out in
*"offload.@"*"].max_frame: unknown option"*) ;;
*) bad "check of a bad file, an unnamed section: $out" ;;
esac
cmp -s "$tmp/conf-before" "$conf/offload" || bad "check changed $conf/offload"
[ ! -e "$run/client.yaml.new" ] || bad "check left $run/client.yaml.new"
echo "ok  check names each problem by UCI option and installs nothing"

[ "$failed" -eq 0 ] || exit 1
echo "check-init: the init script renders, validates, starts and reloads what /etc/config/offload says"
