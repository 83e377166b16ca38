# Sourced by scripts/stack (its variables and process helpers are in scope): Redis and the Redis Cluster.

# ---------------------------------------------------------------- Redis

REDIS_PATTERN="redis-server 127.0.0.1:$REDIS_PORT"

# TLS and an ACL user on the same processes (no new ones): the single Redis also listens with TLS on
# REDIS_TLS_PORT (client certificate optional), and each Redis Cluster node on the port at the same position in
# REDIS_TLS_CLUSTER_PORTS (client certificate required: the mutual-TLS case), its cluster bus over TLS too. The
# certificates are `scripts/stack certs`'s. The plain ports keep the open `default` user the other tests use.
REDIS_TLS_PORT=${REDIS_TLS_PORT:-16390}
REDIS_TLS_CLUSTER_PORTS=${REDIS_TLS_CLUSTER_PORTS:-16391 16392 16393}
REDIS_ACL_USER=${REDIS_ACL_USER:-hookline}
# The user's password, generated once, kept only here (never committed): REDIS_ACL_PASSWORD_FILE.
REDIS_ACL_PASSWORD_FILE="$STACK_DIR/redis-acl-password"
# Exactly the ACL docs/security.md ("Redis: TLS and ACL users") gives a consumer service, on the key prefix the
# TLS tests use: the tests passing over this user prove it is enough. READONLY and CLUSTER SLOTS are what the
# cluster client sends on each node connection.
REDIS_ACL_RULES=(resetkeys '~hookline:*' resetchannels -@all +ping +get +set +del +pexpire +hget +hset +pttl +time
  +hlen +evalsha '+script|load' '+cluster|slots' +readonly)

# redis_acl_password: prints the ACL user's password, generating it the first time.
redis_acl_password() {
  if [[ ! -s $REDIS_ACL_PASSWORD_FILE ]]; then
    (umask 077 && openssl rand -hex 24 >"$REDIS_ACL_PASSWORD_FILE.tmp") || die "redis: cannot generate the ACL password"
    mv "$REDIS_ACL_PASSWORD_FILE.tmp" "$REDIS_ACL_PASSWORD_FILE"
  fi
  cat "$REDIS_ACL_PASSWORD_FILE"
}

# redis_add_acl_user PORT: creates or resets the stack's ACL user on the Redis at PORT (plain port, default user).
# Through stdin, so the password is not on a command line.
redis_add_acl_user() {
  local password reply
  password=$(redis_acl_password)
  reply=$(printf 'ACL SETUSER %s reset on >%s %s\n' "$REDIS_ACL_USER" "$password" "${REDIS_ACL_RULES[*]}" \
    | redis-cli -h 127.0.0.1 -p "$1" 2>&1) || true
  [[ $reply == OK ]] || die "redis: ACL SETUSER $REDIS_ACL_USER on port $1 failed: $reply"
}

# redis_enable_tls PORT TLS_PORT: the Redis at PORT also listens with TLS on TLS_PORT (set at run time, so a
# Redis started before this existed gets it too), and has the ACL user.
redis_enable_tls() {
  local port=$1 tls_port=$2 reply i
  tls_ensure_certs
  if ! port_open "$tls_port"; then
    # A few tries: a Redis stopped a moment ago may still be letting go of the port.
    for ((i = 0; i < 25; i++)); do
      reply=$(redis-cli -h 127.0.0.1 -p "$port" config set tls-cert-file "$TLS_DIR/server.pem" \
        tls-key-file "$TLS_DIR/server.key" tls-ca-cert-file "$TLS_DIR/ca.pem" tls-auth-clients optional \
        tls-port "$tls_port" 2>&1 </dev/null) || true
      [[ $reply == OK ]] && break
      sleep 0.2
    done
    [[ $reply == OK ]] || die "redis: cannot open the TLS port $tls_port (is it in use? set REDIS_TLS_PORT): $reply"
  fi
  redis_add_acl_user "$port"
}

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
    redis_enable_tls "$REDIS_PORT" "$REDIS_TLS_PORT"
    log "redis: already running (pid $pid, port $REDIS_PORT, TLS $REDIS_TLS_PORT), reusing"
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
  redis_enable_tls "$REDIS_PORT" "$REDIS_TLS_PORT"
  log "redis: ready on 127.0.0.1:$REDIS_PORT, TLS on $REDIS_TLS_PORT (pid $pid, $(since "$t0"))"
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
  local t0 port pid nodes=() started=0 tls_ports=() i
  t0=$(now_ms)
  ensure_redis_installed
  tls_ensure_certs
  read -r -a tls_ports <<<"$REDIS_TLS_CLUSTER_PORTS"
  i=0
  for port in $REDIS_CLUSTER_PORTS; do
    [[ -n ${tls_ports[i]:-} ]] || die "redis-cluster: REDIS_TLS_CLUSTER_PORTS needs one port per REDIS_CLUSTER_PORTS"
    i=$((i + 1))
  done
  # Nodes started before they had a TLS port (an older scripts/stack) are restarted: the cluster is formed anew.
  i=0
  for port in $REDIS_CLUSTER_PORTS; do
    if pid_ours "$REDIS_CLUSTER_DIR/$port/redis.pid" "redis-server 127.0.0.1:$port" >/dev/null \
      && ! port_open "${tls_ports[i]}"; then
      log "redis-cluster: node $port has no TLS port; restarting the cluster with one"
      stop_redis_cluster
      break
    fi
    i=$((i + 1))
  done
  i=0
  for port in $REDIS_CLUSTER_PORTS; do
    local dir="$REDIS_CLUSTER_DIR/$port" tls_port=${tls_ports[i]}
    i=$((i + 1))
    nodes+=("127.0.0.1:$port")
    if pid=$(pid_ours "$dir/redis.pid" "redis-server 127.0.0.1:$port"); then continue; fi
    port_open "$port" && die "redis-cluster: port 127.0.0.1:$port is in use by a process this script did not start"
    port_open "$tls_port" && die "redis-cluster: port 127.0.0.1:$tls_port is in use (set REDIS_TLS_CLUSTER_PORTS)"
    # A node that lost its process starts empty: forget the old cluster so it can be formed again.
    rm -rf "$dir" && mkdir -p "$dir"
    # The bus and the nodes' own connections to one another use TLS with the client certificate (the TLS port
    # requires one); plain clients are told the plain ports, TLS clients the TLS ports.
    redis-server --bind 127.0.0.1 --port "$port" --protected-mode yes --cluster-enabled yes \
      --tls-port "$tls_port" --tls-cluster yes --tls-replication yes --tls-auth-clients yes \
      --tls-cert-file "$TLS_DIR/server.pem" --tls-key-file "$TLS_DIR/server.key" --tls-ca-cert-file "$TLS_DIR/ca.pem" \
      --tls-client-cert-file "$TLS_DIR/client.pem" --tls-client-key-file "$TLS_DIR/client.key" \
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
    redis_add_acl_user "$port"
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
  log "redis-cluster: ready on ${nodes[*]}, TLS on ${tls_ports[*]} ($(since "$t0"))"
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

redis_tls_cluster_urls() {
  local port urls=()
  for port in $REDIS_TLS_CLUSTER_PORTS; do urls+=("rediss://127.0.0.1:$port"); done
  (IFS=,; printf '%s' "${urls[*]}")
}
