# Sourced by scripts/bench: BENCH_ONLY=capacity, the per-unit figures of docs/capacity.md measured on the machine
# at hand, then the capacity table computed from them (scripts/bench.d/capacity_table.py). Uses the helpers and
# variables scripts/bench defines before sourcing this file ($bench, $bin, $results, $run_id, gateway_run, ...).
#
#   BENCH_CAPACITY_RATE=3000   the open-loop rate at which the gateway's time to 2xx is read beside a bare
#                              producer's acknowledgement (same broker, same run)
#   BENCH_CAPACITY_FILL_S=10   seconds of records the consumer runs drain (one instance, per body size)
#   BENCH_CAPACITY_CHECK_RECORDS=1100000  records of 1 KiB one consumer drains to check the Redis prediction (the
#                              per-event bytes of the short 1 KiB run times these events, against Redis's growth)

# Bytes of record batches the topic's partitions hold on this broker's disk (one replica): their segments' `.log`
# files only, since each segment's index files are preallocated (10 MiB each) whatever the segment holds.
topic_disk_bytes() { # topic
  local data=${STACK_DIR:-.stack}/kafka/data
  cat "$data/$1"-[0-9]*/*.log 2>/dev/null | wc -c
}

# Records the topic holds (the sum of its partitions' end offsets: the idempotent producer writes each once).
topic_records() { # topic
  scripts/stack kafka-tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$KAFKA_BROKERS" --topic "$1" \
    2>/dev/null | awk -F: '{ n += $NF } END { print n + 0 }'
}

# An overlay giving the consumer the default dedupe window (72 h): the bench's own config keeps 10 minutes, which
# reads one or two buckets per claim where the default reads 13 or 14.
default_window_overlay() {
  printf '[redis]\ndedupe_ttl_s = 259200\n' >"$results/config/default-window.toml"
  printf '%s' "$results/config/default-window.toml"
}

redis_used_memory() {
  redis-cli -u "$REDIS_URL" info memory | awk -F: '/^used_memory:/ { print $2 + 0 }'
}

capacity_runs() {
  local rate=${BENCH_CAPACITY_RATE:-3000} fill_s=${BENCH_CAPACITY_FILL_S:-10}
  local redis_pid kib bytes label
  redis_pid=$(cat "${STACK_DIR:-.stack}/redis/redis.pid")

  # The gateway's rate per core and the broker's bytes per record, closed loop at moderate concurrency (64).
  for kib in 1 16; do
    bytes=$((kib * 1024)); label=capacity-gateway-${kib}k
    gateway_run "$label" github --concurrency 64 --body-bytes "$bytes"
    # Let the broker flush its segments, then read what the topic holds.
    sleep 2
    printf '{"disk_bytes": %d, "records": %d}\n' "$(topic_disk_bytes "bench-$run_id-$label")" \
      "$(topic_records "bench-$run_id-$label")" >"$results/$label.disk"
  done

  # Time to 2xx against the bare producer's acknowledgement at the same open-loop rate, one after the other.
  say "bare producer, open loop at $rate/s"
  "$bench" kafka-ceiling --topic "bench-$run_id-capacity-bare" --concurrency 64 --rate "$rate" \
    --duration-s "$duration_s" --json "$results/capacity-bare-open.json" 2>>"$results/logs/kafka-ceiling.log"
  tail -n 1 "$results/logs/kafka-ceiling.log" >&2
  # The like-for-like pair: at this rate fewer than `batch_from_in_flight` (64) produces wait at once, so the
  # gateway sends through its producer with `linger.ms = 0`; the bare producer at the same linger.
  say "bare producer at linger.ms 0 (the gateway's at this load), open loop at $rate/s"
  "$bench" kafka-ceiling --topic "bench-$run_id-capacity-bare0" --concurrency 64 --rate "$rate" --linger-ms 0 \
    --duration-s "$duration_s" --json "$results/capacity-bare-open-linger0.json" 2>>"$results/logs/kafka-ceiling.log"
  tail -n 1 "$results/logs/kafka-ceiling.log" >&2
  gateway_run capacity-gateway-open github --concurrency 64 --rate "$rate"

  # One consumer instance (log handler): events/s, its CPU per event, Redis's CPU and memory per remembered event.
  for kib in 1 16; do
    bytes=$((kib * 1024)); label=capacity-consumer-${kib}k
    local redis_before memory_before
    redis_before=$(cpu_ticks "$redis_pid"); memory_before=$(redis_used_memory)
    say "consumer: one instance, ${kib} KiB bodies, ${fill_s} s of records"
    "$bench" consumer --topic "bench-$run_id-$label" --partitions 6 --fill-s "$fill_s" --body-bytes "$bytes" \
      --consumer-bin "$bin/hookline-consumer" --instances 1 --work-dir "$results/config" \
      --overlay "$(default_window_overlay)" --json "$results/$label.json" 2>>"$results/logs/consumer.log"
    awk -v r="$(( $(cpu_ticks "$redis_pid") - redis_before ))" -v hz="$clock_ticks" \
      -v m="$(( $(redis_used_memory) - memory_before ))" \
      'BEGIN { printf "{\"redis_cpu_s\": %.2f, \"redis_memory_bytes\": %d}\n", r / hz, m }' >"$results/$label.redis"
  done

  # The Redis prediction checked: a run of at least 1M events, its Redis growth against the short run's bytes per
  # event times its events (the table's 15 % check).
  local check_records=${BENCH_CAPACITY_CHECK_RECORDS:-1100000} memory_before
  label=capacity-check
  memory_before=$(redis_used_memory)
  say "consumer: the Redis prediction over $check_records events of 1 KiB"
  "$bench" consumer --topic "bench-$run_id-$label" --partitions 6 --fill-s 300 --fill-records "$check_records" \
    --body-bytes 1024 --consumer-bin "$bin/hookline-consumer" --instances 1 --timeout-s 1500 \
    --work-dir "$results/config" --overlay "$(default_window_overlay)" --json "$results/$label.json" \
    2>>"$results/logs/consumer.log"
  printf '{"redis_memory_bytes": %d}\n' "$(( $(redis_used_memory) - memory_before ))" >"$results/$label.redis"

  python3 scripts/bench.d/capacity_table.py "$results" | tee "$results/capacity.md"
}

# BENCH_ONLY=dedupe-ab: the consumer with this build's dedupe layout against another build's (the previous layout:
# BENCH_DEDUPE_BEFORE, that build's hookline-consumer), A B A B on topics of the same records: each run's events/s
# and consumer CPU per event (its JSON), and Redis's CPU and used_memory growth per event, on a Redis of its own
# (started here, flushed before each run, serving nothing else). Both builds read the same config, at the default window (72 h).
#   BENCH_DEDUPE_BEFORE=path         the other build's hookline-consumer (required)
#   BENCH_DEDUPE_REDIS_PORT=16998    the port of that Redis (127.0.0.1)
#   BENCH_DEDUPE_RECORDS=300000      records of 1 KiB per run
#   BENCH_DEDUPE_REPEAT=2            rounds (each: before, then this build; the second round in reverse order)
dedupe_ab_runs() {
  local before=${BENCH_DEDUPE_BEFORE:?BENCH_DEDUPE_BEFORE: the other build\'s hookline-consumer}
  local records=${BENCH_DEDUPE_RECORDS:-300000} repeat=${BENCH_DEDUPE_REPEAT:-2}
  local port=${BENCH_DEDUPE_REDIS_PORT:-16998} redis_pid round order which consumer_bin label redis_before memory_before
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$results/logs/dedupe-redis.log" 2>&1 &
  redis_pid=$!; pids+=("$redis_pid")
  local REDIS_URL=redis://127.0.0.1:$port
  export REDIS_URL
  until redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1; do sleep 0.2; done
  for ((round = 1; round <= repeat; round++)); do
    order="before this"; ((round % 2 == 0)) && order="this before"
    for which in $order; do
      consumer_bin=$bin/hookline-consumer; [[ $which == before ]] && consumer_bin=$before
      label=dedupe-ab-$round-$which
      redis-cli -u "$REDIS_URL" flushall sync >/dev/null
      sleep 1
      redis_before=$(cpu_ticks "$redis_pid"); memory_before=$(redis_used_memory)
      say "dedupe A B: round $round, $which ($consumer_bin), $records records"
      "$bench" consumer --topic "bench-$run_id-$label" --partitions 6 --fill-s 120 --fill-records "$records" \
        --body-bytes 1024 --consumer-bin "$consumer_bin" --instances 1 --timeout-s 900 \
        --work-dir "$results/config" --overlay "$(default_window_overlay)" --json "$results/$label.json" \
        2>>"$results/logs/consumer.log"
      awk -v r="$(( $(cpu_ticks "$redis_pid") - redis_before ))" -v hz="$clock_ticks" \
        -v m="$(( $(redis_used_memory) - memory_before ))" -v n="$records" -v load="$(cut -d' ' -f1 /proc/loadavg)" \
        'BEGIN { printf "{\"redis_cpu_s\": %.2f, \"redis_cpu_us_per_event\": %.2f, \"redis_memory_bytes\": %d, \"redis_bytes_per_event\": %.1f, \"load_after\": %s}\n", r / hz, r / hz * 1e6 / n, m, m / n, load }' \
        >"$results/$label.redis"
      cat "$results/$label.redis" >&2
    done
  done
  python3 scripts/bench.d/dedupe_ab.py "$results" | tee "$results/dedupe-ab.md"
}

# BENCH_ONLY=latency: the capacity table's latency pair alone, repeated: at BENCH_CAPACITY_RATE open loop (64
# connections), a bare producer at the gateway's linger at that load (`linger.ms` 0: fewer than
# `batch_from_in_flight` produces wait at once) and then the gateway, A B A B (BENCH_LATENCY_REPEAT rounds, every
# other one in reverse order), each a fresh topic; scripts/bench.d/latency_pair.py prints the pairs.
latency_runs() {
  local rate=${BENCH_CAPACITY_RATE:-3000} repeat=${BENCH_LATENCY_REPEAT:-3} round order which
  for ((round = 1; round <= repeat; round++)); do
    order="bare gateway"; ((round % 2 == 0)) && order="gateway bare"
    for which in $order; do
      if [[ $which == bare ]]; then
        say "bare producer at linger.ms 0, open loop at $rate/s (round $round)"
        "$bench" kafka-ceiling --topic "bench-$run_id-latency-bare-$round" --concurrency 64 --rate "$rate" \
          --linger-ms 0 --duration-s "$duration_s" --json "$results/latency-bare-$round.json" \
          2>>"$results/logs/kafka-ceiling.log"
        tail -n 1 "$results/logs/kafka-ceiling.log" >&2
      else
        gateway_run "latency-gateway-$round" github --concurrency 64 --rate "$rate"
      fi
    done
  done
  python3 scripts/bench.d/latency_pair.py "$results" | tee "$results/latency.md"
}
