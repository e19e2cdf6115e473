"""The timer of the Python benches (benches/python.py, benches/peers/quantize_peers.py)."""

import time


def best(f, repeats=7):
    """The shortest wall-clock time of ``repeats`` calls of ``f()``, in seconds."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)
