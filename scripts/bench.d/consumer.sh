# Sourced by scripts/bench: the consumer's comparisons (BENCH_ONLY=postgres, consumer-peer, backlog, traces). They
# use the helpers and variables scripts/bench defines before sourcing this file ($bench, $bin, $results, $run_id,
# ...).

# pin_processes CPUS PATTERN: every thread of every process whose command line matches PATTERN, onto CPUS.
pin_processes() {
  local pid
  for pid in $(pgrep -f "$2"); do taskset -a -p -c "$1" "$pid" >/dev/null; done
}

postgres_runs() {
  local schema=bench_$run_id pool=${BENCH_POSTGRES_POOL:-8} run=()
  if [[ -n ${BENCH_POSTGRES_CPU:-} ]]; then
    local others
    others=$(seq 0 $(($(nproc) - 1)) | grep -vx "$BENCH_POSTGRES_CPU" | paste -sd,)
    # The postmaster and its backends (new backends inherit the postmaster's affinity).
    pin_processes "$BENCH_POSTGRES_CPU" "postgres.*-p $POSTGRES_PORT|postgres: "
    pin_processes "$others" "kafka\\.Kafka|redis-server"
    run=(taskset -c "$others")
    say "PostgreSQL pinned to CPU $BENCH_POSTGRES_CPU; Kafka, Redis, the bench and the consumer to CPU $others"
  fi
  local common="url = \"$POSTGRES_URL?sslmode=require\"
password = { id = \"postgres\", file = \"$POSTGRES_PASSWORD_FILE\" }
ca_file = \"$POSTGRES_CA_FILE\"
pool_size = $pool"
  cat >"$results/config/postgres-setup.sql" <<SQL
CREATE SCHEMA IF NOT EXISTS $schema;
CREATE TABLE IF NOT EXISTS $schema.orders (id int PRIMARY KEY, status text NOT NULL, n bigint NOT NULL DEFAULT 0);
INSERT INTO $schema.orders (id, status) SELECT g, 'pending' FROM generate_series(0, 1023) AS g ON CONFLICT DO NOTHING;
SQL
  local r kind extra
  local update_sql="UPDATE $schema.orders SET n = n + 1 WHERE id = abs(hashtext(\$1)) % 1024 AND status = 'pending'"
  for r in $(seq "${BENCH_POSTGRES_REPEAT:-2}"); do
    cat >"$results/config/postgres-inbox-r$r.toml" <<TOML
[handler]
kind = "postgres"
[handler.postgres]
$common
[handler.postgres.inbox]
table = "$schema.inbox_r$r"
body = "bytea"
TOML
    cat >"$results/config/postgres-update-r$r.toml" <<TOML
[handler]
kind = "postgres"
[handler.postgres]
$common
dedupe_table = "$schema.processed_r$r"
[[handler.postgres.statements]]
sql = "$update_sql"
params = ["event.id"]
rows = 1
TOML
    sed "s/processed_r$r/processed_before_r$r/" "$results/config/postgres-update-r$r.toml" \
      >"$results/config/postgres-update-before-r$r.toml"
    say "postgres ceiling: INSERT ... ON CONFLICT DO NOTHING RETURNING over $pool connections"
    "${run[@]}" "$bench" postgres-ceiling --table "$schema.ceiling_r$r" --connections "$pool" --duration-s "$duration_s" \
      --json "$results/postgres-ceiling-r$r.json"
    local kinds=${BENCH_POSTGRES_KINDS:-log inbox update} consumer_bin
    [[ -z ${BENCH_POSTGRES_BEFORE:-} ]] || kinds=${kinds/update/update-before update}
    for kind in $kinds; do
      say "consumer: $kind (1 instance, $(cut -d' ' -f1 /proc/loadavg) load)"
      extra=()
      consumer_bin=$bin/hookline-consumer
      [[ $kind != update-before ]] || consumer_bin=$BENCH_POSTGRES_BEFORE
      [[ $kind == log ]] || extra=(--overlay "$results/config/postgres-$kind-r$r.toml" --setup-sql "$results/config/postgres-setup.sql")
      "${run[@]}" "$bench" consumer --topic "bench-$run_id-postgres-$kind-r$r" --partitions 6 --fill-s "$consumer_fill_s" \
        --consumer-bin "$consumer_bin" --instances 1 --work-dir "$results/config" \
        --json "$results/postgres-consumer-$kind-r$r.json" "${extra[@]}"
    done
    # The update's work by hand (its tables exist now): the dedupe insert and the UPDATE, nothing checked.
    say "postgres ceiling of the update's transaction: BEGIN, the insert and the UPDATE, COMMIT"
    "${run[@]}" "$bench" postgres-ceiling --table "$schema.ceiling_update_r$r" --connections "$pool" \
      --duration-s "$duration_s" --work-sql "$update_sql" --json "$results/postgres-ceiling-update-r$r.json"
  done
  if [[ -n ${BENCH_POSTGRES_CPU:-} ]]; then
    pin_processes "0-$(($(nproc) - 1))" "postgres.*-p $POSTGRES_PORT|postgres: |kafka\\.Kafka|redis-server"
  fi
}

consumer_peer_runs() {
  say "consumer: hookline beside the naive consumer (StreamConsumer loop, SET NX, same sink), A B A B"
  "$bench" consumer-peer --consumer-bin "$bin/hookline-consumer" --work-dir "$results/config" \
    --json "$results/consumer-peer.json"
}

# Issue 35: a large backlog drains at the rate of a small one. The same consumer on a 1 s fill and on a fill of at
# least BENCH_BACKLOG_RECORDS records (the fill stops at that count; --fill-s only gives it room), one after the
# other, BENCH_BACKLOG_REPEAT times; librdkafka's statistics (records received against records handled, its queue)
# once a second in each consumer's log.
backlog_runs() {
  local records=${BENCH_BACKLOG_RECORDS:-1000000} repeat=${BENCH_BACKLOG_REPEAT:-2} r fill
  printf '[kafka.properties]\n"statistics.interval.ms" = "1000"\n' >"$results/config/statistics.toml"
  for r in $(seq 1 "$repeat"); do
    for fill in small large; do
      local args=(--fill-s "$consumer_fill_s")
      [[ $fill == small ]] || args=(--fill-s 120 --fill-records "$records")
      say "consumer backlog: $fill fill, round $r ($(cut -d' ' -f1 /proc/loadavg) load)"
      "$bench" consumer --topic "bench-$run_id-backlog-$fill-r$r" --partitions 6 "${args[@]}" --timeout-s 600 \
        --consumer-bin "$bin/hookline-consumer" --instances 1 --work-dir "$results/config" \
        --overlay "$results/config/statistics.toml" --consumer-log-dir "$results/logs/backlog-$fill-r$r" \
        --json "$results/backlog-$fill-r$r.json"
    done
  done
}

# Issue 24: what traces cost. The collector is a real Jaeger v2 (memory storage) on loopback, on the same two
# cores: at 100 % its own CPU is part of what the machine pays, so each run also records the gateway's CPU seconds
# (*.cpu), the cost that stays with the gateway wherever the collector runs. The consumer's records come from the
# fill (no traceparent): sampled records start their own traces at the given ratio.
traces_runs() {
  local jaeger_bin=${JAEGER:-$(tests/tools/jaeger/install)}
  local otlp_port=$((port_base + 21)) query_port=$((port_base + 22)) query_grpc_port=$((port_base + 23))
  local jaeger_config=$results/config/jaeger.yaml
  cat >"$jaeger_config" <<YAML
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: 127.0.0.1:$query_port
    grpc:
      endpoint: 127.0.0.1:$query_grpc_port
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:$otlp_port
processors:
  batch:
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
YAML
  "$jaeger_bin" --config "$jaeger_config" >"$results/logs/jaeger.log" 2>&1 &
  local jaeger_pid=$!
  pids+=("$jaeger_pid")
  wait_http "http://127.0.0.1:$query_port/api/services"
  local endpoint=http://127.0.0.1:$otlp_port mode ratio
  for round in 1 2; do
    for mode in off 1pct all; do
      case $mode in off) ratio="" ;; 1pct) ratio=0.01 ;; all) ratio=1 ;; esac
      if [[ -z $ratio ]]; then
        gateway_run "traces-gateway-$mode-r$round" github --concurrency "$concurrency"
      else
        OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint GATEWAY_EXTRA_TOML=$'[telemetry]\ntrace_sample_ratio = '"$ratio" \
          gateway_run "traces-gateway-$mode-r$round" github --concurrency "$concurrency"
      fi
    done
  done
  for round in 1 2; do
    for mode in off 1pct all; do
      case $mode in off) ratio="" ;; 1pct) ratio=0.01 ;; all) ratio=1 ;; esac
      local overlay=$results/config/traces-consumer-$mode.toml extra=()
      if [[ -n $ratio ]]; then
        printf '[telemetry]\ntrace_sample_ratio = %s\n' "$ratio" >"$overlay"
        extra=(--overlay "$overlay")
      fi
      say "consumer: traces $mode, round $round (1 instance, log handler)"
      if [[ -n $ratio ]]; then
        OTEL_EXPORTER_OTLP_ENDPOINT=$endpoint "$bench" consumer --topic "bench-$run_id-traces-consumer-$mode-r$round" \
          --partitions 6 --fill-s "$consumer_fill_s" --consumer-bin "$bin/hookline-consumer" --instances 1 \
          --work-dir "$results/config" --json "$results/traces-consumer-$mode-r$round.json" "${extra[@]}"
      else
        "$bench" consumer --topic "bench-$run_id-traces-consumer-$mode-r$round" --partitions 6 \
          --fill-s "$consumer_fill_s" --consumer-bin "$bin/hookline-consumer" --instances 1 \
          --work-dir "$results/config" --json "$results/traces-consumer-$mode-r$round.json"
      fi
    done
  done
  curl -fsS "http://127.0.0.1:$query_port/api/services" >"$results/jaeger-services.json" || true
  kill -TERM "$jaeger_pid"; wait "$jaeger_pid" || true
}
