# Sourced by scripts/bench: the gateway's comparisons (BENCH_ONLY=flood, security, batching, linger). They use
# the helpers and variables scripts/bench defines before sourcing this file (start_gateway, gateway_run, $bench,
# $results, $run_id, ...).

# Issue 11: GitHub's accepted rate beside a forged SendGrid flood, against the same load alone (target >= 0.8), with
# the defaults and with a per-address request rate (`limits.peer_rate_per_s`). GitHub's 64 workers each send from
# their own address (as providers send from many), at a few hundred requests/s each: under the limit.
# BENCH_FLOOD_REPEAT=N repeats the four runs N times (labels -r2, -r3, ...): on a shared machine, pairs that ran
# back to back are what compare.
flood_runs() {
  local github=(github --concurrency 64 --bind 127.0.1.1+64) r suffix
  for r in $(seq "${BENCH_FLOOD_REPEAT:-1}"); do
    suffix=""; [[ $r == 1 ]] || suffix=-r$r
    gateway_run "gateway-closed-github-64$suffix" "${github[@]}"
    gateway_flood_run "gateway-closed-github-64-sendgrid-flood$suffix" 256 "${github[@]:1}"
    GATEWAY_LIMITS='peer_rate_per_s = 500' gateway_run "gateway-closed-github-64-peer-limit$suffix" "${github[@]}"
    GATEWAY_LIMITS='peer_rate_per_s = 500' \
      gateway_flood_run "gateway-closed-github-64-peer-limit-sendgrid-flood$suffix" 256 "${github[@]:1}"
  done
}

# Issue 21: what TLS, SASL and the record MAC cost. Runs alternate (plaintext, SASL_SSL, mutual TLS, then again),
# so pairs that ran close together compare on a shared machine. The topic check reads over the plaintext listener
# of the same broker.
security_runs() {
  local sasl="[kafka.tls]
ca_file = \"$KAFKA_CA_FILE\"
[kafka.sasl]
mechanism = \"SCRAM-SHA-512\"
username = \"$KAFKA_SASL_USERNAME\"
password = { id = \"kafka\", file = \"$KAFKA_SCRAM_PASSWORD_FILE\" }"
  local mtls="[kafka.tls]
ca_file = \"$KAFKA_CA_FILE\"
client_cert_file = \"$KAFKA_CLIENT_CERT_FILE\"
client_key = { id = \"kafka-client-key\", file = \"$KAFKA_CLIENT_KEY_FILE\" }"
  local c r
  for c in 256 64; do
    for r in 1 2; do
      gateway_run "security-gateway-$c-plaintext-r$r" github --concurrency "$c"
      GATEWAY_BROKERS=$KAFKA_SASL_SSL_BROKERS GATEWAY_KAFKA_SECURITY=$sasl \
        gateway_run "security-gateway-$c-sasl-ssl-r$r" github --concurrency "$c"
      GATEWAY_BROKERS=$KAFKA_MTLS_BROKERS GATEWAY_KAFKA_SECURITY=$mtls \
        gateway_run "security-gateway-$c-mtls-r$r" github --concurrency "$c"
    done
  done
  for r in 1 2; do
    for mac in signed unsigned; do
      say "Kafka ceiling, $mac records"
      local flag=(); [[ $mac == signed ]] || flag=(--unsigned)
      "$bench" kafka-ceiling --topic "bench-$run_id-security-kafka-$mac-r$r" --concurrency "$concurrency" \
        --duration-s "$duration_s" --json "$results/security-kafka-ceiling-$mac-r$r.json" "${flag[@]}"
    done
  done
  local overlay=$results/config/consumer-security-overlay.toml
  cat >"$overlay" <<TOML
[kafka]
brokers = "$KAFKA_SASL_SSL_BROKERS"
$sasl
[redis]
url = "$REDIS_TLS_URL"
username = "$REDIS_ACL_USER"
password = { id = "redis", file = "$REDIS_ACL_PASSWORD_FILE" }
[redis.tls]
ca_file = "$REDIS_CA_FILE"
TOML
  local kind extra
  for r in 1 2; do
    for kind in plaintext sasl-ssl-redis-tls mac-off; do
      say "consumer: $kind (1 instance, log handler)"
      extra=()
      [[ $kind != sasl-ssl-redis-tls ]] || extra=(--overlay "$overlay")
      [[ $kind != mac-off ]] || extra=(--unsigned)
      "$bench" consumer --topic "bench-$run_id-security-consumer-$kind-r$r" --partitions 6 --fill-s "$consumer_fill_s" \
        --consumer-bin "$bin/hookline-consumer" --instances 1 --work-dir "$results/config" \
        --json "$results/security-consumer-$kind-r$r.json" "${extra[@]}"
    done
  done
}

# Issue 25: batching that follows the load. kprf (a warp + librdkafka HTTP-to-Kafka proxy) on the same port, broker
# and generator: acks=all (request.required.acks = -1), each request waiting for its delivery report
# (`wait_for_send`), linger (its queue.buffering.max.ms) 2 ms as the gateway's before issue 25, its per-request log
# lines to /dev/null. The generator sends it the same signed 1 KiB GitHub requests, bodies wrapped in its `/push`
# JSON and keyed by event id, so its topic gets the same check. Then the gateway with its default (two producers,
# chosen by the produces in flight) and with either fixed linger alone, at 64 and 256 connections, A B A B.
kprf_run() { # label [loadgen args...]
  local label=$1; shift
  local topic=bench-$run_id-$label config=$results/config/kprf-$label.yaml
  say "kprf: $label ($(cut -d' ' -f1 /proc/loadavg) load)"
  "$bench" create-topic --topic "$topic" --partitions 6
  cat >"$config" <<YAML
kafka:
  brokers:
    - '${KAFKA_BROKERS%%,*}'
  request_required_acks: -1
  queue_buffering_max_ms: ${KPRF_LINGER_MS:-2}
  message_timeout_ms: 5000
http:
  port: $gateway_port
  metrics_port: $gateway_admin_port
output_file: "/dev/null"
YAML
  "$KPRF_BIN" --config="$config" >"$results/logs/kprf-$label.log" 2>&1 &
  local kprf_pid=$!
  pids+=("$kprf_pid")
  for _ in $(seq 100); do
    curl -fsS -o /dev/null -H 'content-type: application/json' -d '{"records": []}' \
      "http://127.0.0.1:$gateway_port/push" 2>/dev/null && break
    sleep 0.1
  done
  local kprf_before broker_before
  kprf_before=$(cpu_ticks "$kprf_pid"); broker_before=$(cpu_ticks "$broker_pid")
  "$bench" loadgen --target "127.0.0.1:$gateway_port" --scheme github --secret-file "$results/secrets/github" \
    --kprf-topic "$topic" --topic "$topic" --duration-s "$duration_s" --warm-up-s 1 --label "$label" \
    --json "$results/$label.json" "$@" 2>>"$results/logs/loadgen.log"
  awk -v g="$(( $(cpu_ticks "$kprf_pid") - kprf_before ))" -v b="$(( $(cpu_ticks "$broker_pid") - broker_before ))" \
    -v hz="$clock_ticks" 'BEGIN { printf "{\"gateway_cpu_s\": %.2f, \"broker_cpu_s\": %.2f}\n", g / hz, b / hz }' \
    >"$results/$label.cpu"
  tail -n 2 "$results/logs/loadgen.log" >&2
  awk '/VmHWM/ {print $2}' "/proc/$kprf_pid/status" >"$results/$label.rss"
  kill -TERM "$kprf_pid"; wait "$kprf_pid" || true
}

batching_labels=()
batching_one() { # run-function label [args...]: the run, with the load average at its start
  cut -d' ' -f1-3 /proc/loadavg >"$results/$2.load"
  batching_labels+=("$2")
  "$@"
}

batching_runs() {
  local c r variant
  for r in $(seq "${BENCH_BATCHING_REPEAT:-2}"); do
    for c in ${BENCH_BATCHING_CONCURRENCY:-64 256}; do
      for variant in ${BENCH_BATCHING_ORDER:-hookline kprf linger0 linger2}; do
        case $variant in
          hookline) batching_one gateway_run "batching-$c-hookline-r$r" github --concurrency "$c" ;;
          kprf) batching_one kprf_run "batching-$c-kprf-r$r" --concurrency "$c" ;;
          linger0) GATEWAY_EXTRA_TOML=$'[kafka.properties]\n"linger.ms" = "0"' \
            batching_one gateway_run "batching-$c-linger0-r$r" github --concurrency "$c" ;;
          linger2) GATEWAY_EXTRA_TOML=$'[producer]\nbatch_from_in_flight = 0' \
            batching_one gateway_run "batching-$c-linger2-r$r" github --concurrency "$c" ;;
          *) say "unknown BENCH_BATCHING_ORDER entry $variant"; exit 2 ;;
        esac
      done
    done
  done
  batching_table >"$results/batching.md"
  cat "$results/batching.md" >&2
}

batching_table() { # one line per run of batching_labels, in the order they ran
  echo '| run | 2xx/s | p50 ms | p99 ms | p99.9 ms | topic check | load avg at start (1/5/15 min) | CPU s: server / broker / generator |'
  echo '|---|---|---|---|---|---|---|---|'
  local label
  for label in "${batching_labels[@]}"; do
    jq -r --arg load "$(cat "$results/$label.load")" --slurpfile cpu "$results/$label.cpu" \
      '"| \(.label) | \(.load.acknowledged_per_s | floor) | \(.load.time_to_2xx.p50_ms) | \(.load.time_to_2xx.p99_ms) | \(.load.time_to_2xx.p999_ms) | \(if .topic_check.passed then "passed" else "FAILED" end) (\(.topic_check.records_in_topic) records) | \($load) | \($cpu[0].gateway_cpu_s) / \($cpu[0].broker_cpu_s) / \(.generator_cpu_s) |"' \
      "$results/$label.json"
  done
}

# Issue 37: which linger answers at the broker's pace at light load and still batches at 256 connections. Every
# variant is one producer (`batch_from_in_flight = 0`) with `batch_linger_ms` set; kprf beside it in each round.
linger_gateway() { # label linger_ms|splitN [loadgen args...]; splitN: two producers, 2 ms from N in flight
  local label=$1 linger=$2; shift 2
  local from_in_flight=0
  if [[ $linger == split* ]]; then from_in_flight=${linger#split}; linger=2; fi
  GATEWAY_EXTRA_TOML=$'[producer]\nbatch_from_in_flight = '"$from_in_flight"$'\nbatch_linger_ms = '"$linger" \
    batching_one gateway_run "$label" github "$@"
}

linger_runs() {
  local r c f l lingers variants
  for r in $(seq "${BENCH_LINGER_FIRST_ROUND:-1}" "${BENCH_LINGER_REPEAT:-2}"); do
    lingers=${BENCH_LINGER_VALUES:-0 0.1 0.25 0.5 1 2}
    variants="kprf $lingers"
    # Every other round in reverse: the first run of a round tends to be the slowest on a shared machine.
    (( r % 2 == 1 )) || variants=$(tr ' ' '\n' <<<"$variants" | tac | paste -sd' ')
    for c in ${BENCH_LINGER_CONCURRENCY:-64 256}; do
      for l in $variants; do
        if [[ $l == kprf ]]; then
          batching_one kprf_run "linger-$c-kprf-r$r" --concurrency "$c"
        else
          linger_gateway "linger-$c-l$l-r$r" "$l" --concurrency "$c"
        fi
      done
    done
    # Open loop at fractions of this round's peak: the gateway before issue 37 (2 ms) at 256 connections.
    local peak=$results/linger-256-l2-r$r.json
    [[ -f $peak ]] || peak=$results/$(cd "$results" && ls -t linger-256-l*-r"$r".json | head -1)
    for f in ${BENCH_LINGER_FRACTIONS:-0.1 0.3 0.7}; do
      for l in $variants; do
        if [[ $l == kprf ]]; then
          batching_one kprf_run "linger-open$f-kprf-r$r" --concurrency "$concurrency" --peak-from "$peak" --fraction "$f"
        else
          linger_gateway "linger-open$f-l$l-r$r" "$l" --concurrency "$concurrency" --peak-from "$peak" --fraction "$f"
        fi
      done
    done
  done
  batching_table >"$results/linger.md"
  cat "$results/linger.md" >&2
}
