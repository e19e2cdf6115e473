#!/usr/bin/env bash
# A precision plan for the MLP on digits (analyses/README.md, "plan/"): each of its three
# linear layers cast alone to mxfp4 against FP32 (8 batches), the plan that casts the least
# harmful layers until 60% of the product FLOPs are cast, and its validation: fp32, every layer
# in mxfp4 and the plan, 800 steps, seeds 0-4 (15 runs, about a minute on 2 cores), and the
# report under reports/plan/mlp/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release --quiet
bin=target/release/mixprec
rm -rf target/plan-mlp
"$bin" plan --config analyses/plan/mlp/fp32.json --recipe mxfp4 --flops-share 0.6 \
    --validate --seeds 5 --out target/plan-mlp
rm -rf reports/plan/mlp
"$bin" report target/plan-mlp --out reports/plan/mlp
