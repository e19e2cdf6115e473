"""The device checks of the torch API, run before any data is touched.

A tensor on the ``meta`` device has a shape and a dtype but no values: rounding one, or
recording or simulating a model whose parameters are there, would reach torch's own error
(``Cannot copy out of meta tensor``) in the middle of the work, or return a meta tensor without
a word. These name the tensor and what to do instead, as a ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import torch

#: Where a tensor holds no values.
_NO_DATA = ("meta",)


def check_tensor(t: torch.Tensor, name: str) -> None:
    """A ``ValueError`` naming ``name`` when ``t`` is on a device that holds no values."""
    if t.device.type in _NO_DATA:
        raise ValueError(
            f"{name}: the tensor is on the {t.device.type} device, which holds no values to "
            "round: materialize it first (on the CPU or an accelerator)"
        )


def check_module(model: Any, who: str) -> None:
    """A ``ValueError`` naming the first parameter or buffer of ``model`` on a device that holds
    no values, and ``who`` (``Recorder``, ``Simulate``) that needs them."""
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in named:
            if t.device.type in _NO_DATA:
                raise ValueError(
                    f"model: {kind} '{name}' is on the {t.device.type} device, which holds no "
                    f"values: {who} needs a model with data (model.to_empty(device=...) and load "
                    "or initialize its weights first)"
                )
