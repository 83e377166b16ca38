#!/bin/bash
# Runs a consumer binary ($CALLGRIND_BIN) under callgrind; forwards SIGTERM so the consumer drains and callgrind
# writes its file.
out=${CALLGRIND_OUT_DIR:-/tmp/cg}/callgrind.out.${CALLGRIND_TAG:-run}.%p
if [ -n "$CALLGRIND_RUST_LOG" ]; then export RUST_LOG=$CALLGRIND_RUST_LOG; fi
valgrind --tool=callgrind --callgrind-out-file="$out" \
  "$CALLGRIND_BIN" "$@" 2>>"${CALLGRIND_OUT_DIR:-/tmp/cg}/valgrind.${CALLGRIND_TAG:-run}.log" &
pid=$!
trap 'kill -TERM $pid; wait $pid' TERM
wait $pid
