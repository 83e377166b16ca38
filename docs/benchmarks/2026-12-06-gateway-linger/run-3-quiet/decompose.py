#!/usr/bin/env python3
# The generator's time to 2xx beside the gateway's own request and produce-to-ack histograms, per run:
#   decompose.py <results dir of scripts/bench>
import json,re,glob,os,sys
R=sys.argv[1] if len(sys.argv) > 1 else '.'
def hist(text,name,label):
    b={}; s=c=None
    for line in text.splitlines():
        if not line.startswith(name): continue
        if label not in line: continue
        m=re.match(name+r'_bucket\{.*le="([^"]+)"\} (\S+)',line)
        if m: b[float(m.group(1)) if m.group(1)!='+Inf' else float('inf')]=b.get(float(m.group(1)) if m.group(1)!='+Inf' else float('inf'),0)+float(m.group(2))
        m=re.match(name+r'_sum\{.*\} (\S+)',line)
        if m: s=(s or 0)+float(m.group(1))
        m=re.match(name+r'_count\{.*\} (\S+)',line)
        if m: c=(c or 0)+float(m.group(1))
    return b,s,c
rows=[]
for f in sorted(glob.glob(R+'/linger-*.json')):
    label=os.path.basename(f)[:-5]
    d=json.load(open(f)); load=d.get('load',{})
    t=load.get('time_to_2xx',{})
    mfile=R+'/'+label+'.metrics'
    line=f"| {label} | {int(load.get('acknowledged_per_s',0))} | {t.get('p50_ms')} | {t.get('p99_ms')} | {t.get('mean_ms','-')} |"
    if os.path.exists(mfile):
        txt=open(mfile).read()
        rb,rs,rc=hist(txt,'hookline_gateway_request_duration_seconds','outcome="accepted"')
        pb,ps,pc=hist(txt,'hookline_gateway_produce_duration_seconds','outcome="acked"')
        def frac(b,c,le): return f"{100*b.get(le,0)/c:.0f}%" if c else '-'
        line+=f" {1000*rs/rc:.2f} | {frac(rb,rc,0.002)} | {frac(rb,rc,0.005)} | {1000*ps/pc:.2f} | {frac(pb,pc,0.002)} | {frac(pb,pc,0.005)} |" if rc and pc else " - | - | - | - | - | - |"
    else: line+=" - | - | - | - | - | - |"
    rows.append(line)
print("| run | 2xx/s | generator p50 ms | generator p99 ms | generator mean ms | gateway request mean ms | request <= 2 ms | <= 5 ms | produce-to-ack mean ms | ack <= 2 ms | <= 5 ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(rows))
