"""The Python package's speed (reports/perf/python.md), side by side in one process:

1. ``mixprec.quantize`` against ml_dtypes' ``astype`` round trip (float32 -> format -> float32),
   one thread (RAYON_NUM_THREADS=1, set here before mixprec loads), 16M gradient-like values,
   best of 7;
2. the cost of ``mixprec.torch.Recorder`` at ``every=100`` on a small transformer trained on the
   CPU with a GradScaler, one torch thread: two identical trainings, one recorded, advanced
   step by step in turn, 9 rounds of 100 steps (one capture step each; the first round a
   warm-up); the median of the rounds' ratios, in wall-clock and CPU time. In float32 (the
   recorder's dispatch mode stays off), then under CPU autocast in float16 (5 rounds; the mode
   on from each forward pass to the optimizer's step), whose step is several times slower here
   (no half-precision matrix units);
3. the cost of ``mixprec.torch.Simulate(model, "fp8-hybrid")`` on the same transformer: the
   same AdamW loop in FP32 and simulated, rounds as in 2 (ratios: goal under 2x);
4. the cost of the recorder at ``every=100`` on each model of the zoo (``python/tests/zoo.py``:
   Hugging Face GPT-2 and BERT, torchvision ResNet-18 and ViT), under CPU autocast in float16
   (ResNet-18 in bfloat16: its float16 convolutions take 4.4 s a step on the CPU, 18x its
   bfloat16 step) with a GradScaler, one torch thread, 5 rounds of 30 steps (goal: within 1.1x);
5. the cost of ``Simulate`` on each zoo model under fp16-master, fp8-hybrid, mxfp8 and nvfp4
   against the same AdamW loop in FP32, one thread, 4 rounds of 8 steps (goal: within 2x).

    PYTHONPATH=python python benches/python.py         # after scripts/python-test built the module
    PYTHONPATH=python python benches/python.py zoo [gpt2 bert ...]  # tables 4 and 5
    PYTHONPATH=python python benches/python.py zoo-recorder | zoo-simulate [names]  # one of them
"""

import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")

import pathlib  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import mixprec  # noqa: E402
from mixprec.torch import Recorder, Simulate  # noqa: E402

# The transformer of examples/pytorch_recorder.py: the model the example records is the one
# measured here.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
from pytorch_recorder import TinyTransformer  # noqa: E402
# The benches' timer, benches/timing.py beside this script (its folder is on the path).
from timing import best  # noqa: E402

# The model zoo of the Python tests (python/tests/zoo.py).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "python" / "tests"))
from zoo import ZOO  # noqa: E402


def quantize_table():
    rng = np.random.default_rng(0)
    n = 1 << 24
    x = (rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(-30, 10, n)).astype(np.float32)
    rows = []
    for fmt, dtype in [
        ("fp16", np.float16),
        ("bf16", ml_dtypes.bfloat16),
        ("fp8-e4m3", ml_dtypes.float8_e4m3fn),
        ("fp8-e5m2", ml_dtypes.float8_e5m2),
    ]:
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(dtype).astype(np.float32)
            got = mixprec.quantize(x, fmt)
            # The same values (NaN where either has one; their payloads may differ).
            assert np.array_equal(want, got, equal_nan=True), fmt
            t_ml = best(lambda: x.astype(dtype).astype(np.float32))
        t_mp = best(lambda: mixprec.quantize(x, fmt))
        rows.append((fmt, t_ml * 1e3, t_mp * 1e3, t_ml / t_mp))
    return rows


def paired_rounds(rounds, block, steps, data=None):
    """Two trainings (``steps``: without and with the instrument, each a function of one batch)
    advanced step by step in turn (which goes first alternates), so that the machine's load falls
    on both alike; returns per round of ``block`` steps the seconds per step of each, in
    wall-clock time and in this process's CPU time (one torch thread, one rayon thread: the CPU
    time is the work done, less disturbed by other processes than the wall-clock time)."""
    if data is None:
        g = torch.Generator().manual_seed(1)
        data = [torch.randint(0, 64, (32, 16), generator=g) for _ in range(rounds * block)]
    times = {(side, clock): [0.0] * rounds for side in (0, 1) for clock in ("wall", "cpu")}
    for i, x in enumerate(data):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            w, c = time.perf_counter(), time.process_time()
            steps[side](x)
            times[side, "wall"][i // block] += (time.perf_counter() - w) / block
            times[side, "cpu"][i // block] += (time.process_time() - c) / block
    return times


def setup():
    torch.manual_seed(0)
    model = TinyTransformer()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def loss_of(model, x):
    return torch.nn.functional.cross_entropy(model(x), x[:, 0] % 2)


def recorder_rounds(rounds, block, autocast=None):
    """The recorder at ``every=100`` against the same GradScaler loop without it (in FP32, or
    with the forward and loss under CPU autocast in the dtype ``autocast``)."""

    def scaled(model, opt, scaler, rec=None):
        def step(x):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=autocast or torch.float32,
                                enabled=autocast is not None):
                loss = loss_of(model, x)
            scaler.scale(loss).backward()
            scaler.step(opt)
            if rec is not None:
                rec.step(loss)
            scaler.update()

        return step

    plain = scaled(*setup(), torch.amp.GradScaler("cpu", init_scale=2.0**16))
    model, opt = setup()
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    with tempfile.TemporaryDirectory() as tmp:
        with Recorder(model, out=f"{tmp}/run", every=100, optimizer=opt, scaler=scaler) as rec:
            return paired_rounds(rounds, block, (plain, scaled(model, opt, scaler, rec)))


def zoo_rounds(name, rounds, block):
    """The recorder at ``every=100`` on the zoo's model ``name`` against the same loop without
    it: AdamW, the forward and loss under CPU autocast in float16, a GradScaler; the same
    batches (``block`` of them, repeated each round) and the same weights on both sides."""
    zoo = ZOO[name]
    dtype = torch.bfloat16 if name == "resnet" else torch.float16

    def loop(rec=None):
        model = zoo.model(0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)

        def step(batch):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=dtype):
                loss = zoo.loss(model, batch)
            scaler.scale(loss).backward()
            scaler.step(opt)
            if rec is not None:
                rec[0].step(loss)
            scaler.update()

        return model, opt, scaler, step

    batches = zoo.batches(block) * rounds
    plain = loop()[3]
    holder = []
    model, opt, scaler, recorded = loop(holder)
    with tempfile.TemporaryDirectory() as tmp:
        with Recorder(model, out=f"{tmp}/run", every=100, optimizer=opt, scaler=scaler) as rec:
            holder.append(rec)
            return paired_rounds(rounds, block, (plain, recorded), batches)


def simulate_rounds(rounds, block, recipe="fp8-hybrid"):
    """The same loop (AdamW, no loss scaling) in FP32 and under ``Simulate(model, recipe)``."""

    def fp32(model, opt):
        def step(x):
            opt.zero_grad(set_to_none=True)
            loss_of(model, x).backward()
            opt.step()

        return step

    def simulated(model, opt, sim):
        def step(x):
            opt.zero_grad(set_to_none=True)
            sim.backward(loss_of(model, x))
            sim.step()

        return step

    model, opt = setup()
    with Simulate(model, recipe, optimizer=opt) as sim:
        return paired_rounds(rounds, block, (fp32(*setup()), simulated(model, opt, sim)))


def zoo_simulate_rounds(name, recipe, rounds, block):
    """``Simulate(model, recipe)`` on the zoo's model ``name`` against the same loop in FP32:
    AdamW, the same weights and batches (``block`` of them, repeated each round) on both sides."""
    zoo = ZOO[name]

    def loop():
        model = zoo.model(0)
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4)

    def fp32(model, opt):
        def step(batch):
            opt.zero_grad(set_to_none=True)
            zoo.loss(model, batch).backward()
            opt.step()

        return step

    def simulated(model, opt, sim):
        def step(batch):
            opt.zero_grad(set_to_none=True)
            sim.backward(zoo.loss(model, batch))
            sim.step()

        return step

    batches = zoo.batches(block) * rounds
    model, opt = loop()
    with Simulate(model, recipe, optimizer=opt) as sim:
        return paired_rounds(rounds, block, (fp32(*loop()), simulated(model, opt, sim)), batches)


def median_cost(times, rounds, clock):
    """The median, least and largest ratio of rounds 1 on (round 0: the first calls)."""
    c = sorted(times[1, clock][r] / times[0, clock][r] for r in range(1, rounds))
    return c[len(c) // 2], c[0], c[-1]


def print_rounds(title, times, rounds):
    print(title)
    print("| round | wall without, ms/step | wall with | cost | CPU without, ms/step | CPU with "
          "| cost |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in range(rounds):
        row = [f"{r}" + (" (warm-up)" if r == 0 else "")]
        for clock in ("wall", "cpu"):
            a, b = times[0, clock][r], times[1, clock][r]
            row += [f"{a * 1e3:.2f}", f"{b * 1e3:.2f}", f"{b / a:.2f}x"]
        print("| " + " | ".join(row) + " |")
    for clock in ("wall", "cpu"):
        mid, lo, hi = median_cost(times, rounds, clock)
        print(f"{clock}: median ratio {mid:.2f}x (rounds 1-{rounds - 1}: {lo:.2f}x to {hi:.2f}x)")


#: The recipes whose Simulate cost table 5 measures: an element format with loss scaling, the
#: FP8 recipe (a scale per tensor), and the two block formats.
ZOO_RECIPES = ("fp16-master", "fp8-hybrid", "mxfp8", "nvfp4")


def zoo_simulate_table(names, rounds=4, block=8):
    """Table 5: Simulate's cost on each zoo model under each recipe of ``ZOO_RECIPES``, one
    torch thread and one rayon thread, CPU time."""
    torch.set_num_threads(1)
    print(f"\nSimulate against the FP32 loop on the zoo, AdamW, torch threads 1, {rounds} rounds "
          f"of {block} steps each way, interleaved step by step; CPU time per step, the median "
          f"ratio of rounds 1-{rounds - 1} (goal: within 2x); load average "
          f"{os.getloadavg()[0]:.1f} before:")
    print("| model | recipe | FP32, ms/step | simulated, ms/step | cost | rounds' range |")
    print("|---|---|---:|---:|---:|---:|")
    for name in names:
        for recipe in ZOO_RECIPES:
            times = zoo_simulate_rounds(name, recipe, rounds, block)
            mid, lo, hi = median_cost(times, rounds, "cpu")
            a = sorted(times[0, "cpu"][1:])[(rounds - 1) // 2] * 1e3
            b = sorted(times[1, "cpu"][1:])[(rounds - 1) // 2] * 1e3
            print(f"| {name} | {recipe} | {a:.2f} | {b:.2f} | {mid:.2f}x | {lo:.2f}x-{hi:.2f}x |",
                  flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} after")


def zoo_table(names, rounds=5, block=30):
    """Table 4: the recorder's cost on each zoo model, one torch thread."""
    torch.set_num_threads(1)
    for name in names:
        load = os.getloadavg()[0]
        times = zoo_rounds(name, rounds, block)
        dtype = "bfloat16" if name == "resnet" else "float16"
        print_rounds(f"\nrecorder on the zoo's {name}, every=100, CPU autocast in {dtype}, "
                     f"GradScaler, torch threads 1, {rounds} rounds of {block} steps each way, "
                     f"interleaved step by step; load average {load:.1f} before, "
                     f"{os.getloadavg()[0]:.1f} after:", times, rounds)


def main():
    cpu = next(
        (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")),
        platform.processor(),
    )
    print(f"CPU: {cpu}; {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, torch {torch.__version__}")
    if sys.argv[1:2] in (["zoo"], ["zoo-recorder"], ["zoo-simulate"]):
        names = sys.argv[2:] or list(ZOO)
        if sys.argv[1] != "zoo-simulate":
            zoo_table(names)
        if sys.argv[1] != "zoo-recorder":
            zoo_simulate_table(names)
        return
    print("\n| format | ml_dtypes astype round trip, ms | mixprec.quantize, ms | speed-up |")
    print("|---|---:|---:|---:|")
    for fmt, ml, mp, ratio in quantize_table():
        print(f"| {fmt} | {ml:.1f} | {mp:.1f} | {ratio:.1f}x |")
    torch.set_num_threads(1)
    rounds, block = 9, 100
    load = os.getloadavg()[0]
    times = recorder_rounds(rounds, block)
    print_rounds(f"\nrecorder, every=100, torch threads 1, {rounds} rounds of {block} steps each "
                 f"way, interleaved step by step; load average {load:.1f} before, "
                 f"{os.getloadavg()[0]:.1f} after:", times, rounds)
    load = os.getloadavg()[0]
    times = recorder_rounds(5, block, autocast=torch.float16)
    print_rounds(f"\nrecorder, every=100, CPU autocast in float16, torch threads 1, 5 rounds of "
                 f"{block} steps each way, interleaved step by step; load average {load:.1f} "
                 f"before, {os.getloadavg()[0]:.1f} after:", times, 5)
    load = os.getloadavg()[0]
    times = simulate_rounds(rounds, block)
    print_rounds(f"\nSimulate(model, 'fp8-hybrid') against the FP32 loop, torch threads 1, "
                 f"{rounds} rounds of {block} steps each way, interleaved step by step; load "
                 f"average {load:.1f} before, {os.getloadavg()[0]:.1f} after:", times, rounds)
    zoo_table(list(ZOO))
    zoo_simulate_table(list(ZOO))


if __name__ == "__main__":
    main()
