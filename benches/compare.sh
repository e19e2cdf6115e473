#!/usr/bin/env bash
# Every speed comparison of issue 11, ours and the peers', in interleaved rounds (each round runs
# every comparison once, so that drift in the machine's load hits both sides alike), written to
# one table per machine kind: reports/perf/machines/<cpu-slug>.md, with the CPU, its SIMD
# features, the load and the tools' versions at the top.
#
#   benches/compare.sh [--quick] [--rounds N] [--analyze-mib N] [--capture-steps N] [--out FILE]
#
#   --quick            a smoke run: 1 round, a 64 MiB analyze file, 30-step capture runs, short
#                      criterion timings (a few minutes)
#   --rounds N         rounds (default 3)
#   --analyze-mib N    size of the analyze file in MiB (default 256; the issue's figure is 1024)
#   --capture-steps N  steps of each capture run (default 300)
#   --out FILE         the table (default reports/perf/machines/<cpu-slug>.md)
#   --note TEXT        a sentence for the top of the table (what else the machine was doing)
#   --only analyze     only comparison (b) and its profiles (a few minutes): section (b) and the
#                      analyze profiles of the existing table are replaced, with the run's date,
#                      load and commit; the other sections stay as they were measured
#
# Comparisons: (a) rounding 16M gradient-like f32 in place, one thread: benches/round.rs against
# numpy, ml_dtypes and torch (benches/peers/quantize_peers.py); (b) `mixprec analyze` of a
# safetensors file of log-uniform values against `cat FILE > /dev/null` from the page cache;
# (c) the anchor training step against PyTorch's, 1 and 2 threads (benches/train_vs_pytorch.sh),
# and our fp16-dynamic step against our fp32 step; (d) capture: the step with a capture against
# without, and `mixprec train` runs of the anchor with --capture-every 0, 100 and 1. The ratios of
# our own steps (fp16-dynamic over fp32, with a capture over without) come from
# `benches/train.rs --pairs`, whose two sides alternate step by step; (e) a perf profile of each (self time by symbol), where perf is installed. The peers
# run in the project's Python environment (scripts/python-env, made on first use). Temporary files (the analyze file, runs) go under target/compare/.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

rounds=3 mib=256 steps=300 quick=0 out="" note="" only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 rounds=1 mib=64 steps=30 ;;
    --rounds) rounds=${2:?}; shift ;;
    --analyze-mib) mib=${2:?}; shift ;;
    --capture-steps) steps=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --note) note=${2:?}; shift ;;
    --only) only=${2:?}; shift
      [ "$only" = analyze ] || { echo "compare.sh: --only takes 'analyze'" >&2; exit 2; } ;;
    *) echo "compare.sh: unknown option '$1' (see the header of benches/compare.sh)" >&2; exit 2 ;;
  esac
  shift
done
for v in "$rounds" "$mib" "$steps"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: '$v' is not a positive integer" >&2; exit 2; }
done

started=$SECONDS
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
cpu_field() { lscpu | sed -n "s/^$1: *//p" | head -1; }
model=$(cpu_field 'Model name')
family=$(cpu_field 'CPU family')
cpu_model=$(cpu_field 'Model')
slug=$(echo "$model-f$family-m$cpu_model" | tr 'A-Z' 'a-z' | sed 's/([^)]*)//g; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
out=${out:-reports/perf/machines/$slug.md}
work=$root/target/compare
mkdir -p "$work" "$(dirname "$out")"
results=$work/results.tsv
: >"$results"
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$round" "$3" >>"$results"; }
say() { echo "compare.sh [$((SECONDS - started)) s] $*" >&2; }

say "building (cargo build --release, the round and train benches)"
cargo build --release --quiet
[ -n "$only" ] || benches=$(cargo bench --bench round --bench train --no-run --message-format=json 2>/dev/null |
  python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["target"]["name"], m["executable"])')
round_bench=$(awk '$1 == "round" {print $2}' <<<"${benches:-}")
train_bench=$(awk '$1 == "train" {print $2}' <<<"${benches:-}")
venv=$(scripts/python-env)
py=$venv/bin/python
export CRITERION_HOME=$work/criterion
quick_criterion=()
[ $quick = 1 ] && quick_criterion=(--warm-up-time 1 --measurement-time 2)

# The analyze file: log-uniform magnitudes over 2^-30..2^10, both signs (as benches/round.rs),
# in 4 f32 tensors, written by a safetensors header and raw little-endian data.
data=$work/gradients-${mib}MiB.safetensors
if [ ! -f "$data" ]; then
  say "writing $data"
  "$py" - "$data" "$mib" <<'EOF'
import json, sys
import numpy as np
path, mib = sys.argv[1], int(sys.argv[2])
n = mib * (1 << 20) // 4 // 4
header = {f"grad.{i}": {"dtype": "F32", "shape": [n], "data_offsets": [4 * n * i, 4 * n * (i + 1)]}
          for i in range(4)}
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
rng = np.random.default_rng(11)
with open(path + ".part", "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text)
    for _ in range(4):
        for start in range(0, n, 1 << 22):
            m = min(1 << 22, n - start)
            v = np.exp2(rng.uniform(-30.0, 10.0, m)) * np.where(rng.integers(0, 2, m) == 0, 1.0, -1.0)
            f.write(v.astype("<f4").tobytes())
import os
os.replace(path + ".part", path)
EOF
fi

# The capture runs' data: the anchor's shapes (784 features, 10 classes, batch 256), random.
if [ ! -f "$work/anchor-x.npy" ]; then
  "$py" - "$work" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(9)
np.save(sys.argv[1] + "/anchor-x.npy", rng.uniform(0, 1, (4096, 784)).astype(np.float32))
np.save(sys.argv[1] + "/anchor-y.npy", rng.integers(0, 10, 4096).astype(np.int64))
EOF
fi
cat >"$work/anchor.json" <<EOF
{"model": "mlp", "mlp": {"depth": 2, "width": 1024, "activation": "relu"},
 "dataset": "$work/anchor-x.npy", "recipe": "fp16-dynamic",
 "optimizer": {"kind": "sgd", "lr": 0.01, "momentum": 0.0},
 "batch": 256, "steps": $steps, "eval_every": 0}
EOF

# Seconds of wall and CPU time and peak RSS (KiB) of a command: "wall cpu rss".
timed() {
  /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$@" >/dev/null
  awk '{print $1, $2 + $3, $4}' "$work/time"
}

# Criterion medians (ms) of one group, by id, from CRITERION_HOME (benches/train_table.py's reader).
medians() {
  (cd benches && "$py" -c 'import sys, train_table
for k, v in train_table.medians(sys.argv[1]).items(): print(k + "\t" + str(v[0]))' "$1")
}

for round in $(seq "$rounds"); do
  if [ -z "$only" ]; then
  say "round $round of $rounds: (a) rounding"
  rm -rf "$CRITERION_HOME"
  RAYON_NUM_THREADS=1 "$round_bench" --bench \
    '^round_16M_f32/(copy/1-thread|1-thread/[^/]+/(nearest-even|stochastic))$' \
    "${quick_criterion[@]}" >/dev/null 2>&1
  while IFS=$'\t' read -r id ms; do
    case "$id" in
      copy/1-thread) record round "mixprec plain copy" "$ms" ;;
      1-thread/*/nearest-even | 1-thread/*/stochastic) record round "mixprec ${id#1-thread/}" "$ms" ;;
    esac
  done < <(medians round_16M_f32)
  peers=$(benches/peers/run.sh quantize --data gradient-like --repeats $((quick ? 2 : 3)))
  while IFS=$'\t' read -r name ms; do record round-peer "$name" "$ms"; done < <(
    sed -nE 's/^gradient-like +(.*[^ ]) +([0-9.]+) ms .*/\1\t\2/p' <<<"$peers")
  fi

  say "round $round: (b) analyze of $mib MiB"
  cat "$data" >/dev/null
  t=$(timed cat "$data")
  record analyze "cat FILE > /dev/null" "$t"
  t=$(RAYON_NUM_THREADS=1 timed target/release/mixprec analyze "$data")
  record analyze "mixprec analyze FILE, 1 thread" "$t"
  t=$(timed target/release/mixprec analyze "$data")
  record analyze "mixprec analyze FILE, $(nproc) threads" "$t"
  [ -z "$only" ] || continue

  for threads in 1 2; do
    say "round $round: (c) anchor step, $threads thread(s), ours and PyTorch's"
    row=$(benches/train_vs_pytorch.sh "$threads" 1 | tail -1)
    read -r ours torch torch16 ours16 < <(awk -F'|' '{gsub(/ /, ""); print $3, $4, $5, $6}' <<<"$row")
    record train "$threads:mixprec fp32" "$ours"
    record train "$threads:PyTorch fp32" "$torch"
    record train "$threads:PyTorch bf16 autocast" "$torch16"
    record train "$threads:mixprec fp16-dynamic" "$ours16"
  done

  for threads in 1 2; do
    say "round $round: (c, d) our steps in alternating pairs, $threads thread(s)"
    while IFS=$'\t' read -r name ratio a b; do
      record pairs "$threads:$name" "$ratio $a $b"
    done < <(RAYON_NUM_THREADS=$threads "$train_bench" --pairs $((quick ? 10 : 30)))
  done

  say "round $round: (d) capture cost: $steps-step runs"
  for every in 0 100 1; do
    rm -rf "$work/run"
    t=$(RAYON_NUM_THREADS=1 timed target/release/mixprec train --config "$work/anchor.json" \
      --labels "$work/anchor-y.npy" --capture-every "$every" --out "$work/run")
    record capture-run "$every" "$t"
  done
done
# (e) Profiles: where the time goes in each comparison, for the explanation of a gap: perf's
# samples of the process (all its threads), self time by symbol. Criterion's --profile-time runs
# the benchmark's routine without analysis for the given seconds (its setup is sampled too).
profiles=$work/profiles
rm -rf "$profiles"
mkdir -p "$profiles"
ptime=$((quick ? 2 : 6))
profile() { # ID THREADS DESCRIPTION COMMAND...
  local id=$1 threads=$2 what=$3
  shift 3
  command -v perf >/dev/null || return 0
  if RAYON_NUM_THREADS=$threads perf record -F 999 -o "$profiles/$id.data" -- "$@" \
    >/dev/null 2>"$profiles/$id.err"; then
    perf report -i "$profiles/$id.data" --stdio --no-children --sort symbol \
      --percent-limit 1.5 -q 2>/dev/null >"$profiles/$id.txt"
    printf '%s\n' "$what" >"$profiles/$id.what"
  fi
}
if command -v perf >/dev/null; then
  say "(e) profiles"
  [ -n "$only" ] || for case in fp16/nearest-even fp8-e4m3/nearest-even fp16/stochastic fp8-e4m3/stochastic; do
    profile "a-${case/\//-}" 1 "rounding, $case, one thread (\`benches/round.rs\`, round_16M_f32/1-thread/$case)" \
      "$round_bench" --bench --profile-time $ptime "^round_16M_f32/1-thread/$case\$"
  done
  profile b-analyze-1 1 "\`mixprec analyze\` of the $mib MiB file, one thread" \
    target/release/mixprec analyze "$data"
  profile b-analyze-2 2 "\`mixprec analyze\` of the $mib MiB file, $(nproc) threads" \
    target/release/mixprec analyze "$data"
  [ -n "$only" ] || for threads in 1 2; do
    profile "c-step-fp32-$threads" $threads "the anchor fp32 step, $threads thread(s) (\`benches/train.rs\`)" \
      "$train_bench" --bench --profile-time $ptime '^mlp-784-1024-1024-10/fp32$'
  done
  [ -n "$only" ] || profile d-step-fp16-capture 1 "the anchor fp16-dynamic step with a capture, one thread (\`benches/train.rs\`)" \
    "$train_bench" --bench --profile-time $ptime '^mlp-784-1024-1024-10/fp16-dynamic\+capture$'
fi

load_end=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$((SECONDS - started))

versions() {
  echo "- rustc: $(rustc --version); git commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  "$py" -c 'import sys, numpy, ml_dtypes, torch
print(f"- Python {sys.version.split()[0]}, numpy {numpy.__version__}, ml_dtypes {ml_dtypes.__version__}, torch {torch.__version__}")'
}
flags=$(grep -m1 '^flags' /proc/cpuinfo)
simd=$(for f in sse4_2 avx fma f16c avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 amx_tile; do
  if [[ " $flags " == *" $f "* ]]; then printf "%s " "$f"; fi; done)
if [ -n "$only" ]; then
  [ -f "$out" ] || { echo "compare.sh: --only analyze refreshes an existing $out; make it with a whole run first" >&2; exit 2; }
  refresh="Refreshed by \`benches/compare.sh --only analyze --rounds $rounds --analyze-mib $mib\` on"
  refresh+=" $(date -u '+%Y-%m-%d %H:%M UTC') at git commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
  refresh+=", load average (1, 5, 15 min) $load_start at the start, $load_end at the end"
  refresh+="${note:+; $note}; the other sections are from the run the header describes."
  python3 benches/compare_table.py "$results" "$mib" "$steps" "$profiles" --splice "$out" "$refresh" >"$out.part"
  mv "$out.part" "$out"
  say "refreshed section (b) of $out ($((elapsed / 60)) min $((elapsed % 60)) s)"
  exit 0
fi
{
  echo "# Speed comparisons on $model (family $family, model $cpu_model)"
  echo
  echo "Written by \`benches/compare.sh$([ $quick = 1 ] && echo ' --quick') --rounds $rounds --analyze-mib $mib --capture-steps $steps\`"
  echo "on $(date -u '+%Y-%m-%d %H:%M UTC'); the whole run took $((elapsed / 60)) min $((elapsed % 60)) s."
  echo
  echo "- CPU: $model, family $family, model $cpu_model; $(nproc) cores online ($(cpu_field 'Thread(s) per core') thread(s) per core); L1d $(cpu_field 'L1d cache'), L2 $(cpu_field 'L2 cache'), L3 $(cpu_field 'L3 cache')"
  echo "- SIMD: ${simd% }"
  echo "- memory: $(free -g | awk '/^Mem/ {print $2}') GiB; kernel $(uname -r)"
  echo "- load average (1, 5, 15 min): $load_start at the start, $load_end at the end"
  if awk -v l="${load_start%% *}" -v n="$(nproc)" 'BEGIN {exit !(l > n / 2)}'; then
    echo "- the machine was busy (load average above half its cores): times are inflated and noisy;"
    echo "  ratios formed within a round (both sides minutes apart) are the figures that count"
  fi
  if [ -n "$note" ]; then echo "- note: $note"; fi
  versions
  echo
  python3 benches/compare_table.py "$results" "$mib" "$steps" "$profiles"
} >"$out.part"
mv "$out.part" "$out"
say "wrote $out ($((elapsed / 60)) min $((elapsed % 60)) s)"
