#!/usr/bin/env python3
"""Prints the latency pairs of `BENCH_ONLY=latency` (scripts/bench.d/capacity.sh): per round, the bare producer's
acknowledgement at the gateway's linger and the gateway's time to 2xx, at the same open-loop rate on the same
broker, and the difference of their medians (issue 44's target: within 0.3 ms)."""
import glob
import json
import os
import re
import statistics
import sys


def main():
    results = sys.argv[1]
    rounds = sorted(
        int(re.search(r"latency-bare-(\d+)\.json$", path).group(1))
        for path in glob.glob(os.path.join(results, "latency-bare-*.json"))
    )
    print("| round | bare producer ack p50 / p99 ms | gateway time to 2xx p50 / p99 ms | gateway rate | p50 difference ms |")
    print("|---|---|---|---|---|")
    differences = []
    for n in rounds:
        gateway_path = os.path.join(results, f"latency-gateway-{n}.json")
        if not os.path.exists(gateway_path):
            continue
        with open(os.path.join(results, f"latency-bare-{n}.json")) as f:
            bare = json.load(f)["ack_latency"]
        with open(gateway_path) as f:
            load = json.load(f)["load"]
        gateway = load["time_to_2xx"]
        difference = gateway["p50_ms"] - bare["p50_ms"]
        differences.append(difference)
        print(
            f"| {n} | {bare['p50_ms']:.2f} / {bare['p99_ms']:.2f} | {gateway['p50_ms']:.2f} / {gateway['p99_ms']:.2f} "
            f"| {load['acknowledged_per_s']:,.0f}/s | {difference:+.2f} |"
        )
    if differences:
        print(f"\nMedian of the rounds' p50 differences: {statistics.median(differences):+.2f} ms")


if __name__ == "__main__":
    main()
