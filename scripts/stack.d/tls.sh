# Sourced by scripts/stack (its variables and process helpers are in scope): throwaway certificates for the TLS
# listeners of the local stack (Kafka SASL_SSL and mutual TLS, Redis tls-port) and for the tests that must see a
# wrong one refused. Made once with openssl, kept in $TLS_DIR, never used outside loopback.
#
#   ca.pem / ca.key                    the stack's CA (what clients trust: KAFKA_CA_FILE, REDIS_CA_FILE)
#   server.pem / server.key            localhost, 127.0.0.1, ::1, signed by the CA
#   server-bundle.pem                  server.key (PKCS#8) then server.pem: Kafka's PEM keystore
#   client.pem / client.key            CN=hookline, signed by the CA: a mutual-TLS client
#   client-expired.pem / .key          CN=hookline, signed by the CA, expired in 2020
#   other-ca.pem / other-client.pem / other-client.key   a CA nobody trusts, and a client it signed
#   server-other.pem / server-other.key                   localhost signed by the untrusted CA

TLS_DIR="$STACK_DIR/tls"

# tls_ensure_certs: makes what is missing (all of it, the first time), quietly.
tls_ensure_certs() {
  [[ -s $TLS_DIR/server-other.key ]] && return 0
  command -v openssl >/dev/null || die "tls: openssl is missing (Debian package openssl)"
  local t0 work
  t0=$(now_ms)
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  work=$(mktemp -d)
  (
    set -e
    cd "$TLS_DIR"
    ca() { # NAME CN
      openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days 3650 -subj "/CN=$2" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    }
    leaf() { # NAME CN CA EXTFILE
      openssl req -newkey rsa:2048 -nodes -keyout "$work/$1.key" -out "$work/$1.csr" -subj "/CN=$2"
      openssl x509 -req -in "$work/$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 3650 \
        -extfile "$4" -out "$1.pem"
      openssl pkcs8 -topk8 -nocrypt -in "$work/$1.key" -out "$1.key"
    }
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nextendedKeyUsage=serverAuth\n' >"$work/server.ext"
    printf 'extendedKeyUsage=clientAuth\n' >"$work/client.ext"
    ca ca "hookline local stack CA"
    ca other-ca "an untrusted CA"
    leaf server localhost ca "$work/server.ext"
    leaf client hookline ca "$work/client.ext"
    leaf server-other localhost other-ca "$work/server.ext"
    leaf other-client hookline other-ca "$work/client.ext"
    cat server.key server.pem >server-bundle.pem
    # An expired client certificate: `openssl ca` is the one OpenSSL 3.0 tool that takes explicit dates.
    mkdir -p "$work/ca-db"
    : >"$work/ca-db/index.txt"
    printf '[ca]\ndefault_ca=d\n[d]\ndatabase=%s\nnew_certs_dir=%s\nserial=%s\npolicy=p\ndefault_md=sha256\n[p]\ncommonName=supplied\n' \
      "$work/ca-db/index.txt" "$work/ca-db" "$work/ca-db/serial" >"$work/ca.cnf"
    echo 1000 >"$work/ca-db/serial"
    openssl req -newkey rsa:2048 -nodes -keyout "$work/expired.key" -out "$work/expired.csr" -subj "/CN=hookline"
    openssl ca -batch -config "$work/ca.cnf" -cert ca.pem -keyfile ca.key -in "$work/expired.csr" \
      -startdate 20200101000000Z -enddate 20200102000000Z -extfile "$work/client.ext" -notext \
      -out client-expired.pem
    openssl pkcs8 -topk8 -nocrypt -in "$work/expired.key" -out client-expired.key
    chmod 600 ./*.key
  ) >"$work/openssl.log" 2>&1 || {
    tail -n 30 "$work/openssl.log" >&2
    rm -rf "$work" "$TLS_DIR"
    die "tls: making the stack's certificates failed"
  }
  rm -rf "$work"
  log "tls: certificates made in $TLS_DIR ($(since "$t0"))"
}
