"""The products of a model's weights, cast as a recipe's ``gemm_operands`` say, whatever module
forms them: :class:`Products`, a ``TorchFunctionMode`` that :class:`mixprec.torch.Simulate`
turns on for each forward pass of the model.

A product is cast where one of its operands is a weight of the model (a parameter, as read,
or a view of one). The mode sees the torch functions that form them:

- ``F.linear`` (``nn.Linear``, and the projections inside ``nn.MultiheadAttention``, whose
  forward function runs under the mode);
- ``torch.addmm(bias, x, W)`` (transformers' ``Conv1D``) and ``x @ W`` / ``torch.matmul`` /
  ``torch.mm`` with the weight second;
- ``F.conv1d`` / ``conv2d`` / ``conv3d`` (any stride, padding, dilation and groups), as the
  matrix product the hardware forms of them (implicit GEMM): the input's patches
  (``C_in/groups * prod(kernel)`` values each) times the weight's rows.

Each is ``a @ wᵀ`` in :class:`_CastMatmul`: the input and the weight cast for the forward
product, the gradient of the output for the two backward products, each per block along the
axis its product sums (the patches' and rows' ``K``; the outputs for ``dL/da``; the rows of
``a`` for ``dL/dw``), or per tensor. Products accumulate in FP32 (torch's own GEMM on the cast
operands); a convolution's patches overlap, and their gradients sum in FP32 as autograd folds
them back.

Any other function that forms a product of a weight (``bmm``, ``einsum``, a transposed
convolution, a weight as the first operand, ...) runs uncast, and the mode names the weight:
:class:`Simulate` warns of it, and its ``coverage`` counts it.
"""

from __future__ import annotations

import functools
import math
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

#: The functions that form a product of their operands (the mode names a weight among their
#: operands that it did not cast).
_PRODUCTS = {
    F.linear, F.bilinear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__,
    torch.Tensor.__rmatmul__, torch.mm, torch.Tensor.mm, torch.bmm, torch.Tensor.bmm,
    torch.addmm, torch.Tensor.addmm, torch.baddbmm, torch.Tensor.baddbmm, torch.addmv,
    torch.mv, torch.Tensor.mv, torch.einsum, torch.tensordot, torch.inner, torch.outer,
    F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
    F.conv_transpose3d,
}
_MATMUL = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm}
_ADDMM = {torch.addmm, torch.Tensor.addmm}
_CONV = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}


class _CastMatmul(torch.autograd.Function):
    """``a @ wᵀ`` (``a``: M x K, ``w``: N x K) with the recipe's operand casts: ``a`` and ``w``
    for the forward product, ``dL/dy`` for the backward products, each along the axis its
    product sums over (``mixprec train``'s Linear)."""

    @staticmethod
    def forward(ctx, a, w, sim, layer):  # noqa: D102
        aq = sim._operand("gemm_input", layer, "input", a)
        wq = sim._operand("gemm_weight", layer, "weight", w)
        ctx.sim, ctx.layer = sim, layer
        ctx.save_for_backward(a, w, aq, wq)
        return aq @ wq.t()

    @staticmethod
    def backward(ctx, dy):  # noqa: D102
        sim, layer = ctx.sim, ctx.layer
        a, w, aq, wq = ctx.saved_tensors
        dy = dy.contiguous()
        cast = lambda cls, tensor, x: sim._operand(cls, layer, tensor, x)  # noqa: E731
        if sim._blocks("gemm_grad_output", layer) is not None:
            # Blocks run along the axis each product sums: dL/da sums over the outputs,
            # dL/dw over the rows of a.
            da = cast("gemm_grad_output", "grad_output", dy) @ cast(
                "gemm_weight", "weight", w.t().contiguous()
            ).t()
            dw = cast("gemm_grad_output", "grad_output", dy.t().contiguous()) @ cast(
                "gemm_input", "input", a.t().contiguous()
            ).t()
        else:
            dyq = cast("gemm_grad_output", "grad_output", dy)
            da = dyq @ wq if ctx.needs_input_grad[0] else None
            dw = dyq.t() @ aq if ctx.needs_input_grad[1] else None
        return da, dw, None, None


class Products(TorchFunctionMode):
    """Casts the products of ``weights`` (id of a parameter -> its name) as ``sim`` (a
    :class:`Simulate`) casts operands; the tensors read through ``sim``'s rounded weights carry
    their parameter's name in ``_mixprec_parameter``. ``cast`` and ``uncast`` collect the names
    of the weights whose products were cast, and were not; ``kept`` those whose layer ``sim``
    keeps uncast (its products run as they are); ``flops`` per layer the FLOPs of its cast
    products (forward, and the backward products its operands' gradients need)."""

    def __init__(self, sim: Any, weights: Dict[int, str]) -> None:
        super().__init__()
        self.sim = sim
        self.weights = weights
        self.cast: Dict[str, None] = {}
        self.uncast: Dict[str, str] = {}
        self.kept: Dict[str, None] = {}
        self.flops: Dict[str, int] = {}

    def weight(self, t: Any) -> Optional[str]:
        """The name of the parameter ``t`` is (a read of, or a view of one), else None."""
        if not isinstance(t, torch.Tensor):
            return None
        for x in (t, t._base):
            if x is None:
                continue
            name = getattr(x, "_mixprec_parameter", None) or self.weights.get(id(x))
            if name is not None:
                return name
        return None

    def __torch_function__(self, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.multi_head_attention_forward:
            # Its projections are F.linear calls inside: run it with the mode on.
            with self:
                return _mha_forward()(*args, **kwargs)
        if func not in _PRODUCTS:
            return func(*args, **kwargs)
        form = self._form(func, args, kwargs)
        if form is not None:
            name, cast = form
            if self.sim._casts(_layer_of(name)):
                return cast()
            self.kept[name] = None  # the layer's recipe keeps its products' operands in FP32
            return func(*args, **kwargs)
        for t in (*args, *kwargs.values()):
            name = self.weight(t)
            if name is not None:
                if self.sim._casts(_layer_of(name)):
                    self.uncast.setdefault(name, getattr(func, "__name__", str(func)))
                else:
                    self.kept[name] = None
        return func(*args, **kwargs)

    def _form(self, func, args: Sequence[Any], kwargs: Dict[str, Any]):
        """The weight's name and the product cast (a function that forms it), or None where
        this is not a form the mode casts."""
        if func is F.linear:
            x, w, b = _bind(args, kwargs, ("input", "weight", "bias"), (None,))
            name = self.weight(w)
            return None if name is None else (name, lambda: self._matmul(x, w, b, name))
        if func in _ADDMM:
            bias, x, w, beta, alpha = _bind(
                args, kwargs, ("input", "mat1", "mat2", "beta", "alpha"), (1, 1)
            )
            name = self.weight(w)
            if name is None or beta != 1 or alpha != 1 or self.weight(x) is not None:
                return None
            return name, lambda: self._matmul(x, w.t(), bias, name)
        if func in _MATMUL and not kwargs:
            x, w = args
            name = self.weight(w)
            if name is None or w.dim() != 2 or self.weight(x) is not None or x.dim() < 1:
                return None
            if x.dim() == 1:
                return name, lambda: self._matmul(x[None], w.t(), None, name)[0]
            return name, lambda: self._matmul(x, w.t(), None, name)
        if func in _CONV:
            x, w, b, stride, padding, dilation, groups = _bind(
                args, kwargs, ("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
                (None, 1, 0, 1, 1),
            )
            name = self.weight(w)
            if name is None or self.weight(x) is not None:
                return None
            n = _CONV[func]
            return name, lambda: self._conv(n, x, w, b, stride, padding, dilation, groups, name)
        return None

    def _matmul(self, x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], name: str):
        """``x @ wᵀ + b`` over ``x``'s last axis, cast; ``w``: N x K."""
        self.cast[name] = None
        layer = _layer_of(name)
        a = x.reshape(-1, x.shape[-1])
        self._count(layer, a, w)
        y = _CastMatmul.apply(a, w, self.sim, layer)
        y = y.reshape(*x.shape[:-1], w.shape[0])
        return y if b is None else y + b

    def _conv(self, n, x, w, b, stride, padding, dilation, groups, name):
        """``F.conv{n}d`` as the product of the input's patches and the weight's rows (each
        group's), cast."""
        self.cast[name] = None
        layer = _layer_of(name)
        batched = x.dim() == n + 2
        if not batched:
            x = x[None]
        kernel = tuple(w.shape[2:])
        stride, dilation = _tuple(stride, n), _tuple(dilation, n)
        pads = _padding(padding, kernel, dilation, n)
        x = F.pad(x, [p for pair in reversed(pads) for p in pair])
        for i in range(n):
            x = x.unfold(2 + i, dilation[i] * (kernel[i] - 1) + 1, stride[i])
            if dilation[i] > 1:
                x = x[..., :: dilation[i]]
        # (N, C, L1..Ln, k1..kn) -> (N * L, groups, C / groups * K)
        batch, channels, out = x.shape[0], x.shape[1], x.shape[2 : 2 + n]
        patches = x.permute(0, *range(2, 2 + n), 1, *range(2 + n, 2 + 2 * n))
        patches = patches.reshape(batch * math.prod(out), groups, -1)
        rows = w.reshape(groups, w.shape[0] // groups, -1)
        for g in range(groups):
            self._count(layer, patches[:, g], rows[g])
        y = torch.cat(
            [_CastMatmul.apply(patches[:, g], rows[g], self.sim, layer) for g in range(groups)],
            dim=1,
        )
        y = y.reshape(batch, *out, w.shape[0]).permute(0, n + 1, *range(1, n + 1)).contiguous()
        if b is not None:
            y = y + b.reshape(1, -1, *([1] * n))
        return y if batched else y[0]


    def _count(self, layer: str, a: torch.Tensor, w: torch.Tensor) -> None:
        """Adds the FLOPs of ``a @ wᵀ`` (M x K times K x N: 2MNK) to ``layer``'s, once for
        the forward product and once for each operand whose gradient the backward forms."""
        products = 1 + a.requires_grad + w.requires_grad
        flops = 2 * a.shape[0] * w.shape[0] * a.shape[1] * products
        self.flops[layer] = self.flops.get(layer, 0) + flops


def _bind(args: Sequence[Any], kwargs: Dict[str, Any], names: Tuple[str, ...], defaults: Tuple):
    """The arguments ``names`` of a call, positional or by keyword, the last ones defaulting
    to ``defaults``."""
    required = len(names) - len(defaults)
    values: List[Any] = []
    for i, name in enumerate(names):
        if i < len(args):
            values.append(args[i])
        elif name in kwargs:
            values.append(kwargs[name])
        elif i >= required:
            values.append(defaults[i - required])
        else:
            raise TypeError(f"missing argument {name!r}")
    return values


def _tuple(v: Any, n: int) -> Tuple[int, ...]:
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v),) * n


def _padding(padding: Any, kernel, dilation, n: int) -> List[Tuple[int, int]]:
    """The (before, after) padding of each spatial axis, as ``F.conv{n}d`` reads ``padding``."""
    if padding == "valid":
        return [(0, 0)] * n
    if padding == "same":
        # As torch pads for 'same': the extra one after.
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in totals]
    return [(p, p) for p in _tuple(padding, n)]


def _layer_of(parameter: str) -> str:
    """The layer a parameter belongs to (``0.weight`` -> ``0``)."""
    return parameter.rsplit(".", 1)[0] if "." in parameter else "model"


@functools.lru_cache(maxsize=1)
def _mha_forward():
    """``F.multi_head_attention_forward`` without its torch-function check, so that under the
    mode it runs its own body (whose projections the mode then sees) instead of handing itself
    back to the mode."""
    f = F.multi_head_attention_forward
    scope = dict(f.__globals__, has_torch_function=lambda *_: False)
    g = types.FunctionType(f.__code__, scope, f.__name__, f.__defaults__, f.__closure__)
    g.__kwdefaults__ = f.__kwdefaults__
    return g
