"""BERT (python/tests/zoo.py: 2 layers, d=128, vocabulary 256, 3 labels) classifying a sequence
of 16 random tokens by its second token modulo 3: the [CLS] position's pooled output must
attend to position 1 and read which third of the vocabulary its token is in. NVFP4 on every
product against FP32, and the plan: ``python3 analyses/plan/bert/regenerate.py`` rewrites
reports/plan/bert/."""

import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from study import Task, study  # noqa: E402

VOCAB, LENGTH, BATCH = 256, 16, 16


def batch(g: torch.Generator):
    x = torch.randint(0, VOCAB, (BATCH, LENGTH), generator=g)
    return x, x[:, 1] % 3


def loss(model: torch.nn.Module, b) -> torch.Tensor:
    x, labels = b
    return model(input_ids=x, labels=labels).loss


if __name__ == "__main__":
    study(Task("bert", batch, loss, lr=1e-3, steps=300), "nvfp4", {"flops_share": 0.5}, pretrain=150)
