import json,sys,collections,subprocess,re
# Run in an anchor -out DIR: its routers2-spans-*.jsonl and profiles-routers2/.
# split.py SPANS... : per-router ms/MB split, offload's user+sys split by its profile's categories
spans=[f for f in sys.argv[1:] if f.endswith('.jsonl')]
agg=collections.defaultdict(lambda:{"mb":0,"q":[0,0],"t":[collections.Counter(),collections.Counter()]})
for fn in spans:
    for l in open(fn):
        r=json.loads(l)
        if r.get("error") or not r.get("router"): continue
        a=agg[r["name"]]; a["mb"]+=r["bytes"]/1e6
        for i,x in enumerate(r["router"]):
            a["q"][i]+=x["qemu_s"]; a["t"][i].update(x["guest_ticks"])
def split(name,i):
    a=agg[name]; ms=1000*a["q"][i]/a["mb"]; t=a["t"][i]; busy=t["User"]+t["Sys"]+t["Softirq"]+t["IRQ"]
    return ms, ms*(t["User"]+t["Sys"])/busy, ms*(t["Softirq"]+t["IRQ"])/busy
PATHS=[p for p in ["afalg-64k-base","cryptodev-64k-base","afalg-64k","cryptodev-64k"] if __import__("os").path.exists(f"profiles-routers2/tmp_anchor_prof_{p}-client-A.prof")]
def cats(prof):
    out=subprocess.run([__import__("os").path.join(__import__("os").path.dirname(__import__("os").path.abspath(__file__)),"pprof-split.sh"),prof],capture_output=True,text=True).stdout
    return {m.group(2):float(m.group(1)) for m in re.finditer(r"^\s+([0-9.]+)%\s+(.*)$",out,re.M)}
for name in ["plaintext","wireguard","relay","ssh","ipsec-dev","ctr-sw-64k"]:
    for i,lab in enumerate("AB"):
        ms,us,sq=split(name,i); print(f"{name} {lab}: {ms:.1f} ms/MB: user+sys {us:.1f}, softirq {sq:.1f}")
for path in PATHS:
    for i,(lab,end) in enumerate([("A","client-A"),("B","server-B")]):
        ms,us,sq=split(path,i)
        c=cats(f"profiles-routers2/tmp_anchor_prof_{path}-{end}.prof")
        print(f"{path} {lab}: {ms:.1f} ms/MB: softirq {sq:.1f}, user+sys {us:.1f} = " + ", ".join(f"{k} {us*v/100:.1f}" for k,v in sorted(c.items(),key=lambda kv:-kv[1])))
