#!/usr/bin/env bash
# The families table of analyses/README.md: each family's documented FP32 config trained in
# fp32, fp16-dynamic, bf16-master and fp8-hybrid over 5 seeds (80 runs, about 4 minutes on 2
# cores), one grid per family, and its report under reports/families/.
set -euo pipefail
"$(dirname "$0")/../family-grids.sh" families fp32,fp16-dynamic,bf16-master,fp8-hybrid
