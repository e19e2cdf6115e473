"""The plan study of one zoo model (python/tests/zoo.py) on a synthetic, learnable task:
sensitivity, greedy plan and validation by re-training, written as a plan directory in
target/plan-<model>/ and rendered by ``mixprec report`` into reports/plan/<model>/ (the
binary: $MIXPREC_BIN, else target/release/mixprec).

Each model's script (analyses/plan/<model>/regenerate.py) gives its task and settings and calls
:func:`study`. Everything is seeded and runs on one CPU thread, so a rerun writes the same
numbers (the run directories' wall-clock times aside).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "python" / "tests"))

import torch  # noqa: E402

import mixprec.torch as mt  # noqa: E402
from zoo import ZOO  # noqa: E402


@dataclass
class Task:
    """A zoo model on a task: ``batch(generator)`` draws a training batch, ``loss(model,
    batch)`` its loss."""

    model: str
    batch: Callable[[torch.Generator], Any]
    loss: Callable[[torch.nn.Module, Any], torch.Tensor]
    lr: float
    steps: int


def study(task: Task, recipe: Any, budget: Dict[str, float], *, pretrain: int, seeds: int = 5,
          sensitivity_batches: int = 4) -> None:
    """Measures the sensitivity of ``task.model`` after ``pretrain`` FP32 steps (seed 0, on
    ``sensitivity_batches`` held-out batches), plans within ``budget`` (``plan``'s keyword)
    and validates the plan over ``seeds`` seeds of ``task.steps`` AdamW steps each."""
    torch.set_num_threads(1)
    zoo = ZOO[task.model]
    out = ROOT / "target" / f"plan-{task.model}"
    shutil.rmtree(out, ignore_errors=True)
    start = time.monotonic()

    model = zoo.model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=task.lr)
    g = torch.Generator().manual_seed(1000)
    for _ in range(pretrain):
        opt.zero_grad()
        task.loss(model, task.batch(g)).backward()
        opt.step()
    held_out = torch.Generator().manual_seed(2000)
    batches = [task.batch(held_out) for _ in range(sensitivity_batches)]
    sens = mt.sensitivity(model, batches, task.loss, recipe, name=task.model)
    sens.save(out)
    print(sens, "\n")
    p = mt.plan(sens, **budget)
    p.save(out)
    print(p, "\n")

    def batches_of(seed: int):
        g = torch.Generator().manual_seed(100 + seed)
        return (task.batch(g) for _ in range(task.steps))

    v = mt.validate(
        out, zoo.model, lambda m: torch.optim.AdamW(m.parameters(), lr=task.lr), batches_of,
        task.loss, seeds=seeds, last_steps=task.steps // 5,
    )
    print(v)
    page = ROOT / "reports" / "plan" / task.model
    shutil.rmtree(page, ignore_errors=True)
    binary = os.environ.get("MIXPREC_BIN", str(ROOT / "target" / "release" / "mixprec"))
    subprocess.run(  # paths from the repository's root, as the pages name them
        [binary, "report", str(out.relative_to(ROOT)), "--out", str(page.relative_to(ROOT))],
        cwd=ROOT, check=True,
    )
    print(f"\n({time.monotonic() - start:.0f} s)")
