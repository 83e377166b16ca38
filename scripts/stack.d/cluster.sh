# Sourced by scripts/stack (its variables and process helpers are in scope): the three-node Kafka cluster.

# ---------------------------------------------------------------- three-node Kafka cluster

CLUSTER_N=3

# cluster_port LIST N: the Nth (1-based) port of a space-separated list.
cluster_port() {
  local -a ports
  read -r -a ports <<<"$1"
  ((${#ports[@]} == CLUSTER_N)) || die "expected $CLUSTER_N ports, got '$1'"
  printf '%s' "${ports[$(($2 - 1))]}"
}
cluster_node_dir() { printf '%s' "$CLUSTER_DIR/node$1"; }
cluster_pattern() { printf '%s' "kafka.Kafka $(cluster_node_dir "$1")/server.properties"; }
cluster_bootstrap() {
  local n list=()
  for ((n = 1; n <= CLUSTER_N; n++)); do list+=("127.0.0.1:$(cluster_port "$CLUSTER_BROKER_PORTS" "$n")"); done
  (IFS=,; printf '%s' "${list[*]}")
}
cluster_node_arg() {
  [[ ${1:-} =~ ^[1-3]$ ]] || die "usage: scripts/stack stop-broker N... [--kill] | start-broker N... (N in 1..$CLUSTER_N)"
}

# cluster_list_topics_at PORT: sets TOPIC_LIST from the broker on PORT; fails if it does not answer.
cluster_list_topics_at() {
  TOPIC_LIST=$(kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$1" \
    --command-config "$KAFKA_ADMIN_PROPS" --list 2>>"$CLUSTER_DIR/tools.err")
}

# launch_cluster_node N: renders, formats (once) and starts node N unless it runs; does not wait.
launch_cluster_node() {
  local n=$1 dir port cport voters="" i uuid out pid
  dir=$(cluster_node_dir "$n")
  port=$(cluster_port "$CLUSTER_BROKER_PORTS" "$n")
  cport=$(cluster_port "$CLUSTER_CONTROLLER_PORTS" "$n")
  if pid=$(pid_ours "$dir/kafka.pid" "$(cluster_pattern "$n")"); then
    log "kafka-cluster: node $n already running (pid $pid, port $port)"
    return 0
  fi
  rm -f "$dir/kafka.pid"
  for p in "$port" "$cport"; do
    port_open "$p" && die "kafka-cluster: port 127.0.0.1:$p is in use by a process this script did not start (set CLUSTER_BROKER_PORTS / CLUSTER_CONTROLLER_PORTS)"
  done
  for ((i = 1; i <= CLUSTER_N; i++)); do
    voters+="${voters:+,}$i@127.0.0.1:$(cluster_port "$CLUSTER_CONTROLLER_PORTS" "$i")"
  done
  mkdir -p "$dir/data" "$dir/logs"
  sed -e "s|@NODE_ID@|$n|g" -e "s|@VOTERS@|$voters|g" -e "s|@BROKER_PORT@|$port|g" \
    -e "s|@CONTROLLER_PORT@|$cport|g" -e "s|@DATA_DIR@|$dir/data|g" \
    -e "s|@OFFSETS_PARTITIONS@|$OFFSETS_PARTITIONS|g" "$CLUSTER_TEMPLATE" >"$dir/server.properties"
  if [[ ! -f $dir/data/meta.properties ]]; then
    # Every node of one cluster is formatted with the same cluster id.
    if [[ ! -s $CLUSTER_DIR/cluster.id ]]; then
      uuid=-
      while [[ $uuid == -* || ${#uuid} -ne 22 ]]; do
        uuid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
      done
      printf '%s\n' "$uuid" >"$CLUSTER_DIR/cluster.id"
    fi
    uuid=$(cat "$CLUSTER_DIR/cluster.id")
    if ! out=$(kafka_java kafka.tools.StorageTool format -t "$uuid" -c "$dir/server.properties" 2>&1); then
      printf '%s\n' "$out" >&2
      die "kafka-cluster: formatting node $n failed"
    fi
  fi
  local -a heap opts
  read -r -a heap <<<"$CLUSTER_HEAP_OPTS"
  opts=(-Djava.awt.headless=true "-Dkafka.logs.dir=$dir/logs" "-Dlog4j2.configurationFile=$LOG4J_CONF")
  : >"$dir/logs/kafka.out"
  # As for the single broker: own session, no inherited lock, the PID is java's own.
  nohup setsid java "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent "${opts[@]}" -Dkafka.log.file=server.log \
    -cp "$LIBS_DIR/*" kafka.Kafka "$dir/server.properties" >>"$dir/logs/kafka.out" 2>&1 </dev/null 9>&- &
  pid=$!
  printf '%s\n' "$pid" >"$dir/kafka.pid"
  log "kafka-cluster: started node $n (pid $pid, ports $port/$cport)"
}

# wait_cluster_node N T0: until node N answers a metadata request.
wait_cluster_node() {
  local n=$1 t0=$2 dir port pid
  dir=$(cluster_node_dir "$n")
  port=$(cluster_port "$CLUSTER_BROKER_PORTS" "$n")
  while :; do
    if ! pid=$(pid_ours "$dir/kafka.pid" "$(cluster_pattern "$n")"); then
      if pid_file_alive "$dir/kafka.pid" && (($(now_ms) <= t0 + STACK_TIMEOUT_S * 1000)); then
        sleep 0.1; continue # forked, not yet java
      fi
      tail -n 30 "$dir/logs/server.log" >&2 2>/dev/null || true
      die "kafka-cluster: node $n exited during start-up"
    fi
    if port_open "$port" && cluster_list_topics_at "$port"; then
      log "kafka-cluster: node $n ready on 127.0.0.1:$port (pid $pid, $(since "$t0"))"
      return 0
    fi
    if (($(now_ms) > t0 + STACK_TIMEOUT_S * 1000)); then
      tail -n 30 "$dir/logs/server.log" >&2 2>/dev/null || true
      die "kafka-cluster: node $n not ready after ${STACK_TIMEOUT_S}s"
    fi
    sleep 0.5
  done
}

# ensure_cluster_topics: the project's topics, replication factor 3 (min.insync.replicas 2 is the cluster's
# default). Retried: right after start-up a node may not be registered yet ("larger than available brokers").
ensure_cluster_topics() {
  local t0 spec name parts cfg i
  t0=$(now_ms)
  for spec in "$INBOUND_TOPIC|$INBOUND_PARTITIONS|$INBOUND_TOPIC_CONFIG" "$DLQ_TOPIC|$DLQ_PARTITIONS|$COPY_TOPIC_CONFIG" \
    "$DLQ_STATUS_TOPIC|$DLQ_STATUS_PARTITIONS|cleanup.policy=compact" "$RETRY_TOPIC|$RETRY_PARTITIONS|$COPY_TOPIC_CONFIG" \
    "$SERVICE_RETRY_TOPIC|$RETRY_PARTITIONS|$COPY_TOPIC_CONFIG"; do
    IFS='|' read -r name parts cfg <<<"$spec"
    grep -qxF -- "$name" <<<"$TOPIC_LIST" && continue
    local -a extra=() c=()
    if [[ -n $cfg ]]; then
      IFS=',' read -ra c <<<"$cfg"
      for i in "${c[@]}"; do extra+=(--config "$i"); done
    fi
    until kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "$(cluster_bootstrap)" \
      --command-config "$KAFKA_ADMIN_PROPS" --create --if-not-exists --topic "$name" --partitions "$parts" \
      --replication-factor "$CLUSTER_N" "${extra[@]}" >/dev/null 2>>"$CLUSTER_DIR/tools.err"; do
      (($(now_ms) > t0 + STACK_TIMEOUT_S * 1000)) && { tail -n 20 "$CLUSTER_DIR/tools.err" >&2; die "kafka-cluster: cannot create $name"; }
      sleep 1
    done
    log "kafka-cluster: created topic $name (partitions $parts, replication factor $CLUSTER_N)"
  done
}

start_cluster() {
  local t0 n
  t0=$(now_ms)
  ensure_jars
  write_admin_config
  mkdir -p "$CLUSTER_DIR"
  # All nodes first: no controller quorum (2 of 3) forms until at least two run.
  for ((n = 1; n <= CLUSTER_N; n++)); do launch_cluster_node "$n"; done
  for ((n = 1; n <= CLUSTER_N; n++)); do wait_cluster_node "$n" "$t0"; done
  ensure_cluster_topics
  log "kafka-cluster: ready on $(cluster_bootstrap) ($(since "$t0"))"
}

stop_cluster_node() {
  local n=$1 mode=${2:-} dir pid
  dir=$(cluster_node_dir "$n")
  if [[ $mode == --kill ]]; then
    if pid=$(pid_ours "$dir/kafka.pid" "$(cluster_pattern "$n")"); then
      kill -KILL "$pid" 2>/dev/null || true
      while pid_ours "$dir/kafka.pid" "$(cluster_pattern "$n")" >/dev/null; do sleep 0.05; done
      rm -f "$dir/kafka.pid"
      log "kafka-cluster: node $n killed (pid $pid)"
    else
      log "kafka-cluster: node $n not running"
    fi
    return 0
  fi
  stop_pid "kafka-cluster node $n" "$dir/kafka.pid" "$(cluster_pattern "$n")"
}

# start-broker N [M...]: all launched before any is waited for (with two of three down, neither answers until
# both run: a node needs a controller quorum).
cmd_start_brokers() {
  local t0 n
  t0=$(now_ms)
  (($#)) || cluster_node_arg ""
  for n in "$@"; do cluster_node_arg "$n"; done
  with_lock
  ensure_jars
  write_admin_config
  for n in "$@"; do launch_cluster_node "$n"; done
  for n in "$@"; do wait_cluster_node "$n" "$t0"; done
}

# stop-broker N [M...] [--kill]
cmd_stop_brokers() {
  local n mode="" nodes=()
  for n in "$@"; do
    if [[ $n == --kill ]]; then mode=--kill; else cluster_node_arg "$n"; nodes+=("$n"); fi
  done
  ((${#nodes[@]})) || cluster_node_arg ""
  with_lock
  for n in "${nodes[@]}"; do stop_cluster_node "$n" "$mode"; done
}

stop_cluster() {
  local n
  for ((n = 1; n <= CLUSTER_N; n++)); do
    [[ -f "$(cluster_node_dir "$n")/kafka.pid" ]] && stop_cluster_node "$n"
  done
  return 0
}

