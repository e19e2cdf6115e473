"""Round-trip 16M f32 values through fp16, bf16 and fp8 with numpy and ml_dtypes, one thread.

Prints one line per case: name, best-of-N seconds, values per second, and the ratio to a plain
copy of the same buffer measured in the same run. Two data sets, as in benches/round.rs:
gradient-like (log-uniform magnitudes over 2^-30..2^10, both signs; many fp16 subnormals and
underflows, which slow some converters down) and standard normal.
"""
import platform
import time

import ml_dtypes
import numpy as np

N = 1 << 24
REPEATS = 7

rng = np.random.default_rng(0)
e = rng.uniform(-30.0, 10.0, N)
gradient_like = (np.exp2(e) * np.where(rng.integers(0, 2, N) == 0, 1.0, -1.0)).astype(np.float32)
normal = rng.standard_normal(N).astype(np.float32)
out = np.empty_like(normal)


def best(fn):
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def cases(x):
    return [
        ("plain copy (np.copyto)", lambda: np.copyto(out, x)),
        ("numpy fp16 round trip", lambda: x.astype(np.float16).astype(np.float32)),
        ("ml_dtypes bf16 round trip", lambda: x.astype(ml_dtypes.bfloat16).astype(np.float32)),
        ("ml_dtypes fp8-e4m3 round trip", lambda: x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)),
        ("ml_dtypes fp8-e5m2 round trip", lambda: x.astype(ml_dtypes.float8_e5m2).astype(np.float32)),
    ]


print(f"# {platform.machine()}, numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, 16M f32, one thread, best of {REPEATS}")
for label, x in [("gradient-like", gradient_like), ("normal", normal)]:
    copy = None
    for name, fn in cases(x):
        t = best(fn)
        copy = copy or t
        print(f"{label:14s} {name:32s} {t * 1e3:8.1f} ms  {N / t / 1e9:6.3f} G values/s  {t / copy:6.2f}x copy")
