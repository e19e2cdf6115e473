#!/bin/sh
# Regenerates everything in reports/block-analysis/ (run from the repository root).
set -e
cargo build --release --example gradients
cargo build --release
g=/tmp/mixprec-grads.safetensors
g2=/tmp/mixprec-grads-2d.safetensors
./target/release/examples/gradients "$g"
# The same generator with 4194560 values: the two "weight" gradients become 2-D ([19662, 64]
# and [3277, 64]), so that 128x128 tiles differ from 1x128 ones.
./target/release/examples/gradients "$g2" 4194560
out=reports/block-analysis
for f in mxfp8-e4m3 mxfp4 nvfp4 fp8-e4m3@128x128; do
    d="$out/$(echo "$f" | tr @ -)"
    mkdir -p "$d"
    ./target/release/mixprec analyze "$g" --format "$f" --plots "$d" > "$d/analyze.txt"
done
mkdir -p "$out/compare" "$out/compare-2d"
./target/release/mixprec analyze "$g" --compare-blocks --plots "$out/compare" > "$out/compare/analyze.txt"
./target/release/mixprec analyze "$g" --compare-blocks --json > "$out/compare/analyze.json"
./target/release/mixprec analyze "$g2" --compare-blocks --plots "$out/compare-2d" > "$out/compare-2d/analyze.txt"
