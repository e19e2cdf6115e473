#!/usr/bin/env bash
# Measures the peer libraries on this machine, in a local virtual environment that this script
# creates (benches/peers/.venv, not committed). Usage: benches/peers/run.sh [quantize]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/.venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check numpy ml_dtypes threadpoolctl
fi
what=${1:-quantize}
# One thread, as in the Rust single-thread figures; unset the OpenBLAS overrides that slow numpy.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_NUM_THREADS=1 \
  "$venv/bin/python" "$here/${what}_peers.py"
