#!/usr/bin/env bash
# Regenerates reports/simulate-crosscheck/: the built-in MLP of analyses/underflow trained by
# `mixprec train` and by PyTorch under mixprec.torch.Simulate from the same start (fp32,
# fp16-master, fp16-static, fp16-dynamic; 5 seeds of 800 steps: examples/simulate_crosscheck.py,
# about 3 minutes on 2 cores), then one report of seed 0's eight runs (both engines on the same
# axes). Needs the Python tests' environment (scripts/python-env) and the built package.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=$(scripts/python-env)
cargo build --release --quiet -p mixprec -p mixprec-python
cp target/release/lib_mixprec.so python/mixprec/.lib.so.tmp
mv -f python/mixprec/.lib.so.tmp python/mixprec/_mixprec.abi3.so
out=target/simulate-crosscheck
rm -rf "$out"
PYTHONPATH="$PWD/python" "$venv/bin/python" examples/simulate_crosscheck.py "$out" \
    >"$out.md"
dest=reports/simulate-crosscheck
dirs=()
for recipe in fp32 fp16-master fp16-static fp16-dynamic; do
    dirs+=("$out/train/$recipe-s0" "$out/pytorch/$recipe-s0")
done
rm -rf "$dest/report"
target/release/mixprec report "${dirs[@]}" --out "$dest/report" >"$dest/findings.txt"
mv "$out.md" "$dest/table.md"
cp "$out/crosscheck.json" "$dest/crosscheck.json"
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1400 \
    --screenshot="$dest/report.png" "file://$PWD/$dest/report/index.html" 2>/dev/null
