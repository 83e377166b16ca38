#!/usr/bin/env bash
# Issue 11, items 13 and 2, before (0e049b6) and after (the merge of issue 11): gateway CPU per request (native
# /proc/<pid>/stat, and instructions under callgrind) and peak RSS under bodies of one-byte chunks.
#
#   run.sh cpu|callgrind|chunked <before-gateway> <after-gateway> <hookline-bench> [out-dir]
#
# The binaries are release builds with line tables (CARGO_PROFILE_RELEASE_DEBUG=line-tables-only; debug info
# changes no generated code), built as:
#   git worktree add --detach /tmp/hl-before 0e049b6
#   (cd /tmp/hl-before && CARGO_TARGET_DIR=/tmp/hl-gwbench/target CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
#      cargo build --release --locked -p hookline-gateway)   # then copy target/release/gateway to before/
#   (cd <this branch> && same env: cargo build --release --locked -p hookline-gateway -p hookline-bench)
# Both gateways get the same config file (no key only one of them knows); the after version's new limits take
# their defaults. Needs the stack up with KAFKA_BROKERS set (scripts/stack up; eval "$(scripts/stack env)").
# Every loop is bounded in count, every wait in time. Traffic is to 127.0.0.1 only.
set -euo pipefail
what=$1 before_bin=$2 after_bin=$3 bench=$4
out=${5:-$(cd "$(dirname "$0")" && pwd)/results}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
: "${KAFKA_BROKERS:?eval \"\$(scripts/stack env)\" first}"
port=${GWBENCH_PORT:-48380}
admin_port=$((port + 10))
cpu_requests=${GWBENCH_CPU_REQUESTS:-20000}
cpu_rounds=${GWBENCH_CPU_ROUNDS:-3}
callgrind_requests=${GWBENCH_CALLGRIND_REQUESTS:-2000}
concurrency=${GWBENCH_CONCURRENCY:-8}
say() { printf 'gwbench: %s\n' "$*" >&2; }
load() { printf '%s %s load %s\n' "$(date -u +%T)" "$1" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"; }

secrets=${GWBENCH_SECRETS:-/tmp/hl-gwbench/secrets}  # outside the results: never committed
mkdir -p "$secrets"
[ -s "$secrets/github" ] || head -c 32 /dev/urandom | sha256sum | cut -c1-40 >"$secrets/github"

config=$out/gateway.toml
cat >"$config" <<TOML
listen_addr = "127.0.0.1:$port"
admin_addr = "127.0.0.1:$admin_port"
[kafka]
brokers = "$KAFKA_BROKERS"
inbound_topic = "webhooks.inbound"
[limits]
max_in_flight = 4096
request_deadline_ms = 60000
body_read_timeout_ms = 60000
[[sources]]
name = "bench-github"
scheme = "github"
type_from_header = true
secrets = [{ id = "bench", file = "$secrets/github" }]
max_body_bytes = 2097152
TOML

pid=""
stop() { # SIGTERM (drain), bounded wait
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap stop EXIT
wait_ready() { # bounded: 120 s (valgrind starts slowly)
  for _ in $(seq 1200); do
    curl -fsS -o /dev/null "http://127.0.0.1:$admin_port/readyz" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { say "gateway exited"; return 1; }
    sleep 0.1
  done
  say "gateway not ready"; return 1
}
start() { # label topic [wrapper...] -- binary
  local label=$1 topic=$2; shift 2
  sed -i "s|^inbound_topic = .*|inbound_topic = \"$topic\"|" "$config"
  RUST_LOG=warn "$@" --config "$config" >"$out/gateway-$label.log" 2>&1 &
  pid=$!
  wait_ready
}
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
loadgen() { # label requests topic. No --topic check: this loadgen expects the after version's GitHub event ids
  # (the body's SHA-256), which the before version does not use; every answer must be a 202 instead.
  "$bench" loadgen --target "127.0.0.1:$port" --scheme github --secret-file "$secrets/github" \
    --concurrency "$concurrency" --requests "$2" --duration-s 600 --quiet --label "$1" --json "$out/$1.json" \
    2>>"$out/loadgen.log"
  grep -q '"statuses": {\s*"202": '"$2"'\s*}' <(tr -d '\n' <"$out/$1.json") || { say "$1: not all $2 answers were 202"; return 1; }
}
bin_of() { case $1 in before) echo "$before_bin" ;; after) echo "$after_bin" ;; esac; }
run_id=$(date -u +%s)

case $what in
cpu)
  # Gateway CPU seconds (utime + stime) over exactly $cpu_requests closed-loop requests, after 2,000 warm-up
  # requests; alternating before/after, $cpu_rounds rounds.
  for round in $(seq "$cpu_rounds"); do
    for version in before after; do
      label=cpu-$version-$round topic=gwbench-$run_id-cpu-$version-$round
      "$bench" create-topic --topic "$topic" --partitions 6
      start "$label" "$topic" "$(bin_of $version)"
      loadgen "$label-warmup" 2000 "$topic"
      load "$label-start"
      t0=$(ticks "$pid")
      loadgen "$label" "$cpu_requests" "$topic"
      t1=$(ticks "$pid")
      load "$label-end"
      printf '{"label": "%s", "requests": %s, "gateway_cpu_ticks": %s, "clk_tck": %s, "peak_rss_kib": %s}\n' \
        "$label" "$cpu_requests" "$((t1 - t0))" "$(getconf CLK_TCK)" "$(hwm "$pid")" >"$out/$label.cpu.json"
      say "$label: $((t1 - t0)) ticks for $cpu_requests requests"
      stop
    done
  done
  ;;
callgrind)
  # Instructions under callgrind over exactly $callgrind_requests requests: startup and 200 warm-up requests go
  # to dump part 1 (counters zeroed by the dump), the measured requests to part 2.
  for version in before after; do
    label=callgrind-$version topic=gwbench-$run_id-callgrind-$version
    "$bench" create-topic --topic "$topic" --partitions 6
    start "$label" "$topic" valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out.$version" \
      "$(bin_of $version)"
    loadgen "$label-warmup" 200 "$topic"
    timeout 120 callgrind_control -d "$pid" >>"$out/callgrind-control.log" 2>&1
    load "$label-start"
    loadgen "$label" "$callgrind_requests" "$topic"
    load "$label-end"
    timeout 120 callgrind_control -d "$pid" >>"$out/callgrind-control.log" 2>&1
    stop
  done
  ;;
chunked)
  # Peak RSS (VmHWM) of a fresh gateway per run, N concurrent 1 MB bodies in one-byte chunks (forged signature:
  # the attacker's case; the body is read whole, then refused 401).
  for n in ${GWBENCH_CHUNKED_N:-1 20 40}; do
    for version in before after; do
      label=chunked-$version-$n
      start "$label" webhooks.inbound "$(bin_of $version)"
      load "$label-start"
      idle_hwm=$(hwm "$pid") idle_rss=$(rss "$pid")
      client=$(timeout 600 python3 "$repo/bench/chunked_bodies.py" --port "$port" --concurrency "$n" \
        --body-bytes 1000000 || true)
      sleep 1
      load "$label-end"
      printf '{"label": "%s", "concurrency": %s, "idle_hwm_kib": %s, "idle_rss_kib": %s, "peak_hwm_kib": %s, "rss_after_kib": %s, "client": %s}\n' \
        "$label" "$n" "$idle_hwm" "$idle_rss" "$(hwm "$pid")" "$(rss "$pid")" "${client:-null}" >"$out/$label.json"
      say "$(cat "$out/$label.json")"
      stop
    done
  done
  ;;
*) say "unknown: $what"; exit 2 ;;
esac
