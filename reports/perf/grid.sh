#!/usr/bin/env bash
# Measures `mixprec grid` against the same runs trained one by one with `mixprec train` (a shell
# loop, each run on the default threads), side by side: the two alternate, ROUNDS times, so that
# both see the same load. Prints wall seconds and runs per minute. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/../.."
# BIN: a mixprec binary already built (default: build this checkout's).
if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet
fi
bin=${BIN:-$PWD/target/release/mixprec}
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 12 runs of the underflow study's fp16-master MLP, 200 steps each, at loss scales 2^0..2^11.
sed 's/"steps": 800/"steps": 200/' analyses/underflow/fp16-master.json >"$work/base.json"
vary=(--vary loss_scale=2^0..2^11)
runs=12
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; threads $threads"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
    rm -rf "$work/grid" "$work/loop"
    start=$(date +%s.%N)
    RAYON_NUM_THREADS=$threads "$bin" grid --config "$work/base.json" "${vary[@]}" \
        --out "$work/grid" >/dev/null
    grid=$(echo "$(date +%s.%N) - $start" | bc)
    start=$(date +%s.%N)
    # The same runs from their config.json, one after the other.
    for dir in "$work"/grid/runs/*/; do
        RAYON_NUM_THREADS=$threads "$bin" train --config "$dir/config.json" \
            --out "$work/loop/$(basename "$dir")" >/dev/null
    done
    loop=$(echo "$(date +%s.%N) - $start" | bc)
    for f in metrics.jsonl captures.jsonl; do
        for dir in "$work"/grid/runs/*/; do
            cmp -s "$dir/$f" "$work/loop/$(basename "$dir")/$f" || { echo "differs: $dir$f"; exit 1; }
        done
    done
    printf 'round %d: grid %.1f s (%.1f runs/min), one by one %.1f s (%.1f runs/min), ratio %.2f; load %s\n' \
        "$round" "$grid" "$(echo "60 * $runs / $grid" | bc -l)" "$loop" \
        "$(echo "60 * $runs / $loop" | bc -l)" "$(echo "$loop / $grid" | bc -l)" \
        "$(cut -d' ' -f1-3 /proc/loadavg)"
done
