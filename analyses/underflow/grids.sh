#!/usr/bin/env bash
# The loss-scale grids of analyses/underflow (analyses/README.md): grid.json (Adam) and
# grid-sgd.json (SGD with momentum 0.9, its learning rate times 2^16 to undo the loss
# multiplier), each trained in fp16 with FP32 master weights at every static loss scale
# 2^0..2^30 and in fp32 (trained once: a loss scale cannot change FP32 training), 5 seeds (160
# runs each, under a minute each on 2 cores), and their reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
for study in grid:underflow-grid grid-sgd:sgd-underflow-grid; do
    config=${study%%:*} report=${study##*:}
    "$bin" grid --config "analyses/underflow/$config.json" --vary recipe=fp32,fp16-master \
        --vary loss_scale=2^0..2^30 --seeds 5 --out "target/$report"
    rm -rf "reports/$report"
    "$bin" report "target/$report" --out "reports/$report"
done
