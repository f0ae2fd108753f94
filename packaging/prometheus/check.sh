#!/usr/bin/env bash
# Runs Debian's Prometheus against a real offload server and client with
# the documented scrape config, packaging/prometheus/prometheus.yml, as it
# is (its targets are the metrics addresses of examples/*.yaml):
#   bash packaging/prometheus/check.sh OFFLOAD_BINARY
# On loopback: an echo service, offload server and client with metrics on
# the scrape config's targets, 4 MiB through a forward and back (checked
# byte for byte); promtool check metrics on each /metrics; then Prometheus
# itself, polled through its HTTP API (bounded) until it has scraped both:
# up is 1 for each, and offload_bytes_total (the bytes each end's engine
# encrypted) holds at least what was sent; the alert rules (alerts.yml)
# pass promtool check rules and their unit tests (alerts_test.yml), load
# in Prometheus, and OffloadLinkDown rises when the server is stopped.
# Every process it starts is ended on exit. Needs prometheus, promtool, curl and python3 (scripts/deps.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: bash $0 OFFLOAD_BINARY" >&2; exit 2; }
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
scrape="$here/prometheus.yml"
for t in prometheus promtool curl python3; do
	command -v "$t" >/dev/null || { echo "prometheus check: $t not found (scripts/deps.sh installs it)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/offload-prom.XXXXXX")
pids=()
cleanup() {
	local p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "prometheus check: $*" >&2
	local f
	for f in "$tmp"/*.log; do
		[ -f "$f" ] && { echo "--- $(basename "$f"):" >&2; tail -20 "$f" >&2; }
	done
	exit 1
}
# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds, polling every
# 0.2 s, at most SECONDS.
wait_for() {
	local what=$1 n=$(($2 * 5))
	shift 2
	until "$@" >/dev/null 2>&1; do
		n=$((n - 1))
		[ "$n" -gt 0 ] || fail "timed out waiting for $what"
		sleep 0.2
	done
}
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The rules: promtool checks the config with its rule files, then runs
# alerts_test.yml, where each alert fires on made-up series.
promtool check config "$scrape" >"$tmp/promtool" 2>&1 || fail "promtool check config: $(cat "$tmp/promtool")"
promtool check rules "$here/alerts.yml" >"$tmp/promtool" 2>&1 || fail "promtool check rules: $(cat "$tmp/promtool")"
echo "ok  promtool check rules: $(grep -o '[0-9]* rules found' "$tmp/promtool")"
(cd "$here" && promtool test rules alerts_test.yml) >"$tmp/promtool" 2>&1 || fail "promtool test rules alerts_test.yml: $(cat "$tmp/promtool")"
echo "ok  promtool test rules alerts_test.yml: every alert fires on its series, none on healthy ones"

# The targets, server's first, from the scrape config itself.
mapfile -t targets < <(grep -E '^ *- targets:' "$scrape" | grep -o '127\.0\.0\.1:[0-9]*')
[ ${#targets[@]} -eq 2 ] || fail "$scrape: want 2 targets on 127.0.0.1, found ${targets[*]}"
for t in "${targets[@]}"; do
	python3 -c 'import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", int(sys.argv[1])))' "${t#*:}" 2>/dev/null ||
		fail "port ${t#*:} of the scrape config's target $t is in use here"
done
tunnel=$(free_port)
echo_port=$(free_port)
fwd=$(free_port)
prom=$(free_port)

cat >"$tmp/echo.py" <<'EOF'
import socket, sys, threading
ln = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def serve(c):
    with c:
        while (b := c.recv(65536)):
            c.sendall(b)
while True:
    threading.Thread(target=serve, args=(ln.accept()[0],), daemon=True).start()
EOF
# push PORT BYTES: sends BYTES of random data and checks they come back.
cat >"$tmp/push.py" <<'EOF'
import os, socket, sys, threading
n = int(sys.argv[2])
data = os.urandom(n)
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
threading.Thread(target=c.sendall, args=(data,), daemon=True).start()
got = bytearray()
while len(got) < n:
    b = c.recv(65536)
    if not b:
        break
    got += b
c.close()
sys.exit(0 if bytes(got) == data else "echo: got %d bytes back, not the %d sent" % (len(got), n))
EOF

"$bin" keygen -o "$tmp/offload.key" >/dev/null 2>&1
cat >"$tmp/server.yaml" <<EOF
listen: 127.0.0.1:$tunnel
key_file: offload.key
services:
  echo: 127.0.0.1:$echo_port
metrics: ${targets[0]}
EOF
cat >"$tmp/client.yaml" <<EOF
server: 127.0.0.1:$tunnel
key_file: offload.key
forwards:
  - listen: 127.0.0.1:$fwd
    service: echo
metrics: ${targets[1]}
EOF
python3 "$tmp/echo.py" "$echo_port" >"$tmp/echo.log" 2>&1 &
pids+=($!)
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_for "the echo service" 30 listening "$echo_port"
"$bin" server -c "$tmp/server.yaml" >"$tmp/server.log" 2>&1 &
pids+=($!)
"$bin" client -c "$tmp/client.yaml" >"$tmp/client.log" 2>&1 &
pids+=($!)
link_up() { curl -fsS "http://${targets[1]}/metrics" | grep -qx 'offload_link_up 1'; }
wait_for "the client's link (offload_link_up 1)" 30 link_up

bytes=$((4 << 20))
python3 "$tmp/push.py" "$fwd" "$bytes" || fail "4 MiB through the forward did not come back intact"
echo "ok  4 MiB through the tunnel and back"
# promtool check metrics parses the text as Prometheus does and lints it
# (help text, types, counter names, units): it must pass with nothing to
# say. Each family's # HELP and # TYPE come from tunnel/metricshelp.go.
for t in "${targets[@]}"; do
	curl -fsS "http://$t/metrics" >"$tmp/scrape"
	if ! promtool check metrics <"$tmp/scrape" >"$tmp/promtool" 2>&1 || [ -s "$tmp/promtool" ]; then
		fail "promtool check metrics on $t/metrics: $(cat "$tmp/promtool")"
	fi
	echo "ok  promtool check metrics: $t/metrics, $(grep -c '^offload_' "$tmp/scrape") samples in" \
		"$(grep -c '^# TYPE offload_' "$tmp/scrape") families, each with help and type; no lint"
done

prometheus --config.file="$scrape" --storage.tsdb.path="$tmp/tsdb" \
	--web.listen-address="127.0.0.1:$prom" --log.level=warn >"$tmp/prometheus.log" 2>&1 &
pids+=($!)
wait_for "Prometheus to be ready" 60 curl -fsS "http://127.0.0.1:$prom/-/ready"
# query EXPR: the API's answer as "instance value" lines.
query() {
	curl -fsS "http://127.0.0.1:$prom/api/v1/query" --data-urlencode "query=$1" | python3 -c '
import json, sys
for r in json.load(sys.stdin)["data"]["result"]:
    print(r["metric"].get("instance", "-"), r["value"][1])'
}
# scraped: both targets up (one scrape each; the first comes within the
# scrape interval).
scraped() { [ "$(query 'up{job="offload"} == 1' | wc -l)" -eq 2 ]; }
wait_for "Prometheus to scrape both targets (up == 1)" 60 scraped
query 'up{job="offload"}' | sed 's/^/ok  up /'
moved=$(query "sum by (instance) (offload_bytes_total{job=\"offload\",dir=\"encrypt\"}) >= $bytes")
[ "$(echo "$moved" | grep -c .)" -eq 2 ] ||
	fail "offload_bytes_total{dir=encrypt} is under $bytes on some end: $(query 'sum by (instance) (offload_bytes_total{dir="encrypt"})')"
while read -r l; do echo "ok  offload_bytes_total{dir=\"encrypt\"} $l"; done <<<"$moved"
# The rules as Prometheus loaded them: each evaluated without error.
rules_ok() {
	curl -fsS "http://127.0.0.1:$prom/api/v1/rules" | python3 -c '
import json, sys
rules = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
bad = [r["name"] for r in rules if r.get("health") != "ok"]
sys.exit(0 if rules and not bad else "rules not healthy (yet): %s" % (bad or "none loaded"))'
}
wait_for "Prometheus to evaluate every rule of alerts.yml without error" 60 rules_ok
echo "ok  alerts.yml loaded and evaluated by Prometheus"
# Stop the server: the client's link goes down and OffloadLinkDown rises
# (pending during its for: 1m, then firing), for the client's instance.
kill "${pids[1]}"
link_down() {
	curl -fsS "http://127.0.0.1:$prom/api/v1/alerts" | python3 -c '
import json, sys
a = [x for x in json.load(sys.stdin)["data"]["alerts"] if x["labels"]["alertname"] == "OffloadLinkDown" and x["labels"].get("instance") == sys.argv[1]]
sys.exit(0 if a and a[0]["state"] in ("pending", "firing") else 1)' "${targets[1]}"
}
wait_for "OffloadLinkDown for ${targets[1]} after the server stopped" 120 link_down
echo "ok  OffloadLinkDown raised for the client (${targets[1]}) once its server stopped"
echo "prometheus check: Prometheus scraped offload's server and client with $(basename "$scrape") and raised an alert of alerts.yml"
