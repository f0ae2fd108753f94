# shellcheck shell=dash
# Stand-ins for procd's shell API (/lib/functions/procd.sh) in the
# packaging checks. Each call is printed ("open NAME", "param ...",
# "close", "signal ...", "trigger ..."), so that a check can compare what
# an init script asks procd for. With PROCD_LIVE=1 they also do what procd
# does with it, on real processes, with state in $PROCD_DIR across runs of
# the init script: procd_close_service starts each instance whose command
# or environment is new or changed (stopping the one it replaces) and
# stops the instances no longer registered; procd_send_signal signals an
# instance; procd_kill stops them all. Commands are kept as one line, so
# their arguments must have no spaces (the checks' paths have none).

procd_open_service() {
	: >"$PROCD_DIR/registered"
}
procd_open_instance() {
	_procd_inst=$1
	echo "open $*"
	: >"$PROCD_DIR/$1.want-cmd"
	: >"$PROCD_DIR/$1.want-env"
}
procd_set_param() {
	echo "param $*"
	local p=$1
	shift
	case $p in
	command) echo "$*" >"$PROCD_DIR/$_procd_inst.want-cmd" ;;
	env) echo "$*" >"$PROCD_DIR/$_procd_inst.want-env" ;;
	esac
}
procd_close_instance() {
	echo "close"
	echo "$_procd_inst" >>"$PROCD_DIR/registered"
}
procd_add_reload_trigger() { echo "trigger $*"; }

# _procd_running NAME: the pid of instance NAME if it is alive.
_procd_running() {
	local pid
	pid=$(cat "$PROCD_DIR/$1.pid" 2>/dev/null) || return 1
	kill -0 "$pid" 2>/dev/null && echo "$pid"
}
# _procd_stop NAME: SIGTERM, and wait (bounded) for it to end.
_procd_stop() {
	local pid i=0
	pid=$(_procd_running "$1") || { rm -f "$PROCD_DIR/$1.pid"; return 0; }
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null && [ $i -lt 300 ]; do
		sleep 0.1
		i=$((i + 1))
	done
	kill -KILL "$pid" 2>/dev/null
	rm -f "$PROCD_DIR/$1.pid"
}
procd_close_service() {
	[ "${PROCD_LIVE:-0}" = 1 ] || return 0
	local f name
	for f in "$PROCD_DIR"/*.pid; do
		[ -f "$f" ] || continue
		name=$(basename "$f" .pid)
		grep -qx "$name" "$PROCD_DIR/registered" || _procd_stop "$name"
	done
	while read -r name; do
		if _procd_running "$name" >/dev/null &&
			cmp -s "$PROCD_DIR/$name.want-cmd" "$PROCD_DIR/$name.cmd" &&
			cmp -s "$PROCD_DIR/$name.want-env" "$PROCD_DIR/$name.env"; then
			continue
		fi
		_procd_stop "$name"
		cp "$PROCD_DIR/$name.want-cmd" "$PROCD_DIR/$name.cmd"
		cp "$PROCD_DIR/$name.want-env" "$PROCD_DIR/$name.env"
		# shellcheck disable=SC2046
		env $(cat "$PROCD_DIR/$name.env") $(cat "$PROCD_DIR/$name.cmd") >>"$PROCD_DIR/$name.log" 2>&1 &
		echo $! >"$PROCD_DIR/$name.pid"
	done <"$PROCD_DIR/registered"
}
# procd_send_signal SERVICE [INSTANCE [SIGNAL]]: as procd's, SIGHUP by
# default.
procd_send_signal() {
	echo "signal $*"
	[ "${PROCD_LIVE:-0}" = 1 ] || return 0
	local pid
	pid=$(_procd_running "$2") || return 0
	kill -s "${3:-HUP}" "$pid"
}
procd_kill() {
	[ "${PROCD_LIVE:-0}" = 1 ] || return 0
	local f
	for f in "$PROCD_DIR"/*.pid; do
		[ -f "$f" ] && _procd_stop "$(basename "$f" .pid)"
	done
	return 0
}
