#!/usr/bin/env bash
# The families table of analyses/README.md: each family's documented FP32 config trained in
# fp32, fp16-dynamic, bf16-master and fp8-hybrid over 5 seeds (80 runs, about 4 minutes on 2
# cores), one grid per family, and its report under reports/families/.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
for family in mlp:low-precision cnn:cnn lstm:lstm gan:gan; do
    name=${family%%:*}
    config=analyses/${family#*:}/fp32.json
    "$bin" grid --config "$config" --vary recipe=fp32,fp16-dynamic,bf16-master,fp8-hybrid \
        --seeds 5 --out "target/grid-families-$name"
    rm -rf "reports/families/$name"
    "$bin" report "target/grid-families-$name" --out "reports/families/$name"
done
