#!/usr/bin/env python3
"""Paired A/B figures of harness/anchor -routers 2 spans: each offload path
against its -baseline twin (NAME-base) in the same boot and round.

usage: pairs.py SPANS.jsonl...   (each file one boot; boot/round keys are per file)

Prints, per path, the per-pair ratio new/base of MB per qemu CPU second for
router A (encrypt), router B (decrypt) and the busier of the two (median, and
in how many pairs the new build was cheaper), and the pooled figures. A pair
with a run in another regime (a router's guest clock over 15 % off the host's,
as harness/anchor marks them) is left out."""
import json, statistics as st, sys

pairs = {}  # every path measured beside its NAME-base twin


def off(run):
    return any(abs(x["guest_s"] / x["clock_s"] - 1) > 0.15 for x in run["router"])


tot = {}
for f in sys.argv[1:]:
    by = {}
    for line in open(f):
        r = json.loads(line)
        by[(r["boot"], r["round"], r["name"])] = r
    for (b, rd, n), r in by.items():
        if n.endswith("-base") or (b, rd, n + "-base") not in by:
            continue
        base = by[(b, rd, n + "-base")]
        if off(r) or off(base):
            print("left out, another regime: %s boot %d round %d %s" % (f, b, rd, n))
            continue
        eff = lambda x, i: x["bytes"] / 1e6 / x["router"][i]["qemu_s"]
        busy = lambda x: x["bytes"] / 1e6 / max(x["router"][0]["qemu_s"], x["router"][1]["qemu_s"])
        pairs.setdefault(n, []).append((eff(r, 0) / eff(base, 0), eff(r, 1) / eff(base, 1), busy(r) / busy(base)))
        for k, x in (("new", r), ("base", base)):
            t = tot.setdefault((n, k), [0.0, 0.0, 0.0])
            t[0] += x["bytes"] / 1e6
            t[1] += x["router"][0]["qemu_s"]
            t[2] += x["router"][1]["qemu_s"]
for n, v in sorted(pairs.items()):
    if not v:
        continue
    q = lambda w: "median %.3f, new cheaper in %d of %d" % (st.median(w), sum(1 for x in w if x > 1), len(w))
    print(n, "pairs", len(v), "| A", q([x[0] for x in v]), "| B", q([x[1] for x in v]), "| busier", q([x[2] for x in v]))
    for k in ("new", "base"):
        mb, a, b = tot[(n, k)]
        print("   pooled %-4s A %.2f  B %.2f MB per qemu CPU s" % (k, mb / a, mb / b))
