#!/usr/bin/env bash
# The gateway's peak RSS under an HTTP/2 stream flood (docs/benchmarks/h2-stream-flood.md).
# run.sh <gateway binary> <h2-flood-bench binary> <label> <out dir> [extra [limits] lines]
# Starts a fresh gateway on 127.0.0.1:48480 against $KAFKA_BROKERS, floods it (512 connections, 32 streams
# offered on each, 60 KiB of headers a stream, no body, held 5 s), writes <label>.txt, <label>.toml,
# <label>.load (uptime before and after) and <label>.gateway.log (ignored by git).
set -euo pipefail
gateway=$1 flood=$2 label=$3 out=$4 extra=${5:-}
mkdir -p "$out"
secrets=$(mktemp -d)
printf 'bench-github-secret' >"$secrets/github"
printf 'bench-record-key-0123456789abcdef0123456789' >"$secrets/record-key"
cat >"$out/$label.toml" <<TOML
listen_addr = "127.0.0.1:48480"
admin_addr = "127.0.0.1:48490"
[kafka]
brokers = "${KAFKA_BROKERS:?eval \$(scripts/stack env) first}"
inbound_topic = "webhooks.inbound"
[kafka.record_auth]
keys = [{ id = "bench", file = "$secrets/record-key" }]
[limits]
request_deadline_ms = 60000
body_read_timeout_ms = 60000
$extra
[[sources]]
name = "github"
scheme = "github"
type_from_header = true
secrets = [{ id = "bench", file = "$secrets/github" }]
TOML
RUST_LOG=warn "$gateway" --config "$out/$label.toml" >"$out/$label.gateway.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$secrets"' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:48490/livez >/dev/null && break; sleep 0.1; done
{ date -u; uptime; } >"$out/$label.load"
"$flood" --target 127.0.0.1:48480 --pid "$pid" --connections 512 --streams 32 --header-bytes 61440 \
  --connections-per-address 64 --hold-s 5 | tee "$out/$label.txt"
uptime >>"$out/$label.load"
