#!/usr/bin/env python3
"""Per-round figures of harness/compare logs, new build against base.

usage: compare-pairs.py LOG...   (a log whose name has "new" in it is the new build's)

For each round of each log: offload's CPU s/GB, and its ratio to ssh -L's in the
same round (the tools of a round run back to back, so the ratio takes out most
of the host's load); medians over all rounds of each build."""
import re, statistics as st, sys

pat = re.compile(r"compare: (offload|ssh -L)\s+(\d) stream\(s\), round (\d) of \d: ([\d.]+) MB/s, ([\d.]+) CPU s/GB")
cpu = {k: {1: [], 8: []} for k in ("base", "new")}
rel = {k: {1: [], 8: []} for k in ("base", "new")}
mbs = {k: {1: [], 8: []} for k in ("base", "new")}
for f in sys.argv[1:]:
    k = "new" if "new" in f.rsplit("/", 1)[-1] else "base"
    d = {}
    for line in open(f):
        m = pat.search(line)
        if m:
            d[(m[1], int(m[2]), int(m[3]))] = (float(m[4]), float(m[5]))
    for (tool, s, r), (mb, c) in d.items():
        if tool == "offload" and ("ssh -L", s, r) in d:
            h = d[("ssh -L", s, r)]
            cpu[k][s].append(c)
            rel[k][s].append(c / h[1])
            mbs[k][s].append(mb / h[0])
for s in (1, 8):
    for k in ("base", "new"):
        print("%d stream(s) %-4s rounds %2d: offload CPU s/GB median %.2f; x ssh -L CPU per byte median %.3f (%.2f-%.2f); MB/s x ssh median %.3f"
              % (s, k, len(cpu[k][s]), st.median(cpu[k][s]), st.median(rel[k][s]), min(rel[k][s]), max(rel[k][s]), st.median(mbs[k][s])))
    print("   new/base: CPU s/GB %.3f, x ssh -L %.3f" % (st.median(cpu["new"][s]) / st.median(cpu["base"][s]), st.median(rel["new"][s]) / st.median(rel["base"][s])))
