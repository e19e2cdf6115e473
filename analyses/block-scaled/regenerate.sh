#!/usr/bin/env bash
# The block-scaled table of analyses/README.md: each family's documented FP32 config trained in
# fp32, bf16-master, fp8-hybrid (per-tensor delayed scaling), mxfp8 and nvfp4 (a scale per block
# along each product's sum) over 5 seeds (100 runs), one grid per family, and its report under
# reports/block-scaled/.
set -euo pipefail
"$(dirname "$0")/../family-grids.sh" block-scaled fp32,bf16-master,fp8-hybrid,mxfp8,nvfp4
cd "$(dirname "$0")/../.."
# The table of analyses/README.md, from the reports.
python3 - <<'PY'
import json
for family, label in [("mlp", "MLP (digits)"), ("cnn", "CNN (digits)"), ("lstm", "LSTM (recall)"),
                      ("gan", "GAN (ring, modes of 8)")]:
    report = json.load(open(f"reports/block-scaled/{family}/report.json"))
    for cell in report["cells"]:
        m, d = cell["metric"], cell["metric_vs_fp32"]
        diff = "—" if d is None else f"{d['difference']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"
        p = "—" if d is None else f"{d['p_value']:.3f}"
        print(f"| {label} | `{cell['series']}` | {m['mean']:.4f} [{m['low']:.4f}, {m['high']:.4f}]"
              f" | {diff} | {p} |")
PY
