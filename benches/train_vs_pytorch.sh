#!/usr/bin/env bash
# The anchor fp32 training step (MLP 784-1024-1024-10, batch 256, ReLU, SGD, cross-entropy), ours
# against PyTorch's, in interleaved rounds so that both see the same machine load.
#
#   benches/train_vs_pytorch.sh [THREADS] [ROUNDS]     (defaults: 2 threads, 6 rounds)
#
# Each round runs our criterion bench (median of 10 samples; fp32, then fp16-dynamic) and then
# benches/peers/train_step.py (median of 60 steps); prints one markdown row per round: ours in fp32,
# PyTorch fp32, PyTorch bf16 autocast, ours in fp16-dynamic (milliseconds per step).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
rounds=${2:-6}
bench=$(cargo bench --bench train --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "train" and m.get("executable"):
        print(m["executable"])')
benches/peers/run.sh train --threads "$threads" --steps 5 --warmup 1 >/dev/null
echo "| round | mixprec fp32 (ms) | PyTorch fp32 (ms) | PyTorch bf16 autocast (ms) | mixprec fp16-dynamic (ms) |"
echo "|---:|---:|---:|---:|---:|"
for i in $(seq "$rounds"); do
  # criterion prints the id, then (on the same line or the next) "time: [low median high]".
  read -r ours ours16 < <(RAYON_NUM_THREADS=$threads "$bench" \
    --bench 'mlp-784-1024-1024-10/(fp32|fp16-dynamic)$' 2>&1 |
    awk '/^mlp-784-1024-1024-10\// {id = $1}
         /time:/ {sub(/.*time: *\[/, ""); v = $3; if ($4 == "s") v *= 1e3; if ($4 == "µs") v /= 1e3
                  t[id] = v}
         END {print t["mlp-784-1024-1024-10/fp32"], t["mlp-784-1024-1024-10/fp16-dynamic"]}')
  read -r fp32 bf16 < <(benches/peers/run.sh train --threads "$threads" --steps 60 2>/dev/null |
    awk '/^fp32/ {a=$3} /^bf16/ {b=$3} END {print a, b}')
  echo "| $i | $ours | $fp32 | $bf16 | $ours16 |"
done
