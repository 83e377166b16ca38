#!/bin/bash
out="${CALLGRIND_OUT_DIR:-.}"/callgrind.out.${CALLGRIND_TAG:-run}.%p
valgrind --tool=callgrind --callgrind-out-file="$out" "$CONSUMER" "$@" 2>>"${CALLGRIND_OUT_DIR:-.}"/valgrind.${CALLGRIND_TAG:-run}.log &
pid=$!
trap 'kill -TERM $pid; wait $pid' TERM
wait $pid
