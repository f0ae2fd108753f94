import json,sys,statistics as st,random
# pairs.py SPANS...: the -offload build over the -baseline one (the *-base paths), same boot and round, busier router and each
runs={}
for i,fn in enumerate(sys.argv[1:]):
    for l in open(fn):
        r=json.loads(l)
        if r.get("error") or not r.get("router"): continue
        q=[x["qemu_s"] for x in r["router"]]
        rates=[x["guest_s"]/r["host_s"] for x in r["router"]] if r.get("host_s") else [1,1]
        runs[(i,r["boot"],r["round"],r["name"])]=(r["bytes"]/1e6/max(q), r["bytes"]/1e6/q[0], r["bytes"]/1e6/q[1], rates)
def pairs(a,b,idx=0):
    out=[]
    for k,v in runs.items():
        if k[3]==a:
            kb=k[:3]+(b,)
            if kb in runs: out.append(v[idx]/runs[kb][idx])
    return out
def boot(xs,n=2000):
    ms=sorted(st.median(random.choices(xs,k=len(xs))) for _ in range(n)); return ms[int(.05*n)],ms[int(.95*n)]
for a,b in [("afalg-64k","afalg-64k-base"),("cryptodev-64k","cryptodev-64k-base")]:
    for idx,lab in [(0,"busier"),(1,"A"),(2,"B")]:
        p=pairs(a,b,idx)
        if p: print(f"{a} / {b} [{lab}]: {len(p)} pairs, median {st.median(p):.3f} (range {min(p):.2f}-{max(p):.2f}), mean {st.mean(p):.3f}, 90% CI of median {boot(p)[0]:.3f}-{boot(p)[1]:.3f}")
allp=pairs("afalg-64k","afalg-64k-base")+pairs("cryptodev-64k","cryptodev-64k-base")
if allp: print(f"all busier: {len(allp)} pairs, median {st.median(allp):.3f}, mean {st.mean(allp):.3f}, 90% CI {boot(allp)[0]:.3f}-{boot(allp)[1]:.3f}")
# per path pooled busier MB/s (bytes over sum of max)
import collections
agg=collections.defaultdict(lambda:[0,0,0,0,0])
for k,v in runs.items():
    pass
