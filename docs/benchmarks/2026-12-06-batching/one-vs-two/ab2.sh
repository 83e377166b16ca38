#!/usr/bin/env bash
# Traces off against the build before traces: the gateway (256 connections, 1 KiB GitHub-signed) and one consumer
# (log handler), A B A B, each on the same broker and Redis (scripts/stack), release builds.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
: "${BEFORE:?the release binaries of the commit before, e.g. a worktree of 4cb8535 built with cargo build --release}" "${BENCH_DIR:?a results directory of BENCH_ONLY=traces scripts/bench: its gateway config and secrets}"
eval "$(scripts/stack env)"
R=${R:-target/bench-ab}; mkdir -p $R/config
B=target/release/hookline-bench
declare -A GW=([before]=$BEFORE/hookline-gateway [after]=target/release/hookline-gateway [after1p]=target/release/hookline-gateway)
declare -A CO=([before]=$BEFORE/hookline-consumer [after]=target/release/hookline-consumer)
( for _ in $(seq 200); do printf '%s %s\n' "$(date -u +%T)" "$(cut -d' ' -f1-3 /proc/loadavg)"; sleep 5; done ) >$R/load.txt &
loadpid=$!
hz=$(getconf CLK_TCK)
for round in 1 2; do
  for build in before after after1p; do
    label=gateway-$build-r$round; topic=bench-ab-$(date +%s)-$label
    $B create-topic --topic $topic --partitions 6
    sed "s/^inbound_topic = .*/inbound_topic = \"$topic\"/" $BENCH_DIR/config/gateway-traces-gateway-off-r1.toml >$R/config/$label.toml
    if [[ $build == after1p ]]; then printf '[producer]\nbatch_from_in_flight = 0\n' >>$R/config/$label.toml; fi
    RUST_LOG=warn ${GW[$build]} --config $R/config/$label.toml >$R/$label.log 2>&1 &
    gw=$!
    for _ in $(seq 100); do curl -fsS -o /dev/null http://127.0.0.1:48090/readyz 2>/dev/null && break; sleep 0.1; done
    before_ticks=$(awk '{print $14+$15}' /proc/$gw/stat)
    $B loadgen --target 127.0.0.1:48080 --scheme github --secret-file $BENCH_DIR/secrets/github --topic $topic \
      --duration-s 10 --warm-up-s 1 --label $label --json $R/$label.json --concurrency 256 2>>$R/loadgen.log
    awk -v t="$(( $(awk '{print $14+$15}' /proc/$gw/stat) - before_ticks ))" -v hz=$hz 'BEGIN {printf "{\"gateway_cpu_s\": %.2f}\n", t/hz}' >$R/$label.cpu
    tail -n 1 $R/loadgen.log
    kill -TERM $gw; wait $gw || true
  done
done
kill $loadpid
