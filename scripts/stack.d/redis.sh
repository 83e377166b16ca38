# Sourced by scripts/stack (its variables and process helpers are in scope): Redis and the Redis Cluster.

# ---------------------------------------------------------------- Redis

REDIS_PATTERN="redis-server 127.0.0.1:$REDIS_PORT"

ensure_redis_installed() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null && return 0
  local t0 sudo=() out
  t0=$(now_ms)
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "redis-server is missing and neither root nor sudo is available"
    sudo=(sudo -n)
  fi
  log "redis: installing redis-server with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  if ! out=$("${sudo[@]}" apt-get update -q 2>&1 </dev/null); then
    printf '%s\n' "$out" | tail -n 20 >&2
    die "apt-get update failed"
  fi
  if ! out=$("${sudo[@]}" apt-get install -y -q --no-install-recommends redis-server 2>&1 </dev/null); then
    printf '%s\n' "$out" | tail -n 20 >&2
    die "apt-get install redis-server failed"
  fi
  command -v redis-server >/dev/null || die "redis-server still missing after apt-get install"
  log "redis: installed $(redis-server --version | awk '{print $3}' | sed 's/^v=//') ($(since "$t0"))"
}

redis_ping() { [[ $(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null </dev/null) == PONG ]]; }

wait_redis_ready() {
  local t0=$1 deadline
  deadline=$((t0 + STACK_TIMEOUT_S * 1000))
  until redis_ping; do
    if (($(now_ms) > deadline)); then
      tail -n 50 "$REDIS_LOG" >&2 2>/dev/null || true
      die "redis: no PONG on 127.0.0.1:$REDIS_PORT after ${STACK_TIMEOUT_S}s"
    fi
    sleep 0.1
  done
}

start_redis() {
  local t0 pid i
  t0=$(now_ms)
  ensure_redis_installed
  if pid=$(pid_ours "$REDIS_PID" "$REDIS_PATTERN"); then
    wait_redis_ready "$t0"
    log "redis: already running (pid $pid, port $REDIS_PORT), reusing"
    return 0
  fi
  rm -f "$REDIS_PID"
  if port_open "$REDIS_PORT"; then
    die "redis: port 127.0.0.1:$REDIS_PORT is in use by a process this script did not start (set REDIS_PORT)"
  fi
  [[ $REDIS_APPENDONLY == yes || $REDIS_APPENDONLY == no ]] || die "REDIS_APPENDONLY must be yes or no"
  mkdir -p "$REDIS_DATA"
  if ! redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes \
    --save "" --appendonly "$REDIS_APPENDONLY" --appendfsync everysec --dir "$REDIS_DATA" \
    --pidfile "$REDIS_PID" --logfile "$REDIS_LOG" --daemonize yes </dev/null 9>&-; then
    tail -n 50 "$REDIS_LOG" >&2 2>/dev/null || true
    die "redis: redis-server failed to start"
  fi
  wait_redis_ready "$t0"
  for ((i = 0; i < 50; i++)); do
    pid=$(pid_ours "$REDIS_PID" "$REDIS_PATTERN") && break
    sleep 0.1
  done
  [[ -n ${pid:-} ]] || die "redis: answers but $REDIS_PID does not name it"
  log "redis: ready on 127.0.0.1:$REDIS_PORT (pid $pid, $(since "$t0"))"
}

stop_redis() { stop_pid redis "$REDIS_PID" "$REDIS_PATTERN"; }

# signal_redis STOP|CONT: freeze or thaw the stack's Redis (a stalled Redis: connections open, no answers).
signal_redis() {
  local pid
  pid=$(pid_ours "$REDIS_PID" "$REDIS_PATTERN") || die "redis: not running"
  kill "-$1" "$pid"
  log "redis: SIG$1 (pid $pid)"
}

start_redis_cluster() {
  local t0 port pid nodes=() started=0
  t0=$(now_ms)
  ensure_redis_installed
  for port in $REDIS_CLUSTER_PORTS; do
    local dir="$REDIS_CLUSTER_DIR/$port"
    nodes+=("127.0.0.1:$port")
    if pid=$(pid_ours "$dir/redis.pid" "redis-server 127.0.0.1:$port"); then continue; fi
    port_open "$port" && die "redis-cluster: port 127.0.0.1:$port is in use by a process this script did not start"
    # A node that lost its process starts empty: forget the old cluster so it can be formed again.
    rm -rf "$dir" && mkdir -p "$dir"
    redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes --cluster-enabled yes \
      --cluster-config-file "$dir/nodes.conf" --save "" --appendonly no --dir "$dir" \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --daemonize yes </dev/null 9>&- \
      || die "redis-cluster: node $port failed to start"
    started=1
  done
  for port in $REDIS_CLUSTER_PORTS; do
    until [[ $(redis-cli -p "$port" ping 2>/dev/null </dev/null) == PONG ]]; do
      (($(now_ms) > t0 + STACK_TIMEOUT_S * 1000)) && die "redis-cluster: node $port does not answer"
      sleep 0.1
    done
  done
  if ! redis-cli -p "${nodes[0]##*:}" cluster info 2>/dev/null </dev/null | grep -q '^cluster_state:ok'; then
    ((started)) || log "redis-cluster: nodes run but form no cluster; forming it"
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes </dev/null >"$REDIS_CLUSTER_DIR/create.log" 2>&1 \
      || { tail -n 20 "$REDIS_CLUSTER_DIR/create.log" >&2; die "redis-cluster: redis-cli --cluster create failed"; }
  fi
  for port in $REDIS_CLUSTER_PORTS; do
    until redis-cli -p "$port" cluster info 2>/dev/null </dev/null | grep -q '^cluster_state:ok'; do
      (($(now_ms) > t0 + STACK_TIMEOUT_S * 1000)) && die "redis-cluster: node $port never reached cluster_state:ok"
      sleep 0.2
    done
  done
  log "redis-cluster: ready on ${nodes[*]} ($(since "$t0"))"
}

stop_redis_cluster() {
  local port
  for port in $REDIS_CLUSTER_PORTS; do
    [[ -f "$REDIS_CLUSTER_DIR/$port/redis.pid" ]] || continue
    stop_pid "redis-cluster node $port" "$REDIS_CLUSTER_DIR/$port/redis.pid" "redis-server 127.0.0.1:$port"
  done
}

redis_cluster_urls() {
  local port urls=()
  for port in $REDIS_CLUSTER_PORTS; do urls+=("redis://127.0.0.1:$port"); done
  (IFS=,; printf '%s' "${urls[*]}")
}

