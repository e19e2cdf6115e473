"""The Hugging Face ``Trainer``'s callback: records its training as a mixprec run directory.
::

    from mixprec.torch import HFCallback
    trainer = Trainer(model=model, args=TrainingArguments(..., bf16=True),
                      train_dataset=data, callbacks=[HFCallback("runs/gpt2", every=100)])
    trainer.train()          # then: mixprec report runs/gpt2 --out page

The run's format is the one the Trainer's arguments ask for (``bf16``, ``fp16``, else FP32),
checked against what the loop stores: accelerate autocasts on the CPU in bfloat16 only, so
``fp16=True`` on the CPU trains in FP32, and the recorder says so. The GradScaler is accelerate's
(fp16 on a GPU); the optimizer the one inside accelerate's wrapper. The loss is the model's own
(``outputs.loss``, what the Trainer's ``compute_loss`` returns by default), the mean of the
step's micro-batches: a ``compute_loss`` that forms the loss outside the model gives steps
without one, which the callback warns of.
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional

import torch
from transformers import TrainerCallback

from ._recorder import _Callback
from ._simulate import _is_grad_scaler

__all__ = ["HFCallback"]


class HFCallback(_Callback, TrainerCallback):
    """Records a ``transformers.Trainer``'s training into the run directory ``out``.

    Args:
        out: the run directory, new or empty (created when training begins).
        every: capture every ``every`` optimizer steps (and the first); 0: never.
        format: the format the run is judged against; default the Trainer's precision
            (``bf16``, ``fp16`` or ``fp32``).
        name: the run's name in reports (default ``hf-{format}``).
        flush_every: as :class:`Recorder`'s.
    """

    def __init__(self, out, every: int = 100, format: Optional[str] = None,
                 name: Optional[str] = None, flush_every: float = 2.0) -> None:
        super().__init__(out, every, format, name, flush_every)
        self._losses: List[torch.Tensor] = []
        self._hook: Any = None
        self._warned = False

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        format = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
        scaler = getattr(optimizer, "scaler", None)
        self._start(model, format, "hf", optimizer, scaler if _is_grad_scaler(scaler) else None)
        self._hook = model.register_forward_hook(self._loss)

    def _loss(self, module, args, output) -> None:
        """Keeps the loss of each training forward pass (gradients on, training mode)."""
        if not (torch.is_grad_enabled() and module.training):
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if isinstance(loss, torch.Tensor):
            self._losses.append(loss.detach().float())

    def on_step_end(self, args, state, control, **kwargs):
        losses, self._losses = self._losses, []
        if losses:
            loss = float(torch.stack(losses).mean())
        else:
            loss = float("nan")
            if not self._warned:
                self._warned = True
                warnings.warn(
                    "HFCallback: the model's outputs carry no loss (the Trainer's compute_loss "
                    "forms it outside the model?): steps are recorded without one",
                    stacklevel=2,
                )
        self.recorder.step(loss)

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
        self._finish()
