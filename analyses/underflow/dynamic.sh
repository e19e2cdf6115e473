#!/usr/bin/env bash
# "A dynamic scaler that really moves" (analyses/README.md): the underflow study's fp16-dynamic
# run with GradScaler's rule growing every 100 steps from a scale of 1 (too small: it must
# climb) and from 2^40 (too large: it must back off), beside static 1 and 2^16, over 5 seeds;
# then each moving run (seed 0) replayed under other policies. About a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
out=target/grid-dynamic
"$bin" grid --config analyses/underflow/fp16-dynamic.json --seeds 5 --out "$out" \
    --vary 'scaler=static:2^0,"gradscaler:init_scale=1,growth_interval=100",static:2^16,"gradscaler:init_scale=2^40,growth_interval=100"'
rm -rf reports/dynamic-scaler
"$bin" report "$out" --out reports/dynamic-scaler/grid
"$bin" replay "$out/runs/scaler=gradscaler-init_scale-1-growth_interval-100,seed=0" \
    --policy run gradscaler static:2^16 "gradscaler:init_scale=1,growth_interval=50" \
    --out reports/dynamic-scaler/replay-climbing
"$bin" replay "$out/runs/scaler=gradscaler-init_scale-2^40-growth_interval-100,seed=0" \
    --policy run gradscaler megatron deepspeed --out reports/dynamic-scaler/replay-backing-off
