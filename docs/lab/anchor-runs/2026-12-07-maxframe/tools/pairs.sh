#!/bin/bash
# pairs.sh SPANS.jsonl...: each NAME-256k run against NAME-64k in the same boot
# and round, through ../../2026-12-07-rxcopy/tools/pairs.py (which pairs NAME
# with NAME-base), then a bootstrap 90 % interval of the busier router's median.
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
i=0
for f in "$@"; do
	i=$((i + 1))
	sed -e 's/"\([a-z]*\)-64k"/"\1-base"/; s/"\([a-z]*\)-256k"/"\1"/' "$f" >"$tmp/$i.jsonl"
done
python3 "$here/../../2026-12-07-rxcopy/tools/pairs.py" "$tmp"/*.jsonl
python3 - "$tmp"/*.jsonl <<'PY'
import json, random, statistics as st, sys
random.seed(1)
r = []
for f in sys.argv[1:]:
    by = {}
    for l in open(f):
        x = json.loads(l)
        by[(x["boot"], x["round"], x["name"])] = x
    busy = lambda z: z["bytes"] / max(z["router"][0]["qemu_s"], z["router"][1]["qemu_s"])
    for (b, rd, n), x in by.items():
        if not n.endswith("-base") and (b, rd, n + "-base") in by:
            r.append((n, busy(x) / busy(by[(b, rd, n + "-base")])))
for name in sorted({n for n, _ in r}) + [None]:
    v = [q for n, q in r if name in (None, n)]
    bs = sorted(st.median(random.choices(v, k=len(v))) for _ in range(5000))
    print("%-9s busier router, 256k over 64k: %d pairs, median %.3f, bootstrap 90%% %.3f-%.3f" % (name or "both", len(v), st.median(v), bs[250], bs[4750]))
PY
