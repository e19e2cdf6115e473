"""The model zoo: architectures nobody here wrote, from the packages people train with, small.

Each entry builds its model from a config with random weights (seeded), makes synthetic batches
(seeded), and gives the loss of a batch, so that a test can run the same loop under the
Recorder, under Simulate, or bare, and compare:

- ``gpt2``: Hugging Face ``GPT2LMHeadModel`` (2 layers, d=128): a decoder LM whose attention and
  MLP are transformers' ``Conv1D`` (``x @ W + b`` by ``torch.addmm``), gelu_new written in
  Python operations, and the head tied to the token embedding;
- ``bert``: Hugging Face ``BertForSequenceClassification`` (2 layers, d=128): an encoder, its
  attention's key bias with an exact zero gradient (softmax is shift-invariant);
- ``resnet``: torchvision ``resnet18`` on 32x32 images: ``nn.Conv2d``, batch norm (buffers),
  in-place ReLUs and residual adds (``out += identity``);
- ``vit``: torchvision ``VisionTransformer`` (2 layers, d=64, 8x8 patches of 32x32 images):
  ``nn.MultiheadAttention``, whose input projection is ``F.linear`` on a bare parameter.

Dropout is off, so a batch's loss is a function of the weights alone. Each model trains a step
on the CPU in well under a second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, List, Tuple

import pytest
import torch

Batch = Tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Zoo:
    """One model of the zoo."""

    name: str
    build: Callable[[], torch.nn.Module]
    make_batch: Callable[[torch.Generator], Batch]
    loss: Callable[[torch.nn.Module, Batch], torch.Tensor]

    def model(self, seed: int = 0) -> torch.nn.Module:
        """The model, its weights drawn from ``seed``, in training mode."""
        torch.manual_seed(seed)
        return self.build().train()

    def batches(self, n: int, seed: int = 1) -> List[Batch]:
        """``n`` batches drawn from ``seed``."""
        g = torch.Generator().manual_seed(seed)
        return [self.make_batch(g) for _ in range(n)]

    def to(self, batch: Batch, device: "str | torch.device") -> Batch:
        return tuple(t.to(device) for t in batch)  # type: ignore[return-value]


_VOCAB, _SEQ, _BATCH = 256, 32, 4


def _gpt2() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=_VOCAB, n_positions=64, n_embd=128, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def _bert() -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=_VOCAB, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=64, num_labels=3,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
    )
    return BertForSequenceClassification(config)


def _resnet() -> torch.nn.Module:
    from torchvision.models import resnet18

    return resnet18(num_classes=10)


def _vit() -> torch.nn.Module:
    from torchvision.models import VisionTransformer

    return VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128,
        num_classes=10,
    )


def _tokens(g: torch.Generator) -> Batch:
    x = torch.randint(0, _VOCAB, (_BATCH, _SEQ), generator=g)
    return x, x


def _sentences(g: torch.Generator) -> Batch:
    x = torch.randint(0, _VOCAB, (_BATCH, _SEQ), generator=g)
    return x, torch.randint(0, 3, (_BATCH,), generator=g)


def _images(g: torch.Generator) -> Batch:
    x = torch.randn(_BATCH, 3, 32, 32, generator=g)
    return x, torch.randint(0, 10, (_BATCH,), generator=g)


def _hf_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """The loss a Hugging Face model computes of its labels (shifted for an LM)."""
    x, labels = batch
    return model(input_ids=x, labels=labels).loss


def _image_loss(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    x, labels = batch
    return torch.nn.functional.cross_entropy(model(x), labels)


ZOO = {
    z.name: z
    for z in (
        Zoo("gpt2", _gpt2, _tokens, _hf_loss),
        Zoo("bert", _bert, _sentences, _hf_loss),
        Zoo("resnet", _resnet, _images, _image_loss),
        Zoo("vit", _vit, _images, _image_loss),
    )
}
NAMES = list(ZOO)


def devices() -> Iterator[str]:
    """The devices the zoo runs on here: the CPU, and CUDA where there is one."""
    yield "cpu"
    if torch.cuda.is_available():
        yield "cuda"


#: The devices as a test parameter: CUDA skipped, saying so, where there is none
#: (``scripts/gpu-check`` runs the CUDA cases on a machine with a GPU).
DEVICES = [
    "cpu",
    pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
    ),
]
