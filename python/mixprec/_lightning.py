"""Lightning's callback: records a ``lightning.pytorch.Trainer``'s fit as a mixprec run
directory.
::

    from mixprec.torch import LightningCallback
    trainer = L.Trainer(precision="bf16-mixed", callbacks=[LightningCallback("runs/x")])
    trainer.fit(module, data)          # then: mixprec report runs/x --out page

The run's format is the precision Lightning runs in (``trainer.precision`` after its own
choices: ``16-mixed`` on the CPU becomes ``bf16-mixed``, and is recorded as bf16), its
GradScaler the precision plugin's (``16-mixed``; on the CPU, pass
``plugins=[MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu"))]``), which Lightning
steps and updates back to back. The loss is what ``training_step`` returned, summed over the
batches of an optimizer step (Lightning divides each by ``accumulate_grad_batches``). The
backward passes recorded are the ones Lightning runs for the module's losses, whether
``training_step`` calls the module itself or a submodule.
"""

from __future__ import annotations

from typing import Optional

import torch
from lightning.pytorch import Callback

from ._recorder import _Callback

__all__ = ["LightningCallback"]

#: The element format of each of Lightning's precisions; the others train in FP32.
_FORMATS = {"16-mixed": "fp16", "16-true": "fp16", "bf16-mixed": "bf16", "bf16-true": "bf16"}


class LightningCallback(_Callback, Callback):
    """Records a Lightning ``Trainer``'s training into the run directory ``out``.

    Args:
        out: the run directory, new or empty (created when training starts).
        every: capture every ``every`` optimizer steps (and the first); 0: never.
        format: the format the run is judged against; default Lightning's precision
            (``fp16``, ``bf16`` or ``fp32``).
        name: the run's name in reports (default ``lightning-{format}``).
        flush_every: as :class:`Recorder`'s.
    """

    def __init__(self, out, every: int = 100, format: Optional[str] = None,
                 name: Optional[str] = None, flush_every: float = 2.0) -> None:
        super().__init__(out, every, format, name, flush_every)
        self._loss = 0.0
        self._global_step = 0

    def on_train_start(self, trainer, pl_module):
        self._start(pl_module, _FORMATS.get(str(trainer.precision), "fp32"), "lightning",
                    trainer.optimizers[0], getattr(trainer.precision_plugin, "scaler", None))
        self._global_step = trainer.global_step

    def on_before_backward(self, trainer, pl_module, loss):
        rec = self.recorder
        if rec is not None and loss.grad_fn is not None:
            rec._reaches([loss.grad_fn], narrow=rec._loop_narrow is not False)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self._loss += float(loss.detach())
        if trainer.global_step != self._global_step:  # the optimizer stepped
            self._global_step = trainer.global_step
            loss, self._loss = self._loss, 0.0
            self.recorder.step(loss)

    def on_train_end(self, trainer, pl_module):
        self._finish()

    def on_exception(self, trainer, pl_module, exception):
        self._finish(exception)
