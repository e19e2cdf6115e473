#!/usr/bin/env bash
# "Which loss scale trains like FP32" (analyses/README.md), the LSTM's grid: the recall LSTM of
# analyses/lstm with its loss multiplied by 2^-16 (as analyses/underflow does for the MLP),
# trained in fp16 with FP32 master weights at every static loss scale 2^0..2^30 and in fp32
# (trained once: a loss scale cannot change FP32 training), 5 seeds (160 runs, about 3 minutes on
# 2 cores), and the grid's report.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
"$bin" grid --config analyses/lstm/grid.json --vary recipe=fp32,fp16-master \
    --vary loss_scale=2^0..2^30 --seeds 5 --out target/grid-lstm-underflow
rm -rf reports/lstm-underflow-grid
"$bin" report target/grid-lstm-underflow --out reports/lstm-underflow-grid
