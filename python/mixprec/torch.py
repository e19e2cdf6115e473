"""mixprec inside PyTorch: the public face of three modules.

- :class:`Recorder` (``mixprec._recorder``): records a training loop as a mixprec run directory,
  for ``mixprec report`` and ``mixprec replay``;
- :class:`Simulate` (``mixprec._simulate``): trains a model as if in a recipe's formats, rounding
  what the recipe stores where the hardware would store it;
- :func:`quantize` (``mixprec._torch_round``): rounds torch tensors into mixprec's formats, bit
  for bit as :func:`mixprec.quantize`, on whatever device they lie.

``from mixprec.torch import Recorder, Simulate, quantize`` imports torch; ``import mixprec`` does not.
"""

from ._recorder import Recorder
from ._simulate import Simulate
from ._torch_round import quantize

__all__ = ["Recorder", "Simulate", "quantize"]
