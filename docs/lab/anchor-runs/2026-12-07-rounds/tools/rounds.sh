#!/bin/bash
# rounds.sh BIN [MIB]: scheduling rounds (calls of runtime.schedule, a perf
# uprobe), context switches, system calls and CPU ms per MiB of each end of a
# loopback tunnel, both ends at max_procs 1, aes-256-ctr-hmac-sha256 in
# software, MIB MiB (default 256) through one forward. Needs root and perf.
# The uprobe traps on every call: task-clock is inflated, read the counts.
set -e
BIN=$(realpath "$1"); MIB=${2:-256}; G=pdp:s$(basename "$BIN" | tr -cd "a-z0-9")
perf probe -l 2>/dev/null | grep -q "  $G " || perf probe -x "$BIN" -a "$G=runtime.schedule" >/dev/null 2>&1
D=$(mktemp -d); cd "$D"
"$BIN" keygen -o offload.key >/dev/null 2>&1
common="key_file: offload.key
suite: aes-256-ctr-hmac-sha256
engine: software
max_procs: 1"
printf 'listen: 127.0.0.1:7400\n%s\nservices:\n  sink: 127.0.0.1:7401\n' "$common" > server.yaml
printf 'server: 127.0.0.1:7400\n%s\nforwards:\n  - listen: 127.0.0.1:7403\n    service: sink\n' "$common" > client.yaml
socat -u TCP-LISTEN:7401,reuseaddr,fork OPEN:/dev/null & SINK=$!
"$BIN" server -c server.yaml 2>srv.err >/dev/null & S=$!
sleep 0.5
"$BIN" client -c client.yaml 2>cli.err >/dev/null & C=$!
sleep 1
EV="$G,context-switches,raw_syscalls:sys_enter,task-clock"
perf stat -x, -e "$EV" -p $C -o cli.perf & PC=$!
perf stat -x, -e "$EV" -p $S -o srv.perf & PS=$!
sleep 0.5
head -c ${MIB}M /dev/zero | socat -u - TCP:127.0.0.1:7403
sleep 0.3
kill -INT $PC $PS; wait $PC $PS || true
kill $C $S; wait $C $S 2>/dev/null || true; kill $SINK; wait $SINK 2>/dev/null || true
echo -n "$(basename "$BIN") per MiB: "
for e in cli srv; do
  awk -F, -v m=$MIB -v e=$e 'NF>3 && $1!="" {split($3,n,":"); k=($3 ~ /^pdp:/?"rounds":(n[2]!=""?n[2]:$3)); printf "%s %s %.1f ", e, k, $1/m} END{printf "| "}' $e.perf
done; echo
rm -rf "$D"
