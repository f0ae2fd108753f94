# shellcheck shell=dash
# /lib/functions.sh for the packaging checks. OpenWrt's own is in its
# base-files package, which is not among the fixtures; its config_*
# functions (config_load, config_get, config_get_bool, config_foreach,
# config_list_foreach, reset_cb and the config/option/list callbacks) are
# the ones in uci's sh/uci.sh, which is: build-uci.sh installs it as
# $OFFLOAD_UCI/share/uci.sh. What that file leaves to OpenWrt is uci_load,
# written here: it evaluates "uci export", whose values uci quotes for the
# shell, as OpenWrt's does.
# shellcheck source=/dev/null
. "$OFFLOAD_UCI/share/uci.sh"

# (CONFIG_SECTIONS and CONFIG_NUM_SECTIONS are read by uci.sh.)
# shellcheck disable=SC2034
uci_load() {
	local data rc
	CONFIG_SECTIONS=""
	CONFIG_NUM_SECTIONS=0
	CONFIG_SECTION=""
	data=$(uci ${UCI_CONFIG_DIR:+-c "$UCI_CONFIG_DIR"} ${UCI_SAVE_DIR:+-t "$UCI_SAVE_DIR"} export "$1")
	rc=$?
	[ "$rc" -ne 0 ] || eval "$data"
	# The last section's end.
	[ -z "$CONFIG_SECTION" ] || config_cb
	return "$rc"
}
