#!/bin/bash
# clockcallers.sh BIN MIB NAME FUNC: who calls FUNC, per end of a loopback
# tunnel. BIN is an x86 build of cmd/offload; both ends run at max_procs 1 on
# one CPU (taskset -c 1), as on a one-CPU router, with today's defaults
# (resume_window on, software); MIB MiB go through one forward. A perf uprobe
# on FUNC (runtime.nanotime1: the clock reads; runtime.gopark: the
# scheduling rounds) is recorded with call graphs in each end; prints the
# number of calls and the callers (three frames), most frequent first.
# Needs root and perf.  Example: clockcallers.sh ./offload 32 nt runtime.nanotime1
B=$(realpath "$1"); MIB=$2; EV=$3_$(echo "$B" | md5sum | head -c 8); FN=$4
perf probe -x "$B" -a "clk:$EV=$FN" >/dev/null 2>&1
D=$(mktemp -d); cd "$D" || exit 1
"$B" keygen -o offload.key >/dev/null 2>&1
printf 'listen: 127.0.0.1:7410\nkey_file: offload.key\nmax_procs: 1\nservices:\n  sink: 127.0.0.1:7411\n' > server.yaml
printf 'server: 127.0.0.1:7410\nkey_file: offload.key\nmax_procs: 1\nforwards:\n  - listen: 127.0.0.1:7413\n    service: sink\n' > client.yaml
taskset -c 1 socat -u TCP-LISTEN:7411,reuseaddr,fork OPEN:/dev/null & SINK=$!
taskset -c 1 "$B" server -c server.yaml 2>srv.err >/dev/null & S=$!
sleep 0.5
taskset -c 1 "$B" client -c client.yaml 2>cli.err >/dev/null & C=$!
sleep 1
perf record -q -g -e "clk:$EV" -p $S -o srv.data & PS=$!
perf record -q -g -e "clk:$EV" -p $C -o cli.data & PC=$!
sleep 0.5; head -c "${MIB}M" /dev/zero | taskset -c 1 socat -u - TCP:127.0.0.1:7413; sleep 0.3
kill -INT $PS $PC; wait $PS $PC; kill $C $S $SINK; wait 2>/dev/null
for f in srv cli; do
  echo "== $f: $(perf script -i $f.data -F event 2>/dev/null | wc -l) calls of $FN, $MIB MiB"
  perf script -i $f.data -F event,ip,sym 2>/dev/null | awk '
    /^[^ \t]/ { if (chain != "") print chain; chain = ""; depth = 0; next }
    NF >= 2 { depth++; if (depth >= 2 && depth <= 4) { s = $2; sub(/\+0x.*/, "", s); chain = chain (chain == "" ? "" : " < ") s } }
    END { if (chain != "") print chain }' | sed 's|github.com/offload-dev/offload/||g' | sort | uniq -c | sort -rn | head -"${TOP:-12}"
done
rm -rf "$D"; perf probe -q -d "clk:$EV"
