#!/usr/bin/env bash
# Measures the peer libraries on this machine, in the project's Python virtual environment
# (scripts/python-env: numpy, ml_dtypes and torch, created on first use and cached per machine).
#
#   benches/peers/run.sh quantize [ARGS]      numpy, ml_dtypes and torch rounding (quantize_peers.py)
#   benches/peers/run.sh train [--threads N]  PyTorch's training step (train_step.py; PyPI's Linux
#                                             wheel, with the CUDA libraries: the CPU path runs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/../../scripts/python-env")
what=${1:-quantize}
shift || true
case "$what" in
  quantize) script="$here/quantize_peers.py"; threads=1 ;;
  train) script="$here/train_step.py"; threads="" ;;
  *) echo "run.sh: unknown peer benchmark '$what' (quantize or train)" >&2; exit 2 ;;
esac
# Unset the OpenBLAS overrides that slow numpy; one thread for the rounding peers, as in the
# Rust single-thread figures (train_step.py sets torch's threads from --threads).
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${threads:+OMP_NUM_THREADS=$threads} \
  "$venv/bin/python" "$script" "$@"
