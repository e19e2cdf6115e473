"""The cross-check of ``mixprec.torch.Simulate`` against ``mixprec train``: the built-in MLP
(analyses/underflow: digits, 64-256-256-10 ReLU, Adam 1e-3, the loss times 2^-16 as a large
effective batch's average makes it) trained by both, from the same initial weights and the same
batches, under fp32, fp16-master (no loss scaling), fp16-static (2^16) and fp16-dynamic, over 5
seeds.

    python examples/simulate_crosscheck.py OUT_DIR [--seeds 5] [--steps 800]

Writes OUT_DIR/train/<recipe>-s<seed> and OUT_DIR/pytorch/<recipe>-s<seed> (run directories: the
PyTorch ones recorded by ``mixprec.torch.Recorder`` with ``simulate=``), OUT_DIR/crosscheck.json
(per recipe and engine: final accuracy per seed; per step: the weight-gradient underflow counts of
both engines) and prints a markdown table. ``MIXPREC_BIN`` names the mixprec binary (default
target/release/mixprec); the package must be importable (scripts/python-test's environment).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

from mixprec import _mixprec
from mixprec.torch import Recorder, Simulate

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECIPES = ("fp32", "fp16-master", "fp16-static", "fp16-dynamic")


def config(recipe: str, seed: int, steps: int) -> dict:
    c = json.loads((ROOT / "analyses" / "underflow" / f"{recipe}.json").read_text())
    c.update(seed=seed, steps=steps)
    return c


def train_rust(cfg: dict, out: pathlib.Path) -> None:
    binary = os.environ.get("MIXPREC_BIN", str(ROOT / "target" / "release" / "mixprec"))
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.with_suffix(".json")
    path.write_text(json.dumps(cfg))
    subprocess.run([binary, "train", "--config", str(path), "--out", str(out)], check=True,
                   stdout=subprocess.DEVNULL)
    path.unlink()


def mlp(params) -> torch.nn.Sequential:
    """The training core's MLP as torch modules named as its layers (``0.linear``, ``1.relu``, ...),
    holding its initial weights."""
    layers = []
    weights = {(layer, name): w for layer, name, w in params}
    names = sorted({layer for layer, _, _ in params}, key=lambda n: int(n.split(".")[0]))
    for i, name in enumerate(names):
        w = torch.from_numpy(weights[(name, "weight")].copy())
        lin = torch.nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(torch.from_numpy(weights[(name, "bias")].reshape(-1).copy()))
        layers.append(torch.nn.Sequential(collections.OrderedDict(linear=lin)))
        if i + 1 < len(names):
            layers.append(torch.nn.Sequential(collections.OrderedDict(relu=torch.nn.ReLU())))
    return torch.nn.Sequential(*layers)


def train_torch(cfg: dict, out: pathlib.Path) -> float:
    """Trains the training core's classifier of ``cfg`` in PyTorch under ``Simulate`` and the
    Recorder (into ``out``), from the core's start; returns the test accuracy."""
    tx, ty, vx, vy, params, batches = _mixprec.train_start(json.dumps(cfg))
    model = mlp(params)
    o = cfg["optimizer"]
    opt = torch.optim.Adam(model.parameters(), lr=o["lr"], betas=(o.get("beta1", 0.9),
                           o.get("beta2", 0.999)), eps=o.get("eps", 1e-8))
    tx, ty = torch.from_numpy(tx), torch.from_numpy(ty)
    sim = Simulate(model, cfg["recipe"], optimizer=opt, seed=cfg["seed"])
    multiplier = cfg.get("loss_multiplier", 1.0)
    with sim, Recorder(model, out, every=cfg["capture_every"], optimizer=opt, simulate=sim,
                       name=f"pytorch {sim.recipe['name']}") as rec:
        for idx in batches:
            idx = torch.from_numpy(idx)
            opt.zero_grad(set_to_none=False)
            loss = torch.nn.functional.cross_entropy(model(tx[idx]), ty[idx])
            sim.backward(loss * multiplier)
            sim.step()
            rec.step(loss)
        model.eval()
        with torch.no_grad():
            accuracy = float((model(torch.from_numpy(vx)).argmax(1).numpy() == vy).mean())
        rec.close(metric=("test_accuracy", accuracy))
    return accuracy


def steps(run: pathlib.Path) -> list:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def accuracy(run: pathlib.Path) -> float:
    return json.loads((run / "summary.json").read_text())["eval_metric"]["value"]


def welch_p(a, b) -> float:
    """Welch's two-sided p-value, by the library's test (as grid reports compare seeds)."""
    return json.loads(_mixprec.welch_json(a, b))["p_value"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=800)
    args = ap.parse_args()
    if args.seeds < 2 or args.steps < 1:
        ap.error("--seeds must be at least 2 (the table compares seeds) and --steps at least 1")
    torch.set_num_threads(int(os.environ.get("MIXPREC_TORCH_THREADS", "1")))
    result = {"steps": args.steps, "seeds": args.seeds, "torch": torch.__version__, "recipes": {}}
    for recipe in RECIPES:
        acc = {"train": [], "pytorch": []}
        per_step = []
        for seed in range(args.seeds):
            cfg = config(recipe, seed, args.steps)
            runs = {e: args.out / e / f"{recipe}-s{seed}" for e in acc}
            start = time.monotonic()
            train_rust(cfg, runs["train"])
            mid = time.monotonic()
            train_torch(cfg, runs["pytorch"])
            print(f"{recipe} seed {seed}: train {mid - start:.1f} s, pytorch "
                  f"{time.monotonic() - mid:.1f} s", file=sys.stderr)
            for e in acc:
                acc[e].append(accuracy(runs[e]))
            a, b = steps(runs["train"]), steps(runs["pytorch"])
            per_step.append([
                [r["counts"].get("weight_grad", {}).get("underflow", 0) for r in a],
                [r["counts"].get("weight_grad", {}).get("underflow", 0) for r in b],
            ])
        stored = steps(args.out / "train" / f"{recipe}-s0")[0]["counts"].get("weight_grad", {}).get("stored", 0)
        result["recipes"][recipe] = {"accuracy": acc, "weight_grad_stored": stored,
                                     "weight_grad_underflow": per_step}
    (args.out / "crosscheck.json").write_text(json.dumps(result))
    print("| recipe | mixprec train accuracy | PyTorch + Simulate accuracy | Welch p | "
          "weight-gradient values underflowing per step, train / PyTorch (mean over steps and "
          "seeds) | mean abs. difference per step | steps with equal counts |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for recipe, r in result["recipes"].items():
        a, b = r["accuracy"]["train"], r["accuracy"]["pytorch"]
        pairs = [(x, y) for s in r["weight_grad_underflow"] for x, y in zip(*s)]
        mean_a = statistics.mean(x for x, _ in pairs)
        mean_b = statistics.mean(y for _, y in pairs)
        diff = statistics.mean(abs(x - y) for x, y in pairs)
        equal = sum(x == y for x, y in pairs) / len(pairs)
        print(f"| {recipe} | {statistics.mean(a):.4f} ± {statistics.stdev(a):.4f} | "
              f"{statistics.mean(b):.4f} ± {statistics.stdev(b):.4f} | {welch_p(a, b):.2f} | "
              f"{mean_a:.1f} / {mean_b:.1f} (of {r['weight_grad_stored']}) | {diff:.2f} | "
              f"{100 * equal:.0f}% |")


if __name__ == "__main__":
    main()
