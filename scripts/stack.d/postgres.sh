# Sourced by scripts/stack (its variables and process helpers are in scope): a PostgreSQL for the `postgres`
# handler's tests (issue 22). Debian's postgresql-$POSTGRES_VERSION, installed if missing; a cluster of its own
# (initdb, pg_ctl), on 127.0.0.1:$POSTGRES_PORT with TLS (the stack's certificates, client certificate optional),
# fsync off (a test cluster: a crash of the machine may lose it, a crash of the server does not matter to a test).
#
# initdb and pg_ctl refuse to run as root: as root, the server runs as the `postgres` user Debian's package creates,
# and its data lives under that user's home (a root-only $STACK_DIR, such as one under /root, is not reachable by
# it), in a directory named after $STACK_DIR so several stacks on one machine keep apart. Otherwise it runs as the
# calling user, under $STACK_DIR/postgres.
#
# Roles: `postgres`, the superuser, only over the Unix socket in the data directory (peer-less `trust`: whoever can
# reach that directory is the server's own user or root); $POSTGRES_USER (owner of database $POSTGRES_DB) over TCP
# with SCRAM-SHA-256 and the password generated into $POSTGRES_PASSWORD_FILE, never on a command line.

POSTGRES_VERSION=${POSTGRES_VERSION:-15}
POSTGRES_PORT=${POSTGRES_PORT:-15432}
POSTGRES_USER=${POSTGRES_USER:-hookline}
POSTGRES_DB=${POSTGRES_DB:-hookline}
POSTGRES_PASSWORD_FILE="$STACK_DIR/postgres-password"
POSTGRES_BIN="/usr/lib/postgresql/$POSTGRES_VERSION/bin"

# postgres_data_dir: where the cluster lives (see above).
postgres_data_dir() {
  if [[ $(id -u) -eq 0 ]]; then
    local home
    home=$(getent passwd postgres | cut -d: -f6)
    [[ -n $home ]] || die "postgres: no postgres user (Debian's postgresql package creates it)"
    printf '%s/hookline-stack/%s\n' "$home" "$(printf '%s' "$STACK_DIR" | sha256sum | cut -c1-16)"
  else
    printf '%s\n' "$STACK_DIR/postgres/data"
  fi
}

# as_postgres CMD...: runs CMD as the server's user (postgres when we are root, else ourselves).
as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

ensure_postgres_installed() {
  [[ -x $POSTGRES_BIN/initdb && -x $POSTGRES_BIN/pg_ctl ]] && command -v psql >/dev/null && return 0
  local t0 sudo=() out
  t0=$(now_ms)
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "postgresql-$POSTGRES_VERSION is missing and neither root nor sudo is available"
    sudo=(sudo -n)
  fi
  log "postgres: installing postgresql-$POSTGRES_VERSION with apt-get ..."
  export DEBIAN_FRONTEND=noninteractive
  # Only the binaries: the package would otherwise create (and try to start) a cluster of its own on port 5432.
  "${sudo[@]}" mkdir -p /etc/postgresql-common
  if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
    printf 'create_main_cluster = false\n' | "${sudo[@]}" tee /etc/postgresql-common/createcluster.conf >/dev/null
  fi
  if ! out=$("${sudo[@]}" apt-get update -q 2>&1 </dev/null); then
    printf '%s\n' "$out" | tail -n 20 >&2
    die "apt-get update failed"
  fi
  # confdef/confold: dpkg keeps the createcluster.conf written above instead of asking about it.
  if ! out=$("${sudo[@]}" apt-get install -y -q --no-install-recommends -o Dpkg::Options::=--force-confdef \
    -o Dpkg::Options::=--force-confold "postgresql-$POSTGRES_VERSION" "postgresql-client-$POSTGRES_VERSION" \
    2>&1 </dev/null); then
    printf '%s\n' "$out" | tail -n 20 >&2
    die "apt-get install postgresql-$POSTGRES_VERSION failed"
  fi
  [[ -x $POSTGRES_BIN/initdb ]] || die "postgres: $POSTGRES_BIN/initdb still missing after apt-get install"
  log "postgres: installed $("$POSTGRES_BIN/postgres" --version | awk '{print $3}') ($(since "$t0"))"
}

postgres_password() {
  if [[ ! -s $POSTGRES_PASSWORD_FILE ]]; then
    (umask 077 && openssl rand -hex 24 >"$POSTGRES_PASSWORD_FILE.tmp") || die "postgres: cannot generate the password"
    mv "$POSTGRES_PASSWORD_FILE.tmp" "$POSTGRES_PASSWORD_FILE"
  fi
  cat "$POSTGRES_PASSWORD_FILE"
}

# postgres_psql ARGS...: psql as the superuser over the socket in the data directory; SQL on stdin.
postgres_psql() {
  as_postgres "$POSTGRES_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$(postgres_data_dir)" -p "$POSTGRES_PORT" \
    -U postgres "$@"
}

postgres_running() { as_postgres "$POSTGRES_BIN/pg_ctl" -D "$(postgres_data_dir)" status >/dev/null 2>&1; }

start_postgres() {
  local t0 data
  t0=$(now_ms)
  ensure_postgres_installed
  tls_ensure_certs
  data=$(postgres_data_dir)
  if postgres_running; then
    postgres_ensure_role
    log "postgres: already running (port $POSTGRES_PORT), reusing"
    return 0
  fi
  if port_open "$POSTGRES_PORT"; then
    die "postgres: port 127.0.0.1:$POSTGRES_PORT is in use by a process this script did not start (set POSTGRES_PORT)"
  fi
  if [[ ! -s $data/PG_VERSION ]]; then
    mkdir -p "$data"
    [[ $(id -u) -ne 0 ]] || chown -R postgres:postgres "$(dirname "$data")"
    if ! as_postgres "$POSTGRES_BIN/initdb" -D "$data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
      -E UTF8 --no-locale --no-instructions >"$STACK_DIR/postgres-initdb.log" 2>&1; then
      tail -n 20 "$STACK_DIR/postgres-initdb.log" >&2
      die "postgres: initdb failed"
    fi
  fi
  # The server's key must belong to the server's user and be readable by it alone: copies in the data directory.
  install -m 0644 "$TLS_DIR/server.pem" "$data/server.crt"
  install -m 0600 "$TLS_DIR/server.key" "$data/server.key"
  install -m 0644 "$TLS_DIR/ca.pem" "$data/root.crt"
  [[ $(id -u) -ne 0 ]] || chown postgres:postgres "$data/server.crt" "$data/server.key" "$data/root.crt"
  if ! as_postgres "$POSTGRES_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t "$STACK_TIMEOUT_S" \
    -o "-c listen_addresses=127.0.0.1 -p $POSTGRES_PORT -c unix_socket_directories=$data -c fsync=off \
-c full_page_writes=off -c synchronous_commit=off -c max_connections=200 -c ssl=on -c ssl_cert_file=server.crt \
-c ssl_key_file=server.key -c ssl_ca_file=root.crt" start >/dev/null 2>&1 </dev/null 9>&-; then
    tail -n 30 "$data/server.log" >&2 2>/dev/null || true
    die "postgres: pg_ctl start failed"
  fi
  postgres_ensure_role
  log "postgres: ready on 127.0.0.1:$POSTGRES_PORT, TLS available ($(since "$t0"))"
}

# postgres_ensure_role: the test role and its database exist, the role's password is the one in the file.
postgres_ensure_role() {
  local password
  password=$(postgres_password)
  postgres_psql -d postgres <<SQL || die "postgres: cannot create role $POSTGRES_USER"
SELECT format('CREATE ROLE %I LOGIN', '$POSTGRES_USER')
  WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '$POSTGRES_USER') \gexec
ALTER ROLE "$POSTGRES_USER" PASSWORD '$password';
SELECT format('CREATE DATABASE %I OWNER %I', '$POSTGRES_DB', '$POSTGRES_USER')
  WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '$POSTGRES_DB') \gexec
SQL
}

stop_postgres() {
  local t0
  t0=$(now_ms)
  if ! [[ -x $POSTGRES_BIN/pg_ctl ]] || ! postgres_running; then
    log "postgres: not running"
    return 0
  fi
  as_postgres "$POSTGRES_BIN/pg_ctl" -D "$(postgres_data_dir)" -m fast -w stop >/dev/null
  log "postgres: stopped ($(since "$t0"))"
}

# restart_postgres: a fast restart, as a failover looks to clients (their connections end with 57P01).
restart_postgres() {
  local t0
  t0=$(now_ms)
  postgres_running || die "postgres: not running"
  if ! as_postgres "$POSTGRES_BIN/pg_ctl" -D "$(postgres_data_dir)" -m fast -w -t "$STACK_TIMEOUT_S" restart \
    >/dev/null 2>&1 </dev/null 9>&-; then
    tail -n 30 "$(postgres_data_dir)/server.log" >&2 2>/dev/null || true
    die "postgres: pg_ctl restart failed"
  fi
  log "postgres: restarted ($(since "$t0"))"
}

purge_postgres() {
  local data
  data=$(postgres_data_dir)
  rm -rf "$data" "$STACK_DIR/postgres" "$POSTGRES_PASSWORD_FILE" "$STACK_DIR/postgres-initdb.log"
}

# postgres_user_psql ARGS...: psql as $POSTGRES_USER on database $POSTGRES_DB over TCP and TLS (the server's
# certificate verified against the stack's CA), the password from its file through the environment, never argv.
postgres_user_psql() {
  [[ -s $POSTGRES_PASSWORD_FILE ]] || die "postgres: no password file yet (scripts/stack up)"
  PGPASSWORD=$(cat "$POSTGRES_PASSWORD_FILE") "$POSTGRES_BIN/psql" -X -v ON_ERROR_STOP=1 \
    "host=127.0.0.1 port=$POSTGRES_PORT user=$POSTGRES_USER dbname=$POSTGRES_DB sslmode=verify-full sslrootcert=$TLS_DIR/ca.pem" \
    "$@"
}
