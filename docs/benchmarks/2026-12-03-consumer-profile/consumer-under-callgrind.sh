#!/bin/bash
# Runs the release consumer under callgrind; forwards SIGTERM so the consumer drains and callgrind writes its file
# even if the caller later SIGKILLs this wrapper (valgrind is a separate child and keeps going).
out=${CALLGRIND_OUT_DIR:-/tmp/cprofile-work}/callgrind.out.${CALLGRIND_TAG:-run}.%p
if [ -n "$CALLGRIND_RUST_LOG" ]; then export RUST_LOG=$CALLGRIND_RUST_LOG; fi
valgrind --tool=callgrind --callgrind-out-file="$out" \
  /work/wt-cprofile/target/release/consumer "$@" 2>>"${CALLGRIND_OUT_DIR:-/tmp/cprofile-work}/valgrind.${CALLGRIND_TAG:-run}.log" &
pid=$!
trap 'kill -TERM $pid; wait $pid' TERM
wait $pid
