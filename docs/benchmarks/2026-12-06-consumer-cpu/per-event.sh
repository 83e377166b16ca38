#!/bin/bash
# per-event.sh <callgrind.out> <events>: inclusive instructions per event of the record's main parts
f=$1; n=$2
callgrind_annotate --auto=no --threshold=100 --inclusive=yes $f 2>/dev/null > ${f}.incl.txt
callgrind_annotate --auto=no --threshold=100 $f 2>/dev/null > ${f}.excl.txt
for pat in "PROGRAM TOTALS" "Pipeline::process::{{closure}}" "RecordKeys::verify " "sha2::sha256::compress256 " "Pipeline::handle::{{closure}}" "start_ready " "tokio::task::spawn::spawn " "wire::header_str " "admission_of " "Message>::headers " "rd_kafka_msgset_parse " "rd_kafka_lz4_decompress " "format_inner " "redis::cmd::write_command "; do
  v=$(grep -F -m1 "$pat" ${f}.incl.txt | awk '{gsub(",","",$1); print $1}')
  [ -n "$v" ] && printf '%-40s %8.1fk\n' "$pat" $(echo "$v / $n / 1000" | bc -l)
done
echo "-- exclusive malloc family and memcpy:"
grep -E "malloc.c:|arena.c:|memmove|mimalloc|mi_" ${f}.excl.txt | awk -v n=$n '{gsub(",","",$1); s+=$1} END {printf "alloc+memcpy exclusive %.1fk\n", s/n/1000}'
