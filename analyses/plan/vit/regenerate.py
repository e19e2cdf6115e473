"""ViT (python/tests/zoo.py: torchvision VisionTransformer, 2 layers, d=64, 8x8 patches of 32x32
images, 10 classes) telling apart 10 images that differ little: each class's image is one shared
random image plus 0.1 times its own random pattern, seen through noise of 0.3. NVFP4 on every
product against FP32, and the plan: ``python3 analyses/plan/vit/regenerate.py`` rewrites
reports/plan/vit/."""

import pathlib
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from study import Task, study  # noqa: E402

_g = torch.Generator().manual_seed(7)
IMAGES = torch.randn(1, 3, 32, 32, generator=_g) + 0.1 * torch.randn(10, 3, 32, 32, generator=_g)
BATCH, NOISE = 32, 0.3


def batch(g: torch.Generator):
    labels = torch.randint(0, 10, (BATCH,), generator=g)
    return IMAGES[labels] + NOISE * torch.randn(BATCH, 3, 32, 32, generator=g), labels


def loss(model: torch.nn.Module, b) -> torch.Tensor:
    x, labels = b
    return F.cross_entropy(model(x), labels)


if __name__ == "__main__":
    study(
        Task("vit", batch, loss, lr=1e-3, steps=200), "nvfp4", {"flops_share": 0.5}, pretrain=100,
        seeds=10,
    )
