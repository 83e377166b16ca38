#!/usr/bin/env python3
"""Groups callgrind_annotate's exclusive (self) Ir per function into buckets, by source file / symbol."""
import re, sys, collections
rules = [
    ("librdkafka (C: fetch, decode, broker threads)", r"rdkafka-sys|librdkafka|/out/src/rd|/out/src-cpp|zstd|lz4|libz\.so|crc32c"),
    ("rdkafka Rust wrapper + header parsing", r"rdkafka-0\.|header_str|wire::"),
    ("Redis client (encode/decode, redis crate)", r"/redis-\d|combine-|redis::"),
    ("tracing / log line formatting", r"tracing|sharded-slab|core/src/fmt|alloc/src/fmt|nu-ansi|<alloc::string::String as core::fmt::Write>|time-0|chrono|itoa|ryu|num/fmt|matchers|regex"),
    ("metrics", r"prometheus|metrics"),
    ("allocation (malloc/free)", r"malloc\.c|libc_malloc|arena\.c|alloc/src/raw_vec|alloc::alloc|__rust_alloc|__rust_dealloc|__rdl_"),
    ("memcpy/strlen/memcmp (libc string)", r"memmove|memcpy|strlen|memcmp|memset|strcmp|strchr|strncmp"),
    ("UTF-8 validation (from_utf8)", r"from_utf8|validations\.rs"),
    ("tokio runtime, channels, timers", r"tokio-|tokio::|futures-|parking_lot|mio-"),
    ("hookline consumer (window, scheduler, pipeline, dedupe)", r"/wt-cprofile/consumer/|hookline_consumer"),
    ("hookline common", r"/wt-cprofile/common/|hookline_common"),
    ("serde / json", r"serde"),
    ("hyper / http client", r"hyper|reqwest|h2-|http-"),
    ("libc other / kernel entry (futex, syscalls wrappers)", r"libc\.so|ld-linux|libpthread"),
]
totals = collections.Counter(); total = None
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)$", line)
    if not m: continue
    ir = int(m.group(1).replace(",", "")); name = m.group(2)
    if "PROGRAM TOTALS" in name: total = ir; continue
    for bucket, rx in rules:
        if re.search(rx, name): totals[bucket] += ir; break
    else: totals["other (std, hashbrown, bytes, ...)"] += ir
n = float(sys.argv[2]) if len(sys.argv) > 2 else 1
print(f"total Ir {total:,}; per event {total/n:,.0f}")
for b, ir in totals.most_common():
    print(f"{ir:>15,}  {100*ir/total:5.1f}%  {ir/n:>9,.0f}/event  {b}")
