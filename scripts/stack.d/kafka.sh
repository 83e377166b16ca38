# Sourced by scripts/stack (its variables and process helpers are in scope): the single Kafka broker.

# ---------------------------------------------------------------- Kafka

KAFKA_PATTERN="kafka.Kafka $KAFKA_PROPS"

# The TLS listeners beside PLAINTEXT (deploy/kafka/server.properties.template): SASL_SSL and mutual TLS.
KAFKA_SASL_SSL_PORT=${KAFKA_SASL_SSL_PORT:-19094}
KAFKA_MTLS_PORT=${KAFKA_MTLS_PORT:-19095}
# The test users' passwords: generated once per stack, never committed. One user name for every mechanism.
KAFKA_CREDENTIALS_DIR="$KAFKA_DIR/credentials"
KAFKA_SASL_USER=hookline
# Records which SCRAM passwords the broker's metadata holds (format time or kafka-configs), so `up` adds them once.
KAFKA_SCRAM_MARKER="$KAFKA_DATA/.hookline-scram-users"

# kafka_ensure_credentials: the password files (SCRAM, PLAIN), made if missing.
kafka_ensure_credentials() {
  local name
  mkdir -p "$KAFKA_CREDENTIALS_DIR"
  chmod 700 "$KAFKA_CREDENTIALS_DIR"
  for name in scram-password plain-password; do
    if [[ ! -s $KAFKA_CREDENTIALS_DIR/$name ]]; then
      (umask 077 && head -c 18 /dev/urandom | base64 | tr '+/' '-_' >"$KAFKA_CREDENTIALS_DIR/$name")
    fi
  done
}

# The --add-scram values for both SCRAM mechanisms; NAME=[...] is what kafka-storage wants, kafka-configs the same
# without the name.
kafka_scram_specs() {
  local password
  password=$(cat "$KAFKA_CREDENTIALS_DIR/scram-password")
  printf '%s\n' "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$password]" \
    "SCRAM-SHA-256=[name=$KAFKA_SASL_USER,password=$password]"
}

kafka_scram_fingerprint() { sha256sum "$KAFKA_CREDENTIALS_DIR/scram-password" | awk '{print $1}'; }

# kafka_ensure_scram_users: a stack formatted before the SASL listener (or whose password file was replaced)
# gets its SCRAM users through kafka-configs, once; a freshly formatted one has them already.
kafka_ensure_scram_users() {
  local want t0 password
  want=$(kafka_scram_fingerprint)
  [[ $(cat "$KAFKA_SCRAM_MARKER" 2>/dev/null || true) == "$want" ]] && return 0
  t0=$(now_ms)
  password=$(cat "$KAFKA_CREDENTIALS_DIR/scram-password")
  kafka_java org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
    --command-config "$KAFKA_ADMIN_PROPS" --alter --entity-type users --entity-name "$KAFKA_SASL_USER" \
    --add-config "SCRAM-SHA-512=[password=$password],SCRAM-SHA-256=[password=$password]" \
    >/dev/null 2>>"$KAFKA_LOGS/tools.err" || die "kafka: could not add the SCRAM users (see $KAFKA_LOGS/tools.err)"
  printf '%s\n' "$want" >"$KAFKA_SCRAM_MARKER"
  log "kafka: SCRAM users added to an existing storage ($(since "$t0"))"
}

jvm_common_opts() {
  printf '%s\n' -Djava.awt.headless=true "-Dkafka.logs.dir=$KAFKA_LOGS" \
    "-Dlog4j2.configurationFile=$LOG4J_CONF"
}

ensure_jars() {
  local want have t0 tmp out
  [[ -f $POM ]] || die "missing $POM"
  want=$(sha256sum "$POM" | awk '{print $1}')
  have=$(cat "$LIBS_DIR/.pom.sha256" 2>/dev/null || true)
  if [[ $want == "$have" ]] && compgen -G "$LIBS_DIR/kafka_2.13-*.jar" >/dev/null; then
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (Maven 3 and a JDK 17 are needed)"
  command -v java >/dev/null || die "java not found (a JDK 17 is needed)"
  t0=$(now_ms)
  log "kafka: resolving broker jars with Maven (first run only) ..."
  tmp="$LIBS_DIR.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  if ! out=$(mvn -B -q -f "$POM" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp" </dev/null 2>&1); then
    printf '%s\n' "$out" | tail -n 50 >&2
    rm -rf "$tmp"
    die "maven could not resolve $POM"
  fi
  printf '%s\n' "$want" >"$tmp/.pom.sha256"
  rm -rf "$LIBS_DIR"
  mv "$tmp" "$LIBS_DIR"
  log "kafka: $(find "$LIBS_DIR" -name '*.jar' | wc -l) jars in $LIBS_DIR ($(since "$t0"))"
}

# kafka_java MAINCLASS ARGS...: a short-lived Kafka CLI JVM (small heap, quick start).
kafka_java() {
  local main=$1
  shift
  local -a opts
  mapfile -t opts < <(jvm_common_opts)
  java -Xms32m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
    "${opts[@]}" -Dkafka.log.file=tools.log -Dkafka.log.level=warn -cp "$LIBS_DIR/*" "$main" "$@" </dev/null
}

render_kafka_config() {
  mkdir -p "$KAFKA_DATA" "$KAFKA_LOGS"
  sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" \
    -e "s|@KAFKA_CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
    -e "s|@KAFKA_DATA_DIR@|$KAFKA_DATA|g" \
    -e "s|@OFFSETS_PARTITIONS@|$OFFSETS_PARTITIONS|g" \
    -e "s|@KAFKA_SASL_SSL_PORT@|$KAFKA_SASL_SSL_PORT|g" \
    -e "s|@KAFKA_MTLS_PORT@|$KAFKA_MTLS_PORT|g" \
    -e "s|@TLS_DIR@|$TLS_DIR|g" \
    -e "s|@KAFKA_CREDENTIALS_DIR@|$KAFKA_CREDENTIALS_DIR|g" \
    -e "s|@KAFKA_SASL_USER@|$KAFKA_SASL_USER|g" \
    -e "s|@KAFKA_PLAIN_PASSWORD@|$(cat "$KAFKA_CREDENTIALS_DIR/plain-password")|g" \
    "$PROPS_TEMPLATE" >"$KAFKA_PROPS.tmp"
  chmod 600 "$KAFKA_PROPS.tmp"
  mv "$KAFKA_PROPS.tmp" "$KAFKA_PROPS"
}

# Client settings for the CLI tools: fail fast instead of the 60 s defaults.
write_admin_config() {
  mkdir -p "$KAFKA_LOGS"
  cat >"$KAFKA_ADMIN_PROPS" <<EOF
request.timeout.ms=5000
default.api.timeout.ms=10000
retry.backoff.ms=200
reconnect.backoff.max.ms=500
EOF
}

format_kafka_storage() {
  local t0 uuid out spec
  [[ -f $KAFKA_DATA/meta.properties ]] && return 0
  t0=$(now_ms)
  # Same form as `StorageTool random-uuid` (16 random bytes, URL-safe base64, no padding, not
  # starting with '-'), without paying for a JVM start.
  uuid=-
  while [[ $uuid == -* || ${#uuid} -ne 22 ]]; do
    uuid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  done
  local -a scram=()
  while IFS= read -r spec; do scram+=(--add-scram "$spec"); done < <(kafka_scram_specs)
  if ! out=$(kafka_java kafka.tools.StorageTool format -t "$uuid" -c "$KAFKA_PROPS" "${scram[@]}" 2>&1); then
    printf '%s\n' "$out" >&2
    die "formatting Kafka storage failed"
  fi
  kafka_scram_fingerprint >"$KAFKA_SCRAM_MARKER"
  log "kafka: formatted storage in $KAFKA_DATA (cluster $uuid, $(since "$t0"))"
}

print_kafka_log_tail() {
  log "----- last 50 lines of $KAFKA_LOGS/server.log -----"
  tail -n 50 "$KAFKA_LOGS/server.log" >&2 2>/dev/null || true
  if [[ -s $KAFKA_LOGS/kafka.out ]]; then
    log "----- last 20 lines of $KAFKA_LOGS/kafka.out -----"
    tail -n 20 "$KAFKA_LOGS/kafka.out" >&2 || true
  fi
}

# Sets TOPIC_LIST to the broker's topics; fails if the broker does not answer a metadata request.
TOPIC_LIST=""
kafka_list_topics() {
  TOPIC_LIST=$(kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
    --command-config "$KAFKA_ADMIN_PROPS" --list 2>>"$KAFKA_LOGS/tools.err")
}

# wait_kafka_ready T0: polls until a metadata request succeeds, within STACK_TIMEOUT_S of T0.
wait_kafka_ready() {
  local t0=$1 deadline pid
  deadline=$((t0 + STACK_TIMEOUT_S * 1000))
  while :; do
    if ! pid=$(pid_ours "$KAFKA_PID" "$KAFKA_PATTERN"); then
      if pid_file_alive "$KAFKA_PID" && (($(now_ms) <= deadline)); then
        sleep 0.1; continue # forked, not yet java
      fi
      print_kafka_log_tail
      rm -f "$KAFKA_PID"
      die "kafka: the broker exited during start-up"
    fi
    if port_open "$KAFKA_PORT" && kafka_list_topics; then
      log "kafka: ready on 127.0.0.1:$KAFKA_PORT (pid $pid, $(since "$t0"))"
      return 0
    fi
    if (($(now_ms) > deadline)); then
      print_kafka_log_tail
      die "kafka: not ready after ${STACK_TIMEOUT_S}s (STACK_TIMEOUT_S); the broker (pid $pid) is left running"
    fi
    sleep 0.5
  done
}

start_kafka() {
  local t0 pid
  t0=$(now_ms)
  ensure_jars
  write_admin_config
  tls_ensure_certs
  kafka_ensure_credentials
  if pid=$(pid_ours "$KAFKA_PID" "$KAFKA_PATTERN"); then
    if port_open "$KAFKA_PORT"; then
      log "kafka: already running (pid $pid, port $KAFKA_PORT), reusing"
    else
      log "kafka: pid $pid is starting, waiting for it"
    fi
    wait_kafka_ready "$t0"
    kafka_ensure_scram_users
    port_open "$KAFKA_SASL_SSL_PORT" ||
      log "kafka: the running broker has no SASL_SSL listener on $KAFKA_SASL_SSL_PORT (started before it existed?): restart-kafka adds it"
    return 0
  fi
  rm -f "$KAFKA_PID"
  for p in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_SSL_PORT" "$KAFKA_MTLS_PORT"; do
    if port_open "$p"; then
      die "kafka: port 127.0.0.1:$p is in use by a process this script did not start (set KAFKA_PORT / KAFKA_CONTROLLER_PORT / KAFKA_SASL_SSL_PORT / KAFKA_MTLS_PORT)"
    fi
  done
  render_kafka_config
  format_kafka_storage
  local -a opts heap
  mapfile -t opts < <(jvm_common_opts)
  read -r -a heap <<<"$KAFKA_HEAP_OPTS"
  : >"$KAFKA_LOGS/kafka.out"
  # 9>&-: the broker must not inherit (and so hold) the lock of this script.
  # setsid: own session, so the broker survives the caller's terminal/CI step; the PID is java's
  # own (neither nohup nor setsid forks here, as this background child is no process-group leader).
  nohup setsid java "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent "${opts[@]}" -Dkafka.log.file=server.log \
    -cp "$LIBS_DIR/*" kafka.Kafka "$KAFKA_PROPS" >>"$KAFKA_LOGS/kafka.out" 2>&1 </dev/null 9>&- &
  pid=$!
  printf '%s\n' "$pid" >"$KAFKA_PID"
  log "kafka: started broker (pid $pid, ports $KAFKA_PORT/$KAFKA_CONTROLLER_PORT), waiting until it answers ..."
  sleep 0.2
  wait_kafka_ready "$t0"
  kafka_ensure_scram_users
}

stop_kafka() { stop_pid kafka "$KAFKA_PID" "$KAFKA_PATTERN"; }

# kill_kafka: SIGKILL, as a crash would (the chaos soak); data kept, start-kafka brings it back.
kill_kafka() {
  local pid
  if pid=$(pid_ours "$KAFKA_PID" "$KAFKA_PATTERN"); then
    kill -KILL "$pid" 2>/dev/null || true
    while pid_ours "$KAFKA_PID" "$KAFKA_PATTERN" >/dev/null; do sleep 0.05; done
    rm -f "$KAFKA_PID"
    log "kafka: killed (pid $pid)"
  else
    log "kafka: not running"
  fi
}
# The DLQ topic never deletes by time or size: an entry nobody triaged must not expire unseen (nothing rots).
# Its oldest untriaged entry's age is a gauge with an alert instead (docs/runbook.md, "DLQ entry untriaged").
# max.message.bytes (docs/deploy.md#topic-sizes): the inbound topic takes the broker's default, made explicit;
# the topics that hold copies of its records (the DLQ, the retry topics) take 64 KiB more, for the headers a copy
# adds (the consumer does the same when it creates a retry topic). Raise them together.
INBOUND_TOPIC_CONFIG="max.message.bytes=1048588"
COPY_TOPIC_CONFIG="max.message.bytes=1114124"
DLQ_TOPIC_CONFIG="retention.ms=-1,retention.bytes=-1,$COPY_TOPIC_CONFIG"

# ensure_topics: creates the project's topics that TOPIC_LIST (from the readiness probe) lacks.
# The missing ones are created by parallel TopicCommand JVMs (about 1.7 s each when run one by one).
# A spec's configs are comma-separated. A DLQ topic created before it had its retention setting gets it here.
ensure_topics() {
  local t0 name parts cfg spec i c failed=0
  t0=$(now_ms)
  local -a specs=(
    "$INBOUND_TOPIC|$INBOUND_PARTITIONS|$INBOUND_TOPIC_CONFIG"
    "$DLQ_TOPIC|$DLQ_PARTITIONS|$DLQ_TOPIC_CONFIG"
    "$DLQ_STATUS_TOPIC|$DLQ_STATUS_PARTITIONS|cleanup.policy=compact"
    "$RETRY_TOPIC|$RETRY_PARTITIONS|$COPY_TOPIC_CONFIG"
    "$SERVICE_RETRY_TOPIC|$RETRY_PARTITIONS|$COPY_TOPIC_CONFIG"
    "$CONTROL_TOPIC|1|cleanup.policy=compact"
  )
  local -a pids=() todo=()
  for spec in "${specs[@]}"; do
    IFS='|' read -r name parts cfg <<<"$spec"
    [[ $parts =~ ^[1-9][0-9]*$ ]] || die "partition count for $name must be a positive integer, got '$parts'"
    if grep -qxF -- "$name" <<<"$TOPIC_LIST"; then
      if [[ $name == "$DLQ_TOPIC" ]]; then
        kafka_java org.apache.kafka.tools.ConfigCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
          --command-config "$KAFKA_ADMIN_PROPS" --alter --entity-type topics --entity-name "$name" \
          --add-config "$cfg" >/dev/null 2>>"$KAFKA_LOGS/tools.err" ||
          die "kafka: could not set $cfg on $name (see $KAFKA_LOGS/tools.err)"
      fi
      continue
    fi
    local -a extra=()
    if [[ -n $cfg ]]; then
      IFS=',' read -ra c <<<"$cfg"
      for i in "${c[@]}"; do extra+=(--config "$i"); done
    fi
    kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
      --command-config "$KAFKA_ADMIN_PROPS" --create --if-not-exists --topic "$name" \
      --partitions "$parts" --replication-factor 1 "${extra[@]}" >/dev/null 2>>"$KAFKA_LOGS/tools.err" &
    pids+=("$!")
    todo+=("$spec")
  done
  if ((${#pids[@]} == 0)); then
    log "kafka: topics present: $INBOUND_TOPIC $DLQ_TOPIC $DLQ_STATUS_TOPIC $RETRY_TOPIC $SERVICE_RETRY_TOPIC $CONTROL_TOPIC"
    return 0
  fi
  for i in "${!pids[@]}"; do
    IFS='|' read -r name parts cfg <<<"${todo[$i]}"
    if wait "${pids[$i]}"; then
      log "kafka: created topic $name (partitions $parts${cfg:+, $cfg})"
    else
      log "kafka: creating topic $name failed"
      failed=1
    fi
  done
  if ((failed)); then
    tail -n 20 "$KAFKA_LOGS/tools.err" >&2 || true
    die "kafka: could not create the topics (see $KAFKA_LOGS/tools.err)"
  fi
  log "kafka: topics ready ($(since "$t0"))"
}

