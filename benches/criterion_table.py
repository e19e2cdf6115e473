#!/usr/bin/env python3
"""Prints a markdown table of one criterion benchmark group from target/criterion.

Usage: benches/criterion_table.py GROUP ELEMENTS [BASELINE_PREFIX]

Each row: benchmark id, median time, throughput (ELEMENTS per iteration) and the time as a ratio
to the baseline measured in the same run: the id that starts with BASELINE_PREFIX (default
"copy/") and ends with the same thread label ("1-thread" or "all-threads") as the row.
"""
import json
import pathlib
import sys


def main():
    group, elements = sys.argv[1], float(sys.argv[2])
    prefix = sys.argv[3] if len(sys.argv) > 3 else "copy/"
    root = pathlib.Path("target/criterion") / group
    rows = []
    for bench in sorted(root.rglob("new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        bid = meta["full_id"].split("/", 1)[1]
        rows.append((bid, est["median"]["point_estimate"]))
    base = {}
    for bid, t in rows:
        if bid.startswith(prefix):
            base[bid[len(prefix):]] = t
    print("| benchmark | median ms | G values/s | time / baseline |")
    print("|---|---:|---:|---:|")
    for bid, t in rows:
        threads = "all-threads" if "all-threads" in bid else "1-thread"
        ratio = t / base[threads] if threads in base else float("nan")
        print(f"| {bid} | {t / 1e6:.2f} | {elements / t:.3f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
