"""How far a run's largest backward gradient lies above one step's FP32 weight-gradient dump:
the margin analyze's advised init_scale keeps below the dump's top (``RUN_MARGIN_BITS`` in
src/analysis.rs).

For each zoo model (python/tests/zoo.py) and seed: the book's dump (initial weights, the
first batch, FP32, no autocast) given to ``mixprec.analyze``, then a recorded fp16 run of the
same model (CPU autocast, GradScaler at a fixed 2^SCALE that never grows, AdamW) whose
``grad_amax`` per step is every narrow gradient of the backward, unscaled; printed: how many
binades the run's largest lies above the dump's, over all steps and the first 100.

    PYTHONPATH=python:python/tests python benches/dump_margin.py gpt2,bert,vit 300 0,1,2 1e-3 -4

Measured 2026-12-06 (Intel Xeon, one torch thread): 0 to 2.51 binades over 300 steps, for
learning rates 3e-4, 1e-3 and 3e-3 and scales 2^-4 and 2^10 (docs/src/analyze.md).
"""

import json
import math
import sys
import tempfile
import warnings

import numpy as np
import torch

import mixprec
from mixprec.torch import Recorder
from zoo import ZOO

torch.set_num_threads(1)
warnings.simplefilter("ignore")
names, steps, seeds = sys.argv[1].split(","), int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
lr, log2_scale = float(sys.argv[4]), int(sys.argv[5])
for name in names:
    zoo = ZOO[name]
    for seed in seeds:
        model = zoo.model(seed)
        batches = zoo.batches(steps, seed=seed + 1)
        model.zero_grad()
        zoo.loss(model, batches[0]).backward()
        grads = {n: p.grad.detach().float().contiguous()
                 for n, p in model.named_parameters() if p.grad is not None}
        dump = max(float(g.abs().max()) for g in grads.values())
        top = mixprec.analyze({n: g.numpy() for n, g in grads.items()},
                              format="fp16")["recommendation"]["log2_scale"]
        model.zero_grad(set_to_none=True)
        opt = torch.optim.AdamW(model.parameters(), lr=lr)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**log2_scale, growth_interval=10**9)
        with tempfile.TemporaryDirectory() as d:
            with Recorder(model, d + "/run", "fp16", every=0, optimizer=opt, scaler=scaler) as rec:
                for b in batches:
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast("cpu", dtype=torch.float16):
                        loss = zoo.loss(model, b)
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    rec.step(loss)
                    scaler.update()
            with open(d + "/run/metrics.jsonl") as f:
                amax = np.array([json.loads(line)["grad_amax"] or 0.0 for line in f])
        print(f"{name} seed {seed}: dump amax {dump:.4g} (analyze's top 2^{top}); run step 1 "
              f"{math.log2(amax[0] / dump):+.2f} b, largest of {steps} steps "
              f"{math.log2(amax.max() / dump):+.2f} b (step {int(amax.argmax()) + 1}), of the "
              f"first 100 {math.log2(amax[:100].max() / dump):+.2f} b", flush=True)
