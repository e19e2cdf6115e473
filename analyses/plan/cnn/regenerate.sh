#!/usr/bin/env bash
# A precision plan for the CNN on digits (analyses/README.md, "plan/"): its convolution and two
# linear layers each cast alone to nvfp4 against FP32 (8 batches), the plan that casts the least
# harmful layers until 70% of the product FLOPs are cast, and its validation: fp32, every layer
# in nvfp4 and the plan, 800 steps, seeds 0-4 (15 runs, about 2 minutes on 2 cores), and the
# report under reports/plan/cnn/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release --quiet
bin=target/release/mixprec
rm -rf target/plan-cnn
"$bin" plan --config analyses/plan/cnn/fp32.json --recipe nvfp4 --flops-share 0.7 \
    --validate --seeds 5 --out target/plan-cnn
rm -rf reports/plan/cnn
"$bin" report target/plan-cnn --out reports/plan/cnn
