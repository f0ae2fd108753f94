#!/usr/bin/env bash
# Prepares a private apt configuration for one Debian suite and prints the
# file to put in APT_CONFIG:
#
#   APT_CONFIG=$(bash scripts/apt-suite.sh sid) go run ./harness/vm ...
#
# The machine's own sources, state and cache are left alone: the suite gets
# its own sources.list, package lists and archive folder under
# $OFFLOAD_VM_CACHE/apt-SUITE (default ~/.cache/offload-vm/apt-SUITE), and
# apt-get update runs there once per $OFFLOAD_APT_MAX_AGE minutes (default
# 720). harness/vm and scripts/cryptodev-ko.sh ask apt through apt-cache and
# apt-get, which honour APT_CONFIG, so with it they take that suite's kernel,
# headers and (for the module build) compiler. Release files of a mirror
# snapshot may be past their Valid-Until date; they are accepted (the
# signature is still checked against debian-archive-keyring).
set -euo pipefail

say() { printf 'apt-suite: %s\n' "$*" >&2; }

suite=${1:?usage: apt-suite.sh SUITE (e.g. sid)}
case $suite in
*[!a-z0-9-]*) say "bad suite name '$suite'"; exit 2 ;;
esac
mirror=${OFFLOAD_APT_MIRROR:-http://deb.debian.org/debian}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || { say "$keyring missing (debian-archive-keyring)"; exit 1; }

cache=${OFFLOAD_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/offload-vm}
dir="$cache/apt-$suite"
mkdir -p "$dir/etc/sources.list.d" "$dir/etc/preferences.d" "$dir/etc/apt.conf.d" \
	"$dir/lists/partial" "$dir/cache/archives/partial"
touch "$dir/status"
echo "deb [signed-by=$keyring] $mirror $suite main" >"$dir/etc/sources.list"
cat >"$dir/apt.conf" <<CONF
Dir::Etc "$dir/etc";
Dir::Etc::sourcelist "$dir/etc/sources.list";
Dir::Etc::sourceparts "$dir/etc/sources.list.d";
Dir::Etc::preferencesparts "$dir/etc/preferences.d";
Dir::Etc::parts "$dir/etc/apt.conf.d";
Dir::State "$dir";
Dir::State::lists "$dir/lists";
Dir::State::status "$dir/status";
Dir::Cache "$dir/cache";
Acquire::Check-Valid-Until "false";
Acquire::Languages "none";
APT::Sandbox::User "root";
CONF

stamp="$dir/lists/.updated"
if [ -z "$(find "$stamp" -mmin -"${OFFLOAD_APT_MAX_AGE:-720}" 2>/dev/null)" ]; then
	say "apt-get update for $suite ($mirror)"
	if ! APT_CONFIG="$dir/apt.conf" apt-get update -q >"$dir/update.log" 2>&1 ||
		grep -q '^E:' "$dir/update.log"; then
		cat "$dir/update.log" >&2
		say "apt-get update for $suite failed"
		exit 1
	fi
	touch "$stamp"
fi
echo "$dir/apt.conf"
