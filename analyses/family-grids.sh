#!/usr/bin/env bash
# Usage: analyses/family-grids.sh ANALYSIS RECIPES
# Each family's documented FP32 config (analyses/README.md: the MLP of low-precision/, cnn/,
# lstm/, gan/) trained in each of RECIPES (comma-separated) over 5 seeds, one grid per family
# (target/grid-ANALYSIS-FAMILY), and its report under reports/ANALYSIS/FAMILY/: the runs of
# families/regenerate.sh and block-scaled/regenerate.sh.
set -euo pipefail
analysis=$1
recipes=$2
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/mixprec
for family in mlp:low-precision cnn:cnn lstm:lstm gan:gan; do
    name=${family%%:*}
    config=analyses/${family#*:}/fp32.json
    "$bin" grid --config "$config" --vary "recipe=$recipes" --seeds 5 \
        --out "target/grid-$analysis-$name"
    rm -rf "reports/$analysis/$name"
    "$bin" report "target/grid-$analysis-$name" --out "reports/$analysis/$name"
done
