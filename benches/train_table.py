#!/usr/bin/env python3
"""Prints markdown tables of `cargo bench --bench train` from target/criterion.

Usage: benches/train_table.py

For each model: the median time of one step per recipe (with its 95% interval), the ratio to the
fp32 step, and the cost of capturing every step and every 10th step, as ratios measured in the
same run; the GEMM baseline first where the group has one.
"""
import json
import os
import pathlib

# Where criterion writes (its CRITERION_HOME, as benches/compare.sh sets it).
ROOT = pathlib.Path(os.environ.get("CRITERION_HOME", "target/criterion"))
GROUPS = ["digits-mlp", "digits-cnn", "mlp-784-1024-1024-10"]
RECIPES = ["fp32", "fp16-dynamic", "bf16-master", "fp8-hybrid"]


def medians(group):
    out = {}
    for bench in (ROOT / group).rglob("new/benchmark.json"):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())["median"]
        ci = est["confidence_interval"]
        out[meta["full_id"].split("/", 1)[1]] = (
            est["point_estimate"] / 1e6,
            ci["lower_bound"] / 1e6,
            ci["upper_bound"] / 1e6,
        )
    return out


def main():
    for group in GROUPS:
        m = medians(group)
        print(f"### {group}\n")
        base = m.get("baseline: f32 GEMMs only")
        if base:
            print(f"GEMMs only (baseline): {base[0]:.3f} ms\n")
        print("| recipe | step (ms, 95% interval) | vs fp32 step | capture every step | every 10th step |")
        print("|---|---:|---:|---:|---:|")
        fp32 = m["fp32"][0]
        for r in RECIPES:
            t, lo, hi = m[r]
            every = m[f"{r}+capture"][0] / t
            tenth = m[f"{r}+capture/10"][0] / t - 1
            print(
                f"| {r} | {t:.3f} ({lo:.3f}-{hi:.3f}) | {t / fp32:.2f} | "
                f"{every:.2f}x | {tenth * 100:+.1f}% |"
            )
        print()


if __name__ == "__main__":
    main()
