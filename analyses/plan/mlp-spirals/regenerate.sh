#!/usr/bin/env bash
# A precision plan for the MLP on spirals (analyses/README.md, "plan/"): each of its three
# linear layers cast alone to mxfp4 against FP32 (8 batches), the plan that casts the least
# harmful layers until 60% of the product FLOPs are cast, and its validation: fp32, every layer
# in mxfp4 and the plan, 800 steps, seeds 0-4 (15 runs, about 20 seconds on 2 cores), and the
# report under reports/plan/mlp-spirals/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release --quiet
bin=target/release/mixprec
rm -rf target/plan-mlp-spirals
"$bin" plan --config analyses/plan/mlp-spirals/fp32.json --recipe mxfp4 --flops-share 0.6 \
    --validate --seeds 5 --out target/plan-mlp-spirals
rm -rf reports/plan/mlp-spirals
"$bin" report target/plan-mlp-spirals --out reports/plan/mlp-spirals
