#!/bin/bash
# mipsle-syscalls.sh BIN [MIB]: system calls per MiB of each end of a loopback
# tunnel, both ends a linux/mipsle build of cmd/offload under qemu-user
# (qemu-mipsel-static -strace), max_procs 1, all on one host CPU; today's
# defaults otherwise (resume_window on), MIB MiB (default 16) through one
# forward. Only the calls made while the bytes pass are counted (the strace
# logs' lengths before and after). Every call of Go's clock on linux/mipsle is
# a clock_gettime system call, so the clock_gettime column is the clock reads.
# qemu-user runs the runtime's threads as host threads, so the monitor
# (sysmon) runs more often than on a one-CPU router: read the difference
# between two builds, not the absolute figure.
set -e
BIN=$(realpath "$1"); MIB=${2:-16}; Q=qemu-mipsel-static
D=$(mktemp -d); cd "$D"
$Q "$BIN" keygen -o offload.key >/dev/null 2>&1
common="key_file: offload.key
max_procs: 1"
printf 'listen: 127.0.0.1:7420\n%s\nservices:\n  sink: 127.0.0.1:7421\n' "$common" > server.yaml
printf 'server: 127.0.0.1:7420\n%s\nforwards:\n  - listen: 127.0.0.1:7423\n    service: sink\n' "$common" > client.yaml
taskset -c 1 socat -u TCP-LISTEN:7421,reuseaddr,fork OPEN:/dev/null & SINK=$!
taskset -c 1 $Q -strace "$BIN" server -c server.yaml 2>srv.log >/dev/null & S=$!
sleep 2
taskset -c 1 $Q -strace "$BIN" client -c client.yaml 2>cli.log >/dev/null & C=$!
sleep 4
cp srv.log srv0.log; cp cli.log cli0.log
head -c ${MIB}M /dev/zero | taskset -c 1 socat -u - TCP:127.0.0.1:7423
sleep 1
cp srv.log srv1.log; cp cli.log cli1.log
kill $C $S; wait $C $S 2>/dev/null || true; kill $SINK; wait $SINK 2>/dev/null || true
echo -n "$(basename "$(dirname "$BIN")")/$(basename "$BIN") per MiB: "
for e in cli srv; do
  tail -c +$(( $(stat -c %s ${e}0.log) + 1 )) ${e}1.log > $e.win
  awk -v m=$MIB -v e=$e '{c=$2; sub(/\(.*/, "", c); n[c]++; t++} END {printf "%s all %.1f clock_gettime %.1f nanosleep %.1f futex %.1f epoll_pwait %.1f | ", e, t/m, n["clock_gettime"]/m, n["nanosleep"]/m, n["futex"]/m, n["epoll_pwait"]/m}' $e.win
done; echo
rm -rf "$D"
