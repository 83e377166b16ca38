import json, re, sys, glob, os
# usage: summarise.py results_dir
d = sys.argv[1]
for js in sorted(glob.glob(os.path.join(d, 'backlog-*.json'))):
    name = os.path.basename(js)[:-5]
    r = json.load(open(js))
    e2e = [row for row in r['rows'] if row['kind'] == 'end_to_end'][0]
    raw = [row for row in r['rows'] if row['kind'] == 'raw'][0]
    logs = glob.glob(os.path.join(d, 'logs', name, '*.log'))
    rx = qmax = qbmax = drops = fetches = zb = pmax = 0
    for log in logs:
        for line in open(log, errors='replace'):
            if 'librdkafka statistics' not in line:
                continue
            g = lambda k: int(re.search(k + r'=(-?\d+)', line).group(1))
            rx = max(rx, g('rx_records')); qmax = max(qmax, g('queued_records')); qbmax = max(qbmax, g('queued_bytes'))
            per = [int(x) for x in re.findall(r'fetchq_cnt=(\d+)', line)]
            pmax = max([pmax] + per)
            drops = max(drops, g('outdated_drops')); fetches = max(fetches, g('fetch_requests')); zb = max(zb, g('zbuf_grow'))
    cpu = e2e.get('cpu') or {}
    print(f"{name}: events={r['events']} raw={raw['events_per_s']:.0f}/s e2e={e2e['events_per_s']:.0f}/s "
          f"cpu={cpu.get('process_us', 0):.1f}us/event duration={e2e['duration_s']:.1f}s "
          f"rx_records={rx} amplification={rx / r['events']:.2f} max_queued_sum={qmax} max_partition_fetchq_cnt={pmax} max_queued_MiB_sum={qbmax/2**20:.0f} "
          f"outdated_drops={drops} fetch_requests={fetches} zbuf_grow={zb} dup={e2e['duplicates']} dlq={e2e['dead_lettered']}")
