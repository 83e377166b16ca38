#!/usr/bin/env python3
"""Prints the runs of `BENCH_ONLY=dedupe-ab` (scripts/bench.d/capacity.sh): per run, the consumer's events/s, its
CPU per event and peak RSS, Redis's CPU and bytes per event; then each build's means and this build's against the
other's."""
import glob
import json
import os
import re
import statistics
import sys


def main():
    results = sys.argv[1]
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "dedupe-ab-*-*.json"))):
        round_, which = re.search(r"dedupe-ab-(\d+)-(\w+)\.json$", path).groups()
        with open(path) as f:
            row = next(r for r in json.load(f)["rows"] if r["kind"] == "end_to_end")
        with open(path[: -len(".json")] + ".redis") as f:
            redis = json.load(f)
        runs.append((int(round_), which, row, redis))
    print("| round | build | events/s | consumer CPU µs/event | peak RSS MiB | Redis CPU µs/event | Redis B/event |")
    print("|---|---|---|---|---|---|---|")
    for round_, which, row, redis in sorted(runs, key=lambda r: (r[0], r[1])):
        print(
            f"| {round_} | {which} | {row['events_per_s']:,.0f} | {row['cpu']['process_us']:.2f} | "
            f"{row['peak_rss_mib']:.0f} | {redis['redis_cpu_us_per_event']:.2f} | {redis['redis_bytes_per_event']:.1f} |"
        )
    figures = {
        "events/s": lambda row, redis: row["events_per_s"],
        "consumer CPU µs/event": lambda row, redis: row["cpu"]["process_us"],
        "Redis CPU µs/event": lambda row, redis: redis["redis_cpu_us_per_event"],
        "Redis B/event": lambda row, redis: redis["redis_bytes_per_event"],
    }
    print("\n| figure | before (mean) | this (mean) | this / before |")
    print("|---|---|---|---|")
    for name, figure in figures.items():
        means = {
            which: statistics.mean(figure(row, redis) for _, w, row, redis in runs if w == which)
            for which in ("before", "this")
        }
        print(f"| {name} | {means['before']:,.2f} | {means['this']:,.2f} | {means['this'] / means['before']:.3f} |")


if __name__ == "__main__":
    main()
