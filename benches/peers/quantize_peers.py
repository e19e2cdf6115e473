"""Round-trip 16M f32 values through fp16, bf16 and fp8 with numpy, ml_dtypes and torch, one
thread.

    benches/peers/run.sh quantize [--data gradient-like|normal|both] [--repeats N]

Prints one line per case: data set, name, best-of-N time, values per second, and the ratio to a
plain copy of the same buffer measured in the same run. Two data sets, as in benches/round.rs:
gradient-like (log-uniform magnitudes over 2^-30..2^10, both signs; many fp16 subnormals and
underflows, which slow some converters down) and standard normal. torch's round trip is
`.to(dtype).to(torch.float32)` on a tensor sharing the numpy buffer, with one torch thread.
"""
import argparse
import pathlib
import platform
import sys

import ml_dtypes
import numpy as np
import torch

# The benches' timer, benches/timing.py.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from timing import best  # noqa: E402

N = 1 << 24


def cases(x, out):
    t = torch.from_numpy(x)

    def torch_trip(dtype):
        return lambda: t.to(dtype).to(torch.float32)

    return [
        ("plain copy (np.copyto)", lambda: np.copyto(out, x)),
        ("numpy fp16 round trip", lambda: x.astype(np.float16).astype(np.float32)),
        ("ml_dtypes bf16 round trip", lambda: x.astype(ml_dtypes.bfloat16).astype(np.float32)),
        ("ml_dtypes fp8-e4m3 round trip", lambda: x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)),
        ("ml_dtypes fp8-e5m2 round trip", lambda: x.astype(ml_dtypes.float8_e5m2).astype(np.float32)),
        ("torch fp16 round trip", torch_trip(torch.float16)),
        ("torch bf16 round trip", torch_trip(torch.bfloat16)),
        ("torch fp8-e4m3 round trip", torch_trip(torch.float8_e4m3fn)),
        ("torch fp8-e5m2 round trip", torch_trip(torch.float8_e5m2)),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", choices=["gradient-like", "normal", "both"], default="both")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    e = rng.uniform(-30.0, 10.0, N)
    sets = {
        "gradient-like": (np.exp2(e) * np.where(rng.integers(0, 2, N) == 0, 1.0, -1.0)).astype(np.float32),
        "normal": rng.standard_normal(N).astype(np.float32),
    }
    out = np.empty(N, np.float32)
    print(
        f"# {platform.machine()}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
        f"torch {torch.__version__}, 16M f32, one thread, best of {args.repeats}"
    )
    for label, x in sets.items():
        if args.data not in (label, "both"):
            continue
        copy = None
        for name, fn in cases(x, out):
            t = best(fn, args.repeats)
            copy = copy or t
            print(f"{label:14s} {name:32s} {t * 1e3:8.1f} ms  {N / t / 1e9:6.3f} G values/s  {t / copy:6.2f}x copy")


if __name__ == "__main__":
    main()
