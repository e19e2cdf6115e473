"""GPT-2 (python/tests/zoo.py: 2 layers, d=128, vocabulary 256) learning to copy: 16 random
tokens, then the same 16 again; the loss is that of the second half, which an induction head
predicts exactly (the first half is noise, left out). NVFP4 on every product against FP32, and
the plan: ``python3 analyses/plan/gpt2/regenerate.py`` rewrites reports/plan/gpt2/."""

import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from study import Task, study  # noqa: E402

VOCAB, HALF, BATCH = 256, 16, 16


def batch(g: torch.Generator) -> torch.Tensor:
    x = torch.randint(0, VOCAB, (BATCH, HALF), generator=g)
    return torch.cat([x, x], 1)


def loss(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=x).logits[:, HALF - 1 : -1]
    return F.cross_entropy(logits.reshape(-1, VOCAB), x[:, HALF:].reshape(-1))


if __name__ == "__main__":
    study(Task("gpt2", batch, loss, lr=1e-3, steps=200), "nvfp4", {"flops_share": 0.5}, pretrain=100)
