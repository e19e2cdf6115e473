#!/usr/bin/env bash
# "Does stochastic rounding rescue fp16-pure?" (analyses/README.md): the swamping study's
# fp32, fp16-master and fp16-pure runs with nearest-even and with stochastic rounding, 5 seeds
# (30 runs, under a minute on 2 cores), and the grid's report.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
"$bin" grid --config analyses/swamping/fp16-pure.json --vary recipe=fp32,fp16-master,fp16-pure \
    --vary recipe.rounding=nearest-even,stochastic --seeds 5 --out target/grid-stochastic
rm -rf reports/stochastic-rounding
"$bin" report target/grid-stochastic --out reports/stochastic-rounding
