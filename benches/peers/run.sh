#!/usr/bin/env bash
# Measures the peer libraries on this machine, in a local virtual environment that this script
# creates (benches/peers/.venv, not committed).
#
#   benches/peers/run.sh quantize             numpy and ml_dtypes rounding (quantize_peers.py)
#   benches/peers/run.sh train [--threads N]  PyTorch's training step (train_step.py); installs
#                                             torch on first use (PyPI's Linux wheel, which pulls
#                                             the CUDA libraries: about 4 GB; the CPU path is
#                                             what runs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
pip() { "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"; }
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  pip numpy ml_dtypes threadpoolctl
fi
what=${1:-quantize}
shift || true
case "$what" in
  quantize) script="$here/quantize_peers.py"; threads=1 ;;
  train)
    "$venv/bin/python" -c "import torch" 2>/dev/null || pip torch
    script="$here/train_step.py"; threads="" ;;
  *) echo "run.sh: unknown peer benchmark '$what' (quantize or train)" >&2; exit 2 ;;
esac
# Unset the OpenBLAS overrides that slow numpy; one thread for the rounding peers, as in the
# Rust single-thread figures (train_step.py sets torch's threads from --threads).
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ${threads:+OMP_NUM_THREADS=$threads} \
  "$venv/bin/python" "$script" "$@"
