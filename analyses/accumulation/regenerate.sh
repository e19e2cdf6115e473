#!/usr/bin/env bash
# "Accumulating in fp16 loses what FP32 accumulation keeps" (analyses/README.md): the CNN of
# analyses/cnn with its loss multiplied by 2^-16 (a loss normalised over a 65,536-example batch),
# trained in fp32 and in fp16 with FP32 master weights, each product accumulated in FP32 or in
# fp16 (rounded after every multiply-add), at static loss scales 2^1..2^8, 5 seeds (160 runs,
# about 5 minutes on 2 cores), and the grid's report.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
"$bin" grid --config analyses/accumulation/cnn.json --vary recipe=fp32,fp16-master \
    --vary recipe.accumulation=fp32,storage --vary loss_scale=2^1..2^8 --seeds 5 \
    --out target/grid-accumulation
rm -rf reports/accumulation
"$bin" report target/grid-accumulation --out reports/accumulation
