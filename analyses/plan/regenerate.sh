#!/usr/bin/env bash
# The precision plans of the built-in models (analyses/README.md, "plan/"), each: every layer
# that forms products cast alone to the recipe against FP32 (8 batches), the plan that casts the
# least harmful layers until the FLOPs share is cast, and its validation (fp32, every layer cast
# and the plan; 800 steps, seeds 0-4: 15 runs), then the page under reports/plan/<model>/.
#   mlp          the MLP on digits, mxfp4, 60%   (about a minute on 2 cores)
#   mlp-spirals  the MLP on spirals, mxfp4, 60%  (about 20 seconds)
#   cnn          the CNN on digits, nvfp4, 70%   (about 2 minutes)
# Usage: analyses/plan/regenerate.sh [MODEL...]   (all three by default). The zoo's plans
# (PyTorch) are analyses/plan/<model>/regenerate.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
declare -A recipe=([mlp]=mxfp4 [mlp-spirals]=mxfp4 [cnn]=nvfp4)
declare -A share=([mlp]=0.6 [mlp-spirals]=0.6 [cnn]=0.7)
for model in "${@:-mlp mlp-spirals cnn}"; do
    for m in $model; do
        [[ -n "${recipe[$m]:-}" ]] || { echo "regenerate.sh: unknown model '$m' (mlp, mlp-spirals, cnn)" >&2; exit 2; }
        rm -rf "target/plan-$m"
        "$bin" plan --config "analyses/plan/$m/fp32.json" --recipe "${recipe[$m]}" \
            --flops-share "${share[$m]}" --validate --seeds 5 --out "target/plan-$m"
        rm -rf "reports/plan/$m"
        "$bin" report "target/plan-$m" --out "reports/plan/$m"
    done
done
