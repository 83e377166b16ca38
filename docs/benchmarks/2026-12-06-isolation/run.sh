#!/bin/bash
# issue 25 wall-clock runs: isolation A/B short and long, log handler vs Redis ceiling
cd <repo>; eval "$(scripts/stack env)"
B=target/release/hookline-bench; W=<results>/work; mkdir -p $W
(while true; do echo "$(date -u +%T) $(cat /proc/loadavg)"; sleep 5; done) > <results>/load.txt &
lp=$!
sampler() { # sampler <out>: last metrics of the newest consumer config's admin address, every 2 s
  while true; do f=$(ls -t $W/*.toml 2>/dev/null | head -1); [ -n "$f" ] && a=$(grep admin_addr $f | cut -d'"' -f2) && curl -s --max-time 1 http://$a/metrics | grep -E '^hookline_consumer_(deferred_total|events_total)' > $1.tmp 2>/dev/null && [ -s $1.tmp ] && { echo "== $f"; cat $1.tmp; } >> $1; sleep 2; done
}
for round in 1 2 3; do
  for b in base s2; do
    echo "== short $b $round"; $B consumer-http --consumer-bin <builds>/consumer-$b --work-dir $W --delays-ms --isolation-delays-ms 20 --json <results>/short-$b-$round.json
  done
done
for b in base s2; do
  sampler <results>/long-$b.metrics & sp=$!
  echo "== long $b"; $B consumer-http --consumer-bin <builds>/consumer-$b --work-dir $W --delays-ms --isolation-delays-ms 20 --isolation-events 300000 --timeout-s 600 --json <results>/long-$b.json
  kill $sp
done
for b in base s2; do
  echo "== log $b"; $B consumer --topic r25-log-$b-$(date +%s) --fill-s 5 --instances 1,2 --consumer-bin <builds>/consumer-$b --work-dir $W --json <results>/log-$b.json
  echo "== redis ceiling"; $B redis-ceiling --json <results>/redis-$b.json
done
kill $lp
echo DONE
