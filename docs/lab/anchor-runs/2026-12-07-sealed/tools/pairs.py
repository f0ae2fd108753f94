#!/usr/bin/env python3
"""pairs.py SPANS.jsonl...: offload against the sealed relay (the simplest
tunnel with the same crypto) in the same boot and round, and each path
against WireGuard in its round: the busier router's MB per qemu CPU second
(per run, bytes over the larger of A's and B's qemu CPU), A's and B's, as
medians of the per-round ratios with a bootstrap 90 % interval of the
busier router's median. Spans as harness/anchor -routers 2 -out writes them;
off-regime runs (either guest timer over 15 % from 1.0) are left out."""
import json, random, statistics as st, sys

random.seed(1)
rounds = {}
for i, f in enumerate(sys.argv[1:]):
    for line in open(f):
        x = json.loads(line)
        rate = [r["guest_s"] / r["clock_s"] if r["clock_s"] else 1 for r in x["router"]]
        if any(abs(q - 1) > 0.15 for q in rate):
            continue
        mb = x["bytes"] / 1e6
        rounds.setdefault((i, x["boot"], x["round"]), {})[x["name"]] = (
            mb / max(r["qemu_s"] for r in x["router"]), mb / x["router"][0]["qemu_s"], mb / x["router"][1]["qemu_s"])


def boot90(v):
    bs = sorted(st.median(random.choices(v, k=len(v))) for _ in range(5000))
    return bs[250], bs[4750]


def pair(num, den, label):
    v = [(r[num][0] / r[den][0], r[num][1] / r[den][1], r[num][2] / r[den][2])
         for r in rounds.values() if num in r and den in r]
    if not v:
        return
    busy = [q[0] for q in v]
    lo, hi = boot90(busy)
    print("%-34s %2d pairs: busier %.2fx (90 %% %.2f-%.2f), A %.2fx, B %.2fx" % (
        label, len(v), st.median(busy), lo, hi, st.median(q[1] for q in v), st.median(q[2] for q in v)))


print("offload over the simplest tunnel, same round (above 1: offload is cheaper per byte)")
for eng in ["cryptodev", "afalg", "ctr-sw"]:
    pair(eng + "-64k", "relay-" + eng, eng)
pair("afalg-64k", "relay-cryptodev", "offload afalg / relay cryptodev")
print("each path over WireGuard, same round")
for name in ["relay", "relay-cryptodev", "relay-afalg", "relay-ctr-sw", "ipsec-dev", "ssh",
             "cryptodev-64k", "afalg-64k", "ctr-sw-64k"]:
    pair(name, "wireguard", name)
print("each path over ssh -L, same round")
for name in ["relay", "relay-cryptodev", "cryptodev-64k", "afalg-64k"]:
    pair(name, "ssh", name)
print("each path over IPsec on the device, same round")
for name in ["relay-cryptodev", "cryptodev-64k", "afalg-64k"]:
    pair(name, "ipsec-dev", name)
