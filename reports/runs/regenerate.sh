#!/usr/bin/env bash
# Regenerates the example reports in reports/runs/ from the studies in analyses/: trains each
# study's runs (with the FP32 shadow on step 1 and every 100 steps) into target/example-runs/,
# then writes one report per study. Run from anywhere; takes about a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --quiet
bin=target/release/mixprec
runs=target/example-runs
rm -rf "$runs"
study() {
    local name=$1
    shift
    local dirs=()
    for recipe in "$@"; do
        "$bin" train --config "analyses/$name/$recipe.json" --shadow-every 100 \
            --out "$runs/$name-$recipe" >/dev/null
        dirs+=("$runs/$name-$recipe")
    done
    rm -rf "reports/runs/$name"
    "$bin" report "${dirs[@]}" --out "reports/runs/$name" >"$runs/$name-findings.txt"
    mv "$runs/$name-findings.txt" "reports/runs/$name/findings.txt"
    echo "reports/runs/$name: $(grep -c '^- ' "reports/runs/$name/findings.txt") findings"
}
study underflow fp32 fp16-master fp16-dynamic
study swamping fp32 fp16-master fp16-pure
study lstm fp32 fp16-pure
# The screenshot in the README: the top of the underflow report in headless Chromium.
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1400 \
    --screenshot=reports/runs/underflow.png "file://$PWD/reports/runs/underflow/index.html" \
    2>/dev/null
# The PyTorch example (examples/pytorch_recorder.py: a small transformer trained with autocast
# and a GradScaler under mixprec.torch.Recorder), in the Python tests' environment
# (scripts/python-env; or $PYTHON, with torch importable). Its numbers are PyTorch's own
# arithmetic, which depends on the CPU and torch's build (its kernels' summation order): on
# another machine the losses differ in the sixth digit (a rerun on an Intel Xeon against the
# copy made on an earlier session's machine); every other report here is the same bits anywhere.
python=${PYTHON:-$(scripts/python-env)/bin/python}
if [ -x "$python" ]; then
    cargo build --release --quiet -p mixprec-python
    cp target/release/lib_mixprec.so python/mixprec/.lib.so.tmp
    mv -f python/mixprec/.lib.so.tmp python/mixprec/_mixprec.abi3.so
    PYTHONPATH=python "$python" examples/pytorch_recorder.py "$runs/pytorch" >/dev/null
    rm -rf reports/runs/pytorch
    "$bin" report "$runs/pytorch" --out reports/runs/pytorch >reports/runs/pytorch-findings.txt
    mv reports/runs/pytorch-findings.txt reports/runs/pytorch/findings.txt
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,1400 \
        --screenshot=reports/runs/pytorch.png "file://$PWD/reports/runs/pytorch/index.html" \
        2>/dev/null
else
    echo "reports/runs/pytorch: no Python at $python" >&2
    exit 2
fi
