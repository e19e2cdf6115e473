"""mixprec inside PyTorch: the public face of three modules.

- :class:`Recorder` (``mixprec._recorder``): records a training loop as a mixprec run directory,
  for ``mixprec report`` and ``mixprec replay``;
- :class:`Simulate` (``mixprec._simulate``): trains a model as if in a recipe's formats, rounding
  what the recipe stores where the hardware would store it;
- :func:`quantize` (``mixprec._torch_round``): rounds torch tensors into mixprec's formats, bit
  for bit as :func:`mixprec.quantize`, on whatever device they lie;
- :class:`HFCallback` (``mixprec._hf``) and :class:`LightningCallback` (``mixprec._lightning``):
  a :class:`Recorder` inside the Hugging Face ``Trainer`` and Lightning's ``Trainer``;
- :func:`sensitivity`, :func:`plan` and :func:`validate` (``mixprec._plan``): which layers can
  take a narrow format, measured per layer, planned within a budget and checked by re-training.

``from mixprec.torch import Recorder, Simulate, quantize`` imports torch; ``import mixprec`` does not.
The callbacks import transformers or lightning when first named.
"""

from ._recorder import Recorder
from ._simulate import Simulate
from ._torch_round import quantize

__all__ = [
    "HFCallback", "LightningCallback", "Recorder", "Simulate", "plan", "quantize", "sensitivity",
    "validate",
]
_PLAN = ("sensitivity", "plan", "validate")


def __getattr__(name: str):
    # The frameworks are imported only by those who name their callback.
    if name == "HFCallback":
        from ._hf import HFCallback

        return HFCallback
    if name == "LightningCallback":
        from ._lightning import LightningCallback

        return LightningCallback
    if name in _PLAN:
        from . import _plan

        return getattr(_plan, name)
    raise AttributeError(f"module 'mixprec.torch' has no attribute {name!r}")
