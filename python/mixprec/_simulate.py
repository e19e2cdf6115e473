"""Precision simulation inside a PyTorch model: :func:`quantize` on torch tensors and
:class:`Simulate` (imported as ``mixprec.torch.quantize`` and ``mixprec.torch.Simulate``).

The model keeps its FP32 parameters; under :class:`Simulate` every value the recipe stores in a
narrower format is rounded into it, exactly as the hardware would, at the points ``mixprec
train`` rounds it:

- weights as the forward pass reads them (``weights``), each time the parameter has changed;
- every leaf module's output (``activations``), and the network's floating-point inputs;
- the gradient flowing back into every leaf module's inputs (``activation_grads``, the module's
  own, as the training core's layers store the gradient they pass back) and into the network's
  output (the ``loss`` site);
- every parameter's gradient once accumulated (``weight_grads``), scaled by the loss scale as
  the backward pass holds it;
- after each optimizer step, the parameters (``master_weights``) and the optimizer's state
  (``optimizer_state``), when the recipe stores them in a narrower format;
- with a recipe that casts the operands of matrix products (``fp8-hybrid``, ``mxfp8``,
  ``nvfp4``), ``nn.Linear``'s input and weight just before its product and its output gradient
  before the two backward products (the bias gradient sums the uncast gradient), per tensor
  with Transformer Engine's delayed scaling or per block along the axis each product sums.

Products accumulate in FP32 (PyTorch's own GEMMs on the rounded operands): a recipe with
``accumulation: storage`` is refused. The rules that decide what happens (the recipe presets and
their JSON, the loss scalers, the fp8 delayed scales, the rounding itself on the CPU) are the
library's, through the binding: nothing of them is restated here.
"""

from __future__ import annotations

import copy
import fnmatch
import json
import math
import numbers
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch
from torch.autograd.graph import increment_version

from . import _mixprec, _names
from ._checks import check_module
from ._products import Products, _layer_of
from ._torch_round import amax as _amax
from ._torch_round import quantize

#: The classes a recipe stores, as the run directory's counts name them, and the recipe key of
#: each (the library's table): the storage classes, and the operand classes (their key in the
#: recipe's ``gemm_operands``).
_CLASS_KEYS = {c["name"]: c["recipe_key"] for c in _names()["classes"] if c["recipe_key"] and not c["operand"]}
_OPERANDS = {c["name"]: c["recipe_key"] for c in _names()["classes"] if c["operand"]}
#: The classes whose largest magnitude is the step's ``grad_amax``.
_GRADIENTS = ("activation_grad", "weight_grad")
#: PyTorch's names of optimizer state, and the library's part of each (``optimizer_parts``).
_PARTS = {"exp_avg": "adam_m", "exp_avg_sq": "adam_v", "momentum_buffer": "momentum"}


#: Why a model that torch.compile runs is refused (``who`` cannot see ``what`` in its graph).
_COMPILED = (
    "{who}: the model is compiled by torch.compile, whose graph runs without {what}, so its "
    "numbers would differ silently; pass the eager model (model._orig_mod, or the model before "
    ".compile()) and compile nothing under {who}"
)


def _check_model(model: Any, who: str, what: str) -> None:
    """A ``torch.nn.Module`` (else a TypeError) with its data on a real device (else a
    ValueError naming the tensor) that torch.compile does not run (else a ValueError with
    :data:`_COMPILED`)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    check_module(model, who)
    if _compiled(model):
        raise ValueError(_COMPILED.format(who=who, what=what))


def _compiled(model: torch.nn.Module) -> bool:
    """Whether ``model`` or a module in it is compiled by torch.compile (wrapped in an
    ``OptimizedModule``, or compiled in place by ``module.compile()``)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")  # not loaded: nothing compiled
    compiled = () if eval_frame is None else eval_frame.OptimizedModule
    # The module tree walked through ``_modules`` (``model.modules()`` builds each module's
    # qualified name: 4x the time, and this runs before every forward pass).
    stack, seen = [model], set()
    while stack:
        m = stack.pop()
        if m is None or id(m) in seen:
            continue
        seen.add(id(m))
        if getattr(m, "_compiled_call_impl", None) is not None or isinstance(m, compiled):
            return True
        stack.extend(m._modules.values())
    return False


def _check_unsharded(model: torch.nn.Module) -> None:
    """A TypeError naming the first parameter of ``model`` whose values are not its own to
    round (a wrapper subclass: FSDP2's DTensor shards, whose ``data_ptr`` is 0 plus their
    storage offset): Simulate rounds and reads plain tensors."""
    for name, p in model.named_parameters():
        try:
            # A wrapper subclass's data_ptr is 0 plus its storage offset.
            base = p.data_ptr() - p.storage_offset() * p.element_size()
        except RuntimeError:  # a subclass without storage that says so
            base = 0
        if p.numel() and not base:
            raise TypeError(
                f"model: parameter '{name}' is a {type(p).__name__} without values of its own "
                "(fully_shard makes FSDP2's parameters such shards): Simulate rounds plain "
                "tensors; simulate the model before sharding it (Recorder records sharded runs)"
            )


def _under_compile(model: torch.nn.Module) -> bool:
    """Whether a forward pass of ``model`` beginning now runs under torch.compile: traced, or
    called by a compiled module (``torch.compile(model)`` runs the root's hooks eagerly, from
    dynamo's frame, and traces the rest), or a module of it compiled since."""
    if torch.compiler.is_compiling() or _compiled(model):
        return True
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_DYNAMO_FRAME):
            return True
        frame = frame.f_back
    return False


_DYNAMO_FRAME = os.path.join("torch", "_dynamo", "eval_frame.py")
#: What Simulate rounds in, which a compiled graph runs without.
_SIMULATE_SEES = "the hooks that round every store and cast every product"


def _is_grad_scaler(scaler: Any) -> bool:
    """Whether ``scaler`` is a ``torch.amp.GradScaler`` (or a subclass, such as
    ``torch.cuda.amp.GradScaler`` or FSDP's ``ShardedGradScaler``)."""
    # torch.amp.GradScaler since torch 2.3; torch.cuda.amp's before.
    cls = getattr(torch.amp, "GradScaler", None) or torch.cuda.amp.GradScaler
    return isinstance(scaler, cls)


def _policy(scaler: Optional[Any]) -> str:
    """The loss-scaling policy of ``scaler`` by mixprec's name: a GradScaler is the
    ``gradscaler`` preset with its own parameters (its initial scale the one its next step will
    use), ``none`` without a scaler or with it disabled."""
    if scaler is None or not scaler.is_enabled():
        return "none"
    return (
        f"gradscaler:init_scale={float(scaler.get_scale())!r},"
        f"growth_factor={float(scaler.get_growth_factor())!r},"
        f"backoff_factor={float(scaler.get_backoff_factor())!r},"
        f"growth_interval={int(scaler.get_growth_interval())}"
    )




class _Store(torch.autograd.Function):
    """``store(x)`` in the forward pass (``x`` itself without ``store``), the backward passing the
    gradient to ``x`` unchanged (rounded by ``grad`` when given): a store whose gradient is that
    of the value stored. The output is a tensor of its own (``x``'s storage without ``store``, as
    ``detach`` shares it, with its version counter), never a view, so that the model may modify
    it in place as it would have modified ``x`` (torchvision's ``ReLU(inplace=True)``, ``out +=
    identity``)."""

    @staticmethod
    def forward(ctx, x, store, grad):  # noqa: D102
        ctx.grad = grad
        y = x if store is None else store(x)
        return x.detach() if y is x else y

    @staticmethod
    def backward(ctx, g):  # noqa: D102
        return (g if ctx.grad is None else ctx.grad(g)), None, None


class Simulate:
    """Trains ``model`` as if in ``recipe``'s formats: rounds what the recipe stores, where
    ``mixprec train`` rounds it, keeping FP32 master weights (unless the recipe says otherwise).

    ::

        sim = Simulate(model, "fp16-master", optimizer=opt, scaler="static:2^10")
        with sim:
            for x, y in data:
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                sim.backward(loss)   # (loss * scale).backward()
                sim.step()           # unscale, skip on overflow, opt.step(), update the scale

    Args:
        model: the ``torch.nn.Module``; its parameters must be float32 (the FP32 master copy).
        recipe: a preset name (``fp16-pure``, ``fp16-master``, ``fp16-dynamic``,
            ``bf16-master``, ``fp8-hybrid``, ``mxfp8``, ``nvfp4``, ... as ``mixprec train
            --recipe``), or a recipe as a dict or JSON text (``mixprec train --print-config``
            shows the keys).
        optimizer: the optimizer; needed by :meth:`step`, and by recipes that store master
            weights or optimizer state in a narrower format (rounded after each of its steps).
        scaler: the loss scaling: ``None`` for the recipe's, a policy name as ``mixprec train
            --scaler`` takes it (``static:2^10``, ``gradscaler``, ``megatron``, ``none``, ...),
            a positive number (a static loss scale: ``1024.0`` is ``"static:1024"``), or a
            ``torch.amp.GradScaler`` (then :meth:`backward` and :meth:`step` call it, and the
            recipe records its policy).
        seed: the seed of stochastic rounding (each rounding of a tensor draws from its own
            stream, numbered in the order they happen).
        keep: layers that keep another precision: glob patterns (``*`` any run of
            characters, dots included; ``?`` one; ``[...]`` a class) over the modules'
            qualified names (``model.named_modules()``: ``transformer.h.0.attn.c_attn``,
            ``layer1.0.conv1``; ``model`` for the root), in order, each to a preset name or a
            recipe dict: the first pattern that matches a module decides its weights,
            activations, gradients and the casts of its products (``gemm_operands``) and their
            fp8 scaling; the loss scaling, master weights, optimizer state and rounding stay
            the recipe's. The same as a recipe whose ``"keep"`` is this dict. A product is the
            layer's that owns its weight (GPT-2's head, tied to the token embedding, is
            ``transformer.wte``'s).

    Raises:
        ValueError: an unknown recipe or policy (the command line's message), a static loss
            scale that is not a positive finite f32, a recipe that accumulates in storage
            precision, or one that needs ``optimizer`` without it; a ``keep`` pattern that
            matches no module, a kept recipe with a ``keep`` of its own, ``keep`` given both
            as the argument and in the recipe.
        TypeError: a ``model`` that is not a ``torch.nn.Module``, a ``recipe`` or ``scaler`` of
            another type than those above, parameters that are not float32.

    After each :meth:`step`, :attr:`last` holds what the step did (its loss scale, whether it
    overflowed and was skipped, and per tensor class the values stored and what rounding did to
    them), which :class:`mixprec.torch.Recorder` writes to the run directory when given
    ``simulate=sim``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        recipe: Any = "fp16-master",
        *,
        optimizer: Optional[torch.optim.Optimizer] = None,
        scaler: Any = None,
        seed: int = 0,
        keep: Optional[Mapping[str, Any]] = None,
    ) -> None:
        _check_model(model, "Simulate", _SIMULATE_SEES)
        _check_unsharded(model)
        if not isinstance(recipe, (str, Mapping)):
            raise TypeError(
                "recipe: expected a preset name, a recipe as a dict or JSON text, got "
                f"{type(recipe).__name__}"
            )
        self.grad_scaler = None
        policy = scaler
        if _is_grad_scaler(scaler):
            self.grad_scaler, policy = scaler, _policy(scaler)
        elif isinstance(scaler, numbers.Real) and not isinstance(scaler, bool):
            scale = float(scaler)
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(
                    f"scaler: a static loss scale must be a positive finite number, got {scaler!r}"
                )
            policy = f"static:{scale!r}"
        elif scaler is not None and not isinstance(scaler, str):
            raise TypeError(
                "scaler: expected None (the recipe's), a policy name such as 'static:2^10' or "
                "'gradscaler', a positive number (a static loss scale) or a "
                f"torch.amp.GradScaler, got {type(scaler).__name__}"
            )
        spec, keep = _split_keep(recipe, keep)
        try:
            self._recipe_json = _mixprec.recipe_json(spec, policy)
        except ValueError as e:
            if isinstance(scaler, numbers.Real):  # out of f32's range: name the argument
                raise ValueError(f"scaler={scaler!r}: {e}") from None
            raise
        #: The recipe, with its ``keep`` (the patterns and the recipes given, in order) where
        #: it has one: what a recorded run's config holds.
        self.recipe: Dict[str, Any] = json.loads(self._recipe_json)
        if keep:
            self.recipe["keep"] = {pattern: given for pattern, (given, _) in keep.items()}
        if self.recipe["accumulation"] != "fp32":
            raise ValueError(
                f"recipe: accumulation {self.recipe['accumulation']!r} rounds every partial sum "
                "of a product, which PyTorch's GEMMs do not expose; Simulate accumulates in "
                "fp32 (use mixprec train for storage accumulation)"
            )
        bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
        if bad:
            raise TypeError(f"model: parameter {bad[0]!r} is not float32 (the master copy)")
        self.model = model
        self.optimizer = optimizer
        self.seed = int(seed)
        self._base = _Precision(self._recipe_json)
        #: The layers a ``keep`` pattern decides, and the precision each keeps (the first
        #: pattern that matches its name); every other layer is the base recipe's.
        self._kept = _layers_kept(model, keep)
        self._precisions = [self._base, *{id(p): p for p in self._kept.values()}.values()]
        needs_opt = [c for c in _GLOBAL if self._base.formats[c] is not None]
        if needs_opt and optimizer is None:
            raise ValueError(
                f"optimizer: recipe {self.recipe['name']!r} stores "
                f"{_CLASS_KEYS[needs_opt[0]]} in {self._base.formats[needs_opt[0]]}, which "
                "Simulate rounds after each optimizer step: pass optimizer=..."
            )
        self.scaler = None if self.grad_scaler is not None else _mixprec.LossScaler(self._recipe_json)
        self._streams = 0
        #: The recipe's rounding mode and overflow rule, as every rounding passes them.
        self._rounding = (self.recipe["rounding"], self.recipe["overflow"])
        #: Per format rounded into on the CPU: the binding's rounder (parsed once).
        self._rounders: Dict[str, Any] = {}
        #: Per layer, its cast operands' values since this Simulate was made: stored,
        #: underflowed, overflowed or not finite (what the sensitivity of a layer reports).
        self._operand_counts: Dict[str, List[int]] = {}
        self._counts: Dict[str, List[int]] = {}
        self._weights: Dict[int, Tuple[Tuple[int, int], torch.Tensor]] = {}
        self._weight_sites: List[Tuple[torch.nn.Module, str, str]] = []
        self._products: Optional[Products] = None
        self._warned: set = set()
        self._undo: List[Callable[[], None]] = []
        self._scale_used = 1.0
        self._grad_amax = 0.0
        self._grad_nonfinite = False
        #: The capture being gathered (a ``mixprec._mixprec.Capture``, set by the Recorder on
        #: capture steps): every storage point adds the values it rounds, before rounding.
        self.capture: Optional[Any] = None
        self.last: Optional[Dict[str, Any]] = None
        #: Steps ended by :meth:`step`.
        self.steps = 0
        self.active = False

    # -- the recipe ---------------------------------------------------------------------------

    def _precision(self, cls: str, layer: str) -> "_Precision":
        """The precision that stores ``cls`` at ``layer``: the base recipe's for the master
        weights and the optimizer's state (global), else the layer's."""
        return self._base if cls in _GLOBAL else self._kept.get(layer, self._base)

    def _format(self, cls: str, layer: str) -> Optional[str]:
        """The format ``cls`` is stored in at ``layer``, or None where it stays in FP32."""
        return self._precision(cls, layer).formats.get(cls)

    def rounds(self, cls: str, layer: Optional[str] = None) -> bool:
        """Whether the recipe stores tensor class ``cls`` (``weight``, ``activation``,
        ``activation_grad``, ``weight_grad``, ``optimizer_state``, ``master``, ``gemm_input``,
        ``gemm_weight``, ``gemm_grad_output``) in a format narrower than FP32: at ``layer``
        (a module's qualified name), or at any layer."""
        if layer is not None:
            return self._format(cls, layer) is not None
        return any(p.formats.get(cls) is not None for p in self._precisions)

    def _casts(self, layer: str) -> bool:
        """Whether ``layer``'s products are cast (its recipe casts an operand)."""
        return self._kept.get(layer, self._base).casts_operands

    def judged_format(self) -> str:
        """The element format the recipe's gradients are judged against in reports: the first
        of the activation gradients', weight gradients', activations', weights' and operands'
        formats (a block format's element) that is not FP32; ``fp16`` for FP32 throughout."""
        order = ("activation_grad", "weight_grad", "activation", "weight", *_OPERANDS)
        for cls in order:
            name = self._base.formats[cls]
            if name is not None:
                return _format_info(name).get("element", name)
        return "fp16"

    def _blocks(self, cls: str, layer: str) -> Optional[str]:
        """The block format of operand class ``cls`` at ``layer``, if it is cast to one."""
        precision = self._precision(cls, layer)
        return precision.formats[cls] if cls in precision.block_operands else None

    # -- rounding -----------------------------------------------------------------------------

    def _round(
        self,
        x: torch.Tensor,
        cls: str,
        layer: str,
        part: Optional[str] = None,
        tensor: str = "",
        out: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """``x`` rounded into ``cls``'s format (a new tensor, or ``out``: ``x`` itself or a
        tensor of its shape) at storage point (``layer``, ``cls``, ``part``), counted and, on
        a capture step, captured: where the recipe scales 8-bit formats, with the delayed scale
        of the storage point's ``tensor`` (a parameter's or operand's name; ``round(x * scale)
        * (1 / scale)`` in float32, as the training core computes it)."""
        # The hot path of every storage point (a hundred calls a step on a small transformer):
        # each lookup here is paid per tensor.
        precision = self._base if cls in _GLOBAL else self._kept.get(layer, self._base)
        fmt = precision.formats[cls]
        if fmt is None or not x.is_floating_point():
            return x
        n = x.numel()
        if n == 0:
            return x
        src = x.detach()
        if src.dtype != torch.float32:
            src = src.float()
        training = self.model.training
        cpu = src.device.type == "cpu"
        grad = cls in _GRADIENTS and training
        fp8 = cls in precision.fp8_max
        # A gradient's largest magnitude: read by the rounding itself where it rounds ``src``
        # as it is on the CPU, else here (before a rounding in place overwrites it), once for
        # the gradient and the fp8 scale.
        fused = grad and cpu and not fp8
        amax = _amax(src) if fp8 or (grad and not fused) else None
        if grad and not fused:
            finite = lambda: _amax(src.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0))  # noqa: E731
            self._grad_seen(amax, finite)
        unscaled, scale = src, None
        if fp8:
            name = f"{layer}/{cls}/{part or ''}/{tensor}"
            seen = _amax(src.nan_to_num(nan=0.0)) if math.isnan(amax) else amax
            scale = precision.delayed.cast(name, precision.fp8_max[cls], seen if training else 0.0)
            # A float32 scale (the library's), exact as torch's float32 scalar.
            src = src * scale
        src = src.contiguous()
        capture = self.capture is not None and training
        seed = self._stream()
        rounding, overflow = self._rounding
        if cpu:
            # The binding's kernel, the format and options parsed once per format (quantize's
            # checks, parsing and numpy views cost more than rounding a small tensor): in
            # place into ``out`` where it can take the result and no capture reads the values
            # before rounding, else into a new tensor; a gradient's largest magnitude read in
            # the same call where it is ``src``'s.
            rounder = self._rounders.get(fmt)
            if rounder is None:
                rounder = self._rounders[fmt] = _mixprec.TensorRounder(
                    fmt, rounding, overflow, True, torch.float32)
            direct = (out is not None and not capture and out.dtype == torch.float32
                      and out.is_contiguous())
            y = out if direct else torch.empty_like(src)
            *counts, top = rounder.round_into(src, y, seed, fused)
            if direct:
                increment_version(y)
            if fused:
                self._grad_seen(math.inf if counts[3] + counts[4] else top, lambda: top)
        else:
            y, c = quantize(src, fmt, rounding, overflow, True, seed, return_counts=True)
            counts = [c[k] for k in _COUNT_KEYS]
        if scale is not None:
            y.mul_(float(np.float32(1.0) / np.float32(scale)))  # 1 / scale in float32
        self._count(cls, n, counts)
        if cls in _OPERANDS:
            c = self._operand_counts.setdefault(layer, [0, 0, 0])
            c[0] += n
            c[1] += counts[0]
            c[2] += counts[2] + counts[4]
        if capture:
            values = unscaled.contiguous().cpu().numpy()
            self.capture.add_stored(layer, cls, part, values, tuple(counts))
        if out is not None and y is not out:
            out.copy_(y)
            return out
        return y if y.dtype == x.dtype else y.to(x.dtype)

    def _grad_seen(self, amax: float, finite: Callable[[], float]) -> None:
        """Adds a gradient's largest magnitude ``amax`` to the step's ``grad_amax`` (divided
        by the loss scale): where it is not finite, the largest finite one (``finite()``)."""
        if not math.isfinite(amax):
            # Formed upstream (a store that overflowed): the values it reached are unknown at
            # other scales, and this step's grad_amax only a lower bound.
            self._grad_nonfinite = True
            amax = finite()
        self._grad_amax = max(self._grad_amax, amax / self._scale_used)

    def _round_(
        self, x: torch.Tensor, cls: str, layer: str, part: Optional[str] = None, tensor: str = ""
    ) -> None:
        """Rounds the tensor ``x`` into ``cls``'s format in place (as :meth:`_round`)."""
        if self._format(cls, layer) is not None and x.numel():
            self._round(x, cls, layer, part, tensor, out=x)

    def _operand(self, cls: str, layer: str, tensor: str, x: torch.Tensor) -> torch.Tensor:
        """An operand of a product cast for it: per block along the last axis, or per tensor
        (with the delayed scale of ``tensor``, where the recipe has one), or as it is where the
        recipe leaves it in FP32."""
        return self._round(x.contiguous(), cls, layer, None, tensor)

    def _stream(self) -> int:
        """The seed of the next rounding's stochastic stream."""
        self._streams += 1
        return (self.seed * 0x9E3779B97F4A7C15 + self._streams) % 2**64

    def _count(self, cls: str, stored: int, counts: Tuple[int, int, int, int, int]) -> None:
        """Adds a rounding's ``counts`` (in ``_COUNT_KEYS``' order) of ``stored`` values."""
        c = self._counts.get(cls)
        if c is None:
            c = self._counts[cls] = [0, 0, 0, 0, 0]
        c[0] += stored
        c[1] += counts[0]
        c[2] += counts[1]
        c[3] += counts[2]
        c[4] += counts[3] + counts[4]

    # -- hooks ----------------------------------------------------------------------------------

    def __enter__(self) -> "Simulate":
        if self.active:
            raise RuntimeError("Simulate: already active")
        self.active = True
        self._counts = {}
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                self._round_(p, "master", _layer_of(name), None, name)
        self._install()
        # The initial copy into the weights' format belongs to no step (as in the training core).
        self._sync_weights()
        self._counts = {}
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        """Removes every hook: the model computes in FP32 again, its parameters as trained."""
        for undo in reversed(self._undo):
            undo()
        self._undo = []
        self._weights = {}
        self._weight_sites = []
        self.active = False

    def _install(self) -> None:
        model = self.model
        if self._format("activation", "input") is not None:
            h = model.register_forward_pre_hook(self._round_inputs, with_kwargs=True)
            self._undo.append(h.remove)
        names = {id(p): n for n, p in model.named_parameters()}
        for name, module in model.named_modules():
            name = name or "model"
            params = [n for n, p in module.named_parameters(recurse=False) if p is not None]
            if params and self.rounds("weight", name):
                self._read_rounded(module, name, params, names)
            leaf = not any(True for _ in module.children())
            if leaf and self.rounds("activation", name):
                h = module.register_forward_hook(self._round_output(name))
                self._undo.append(h.remove)
            if leaf and self.rounds("activation_grad", name):
                h = module.register_forward_pre_hook(self._round_input_grads(name), with_kwargs=True)
                self._undo.append(h.remove)
        h = model.register_forward_pre_hook(self._forward_begins)
        self._undo.append(h.remove)
        if self._casts_operands():
            self._products = Products(self, names)
            h = model.register_forward_hook(self._products_off, always_call=True)
            self._undo.append(h.remove)
        if self._format("activation_grad", "loss") is not None:
            # The gradient of the loss with respect to the network's output (the training
            # core's "loss" site).
            h = model.register_forward_hook(self._round_loss_grad)
            self._undo.append(h.remove)
        for name, p in model.named_parameters():
            if p.requires_grad and self.rounds("weight_grad", _layer_of(name)):
                h = p.register_post_accumulate_grad_hook(self._round_grad(name))
                self._undo.append(h.remove)
        if self.optimizer is not None:
            h = self.optimizer.register_step_post_hook(self._after_optimizer_step)
            self._undo.append(h.remove)

    def _casts_operands(self) -> bool:
        return any(p.casts_operands for p in self._precisions)

    def _forward_begins(self, module, args) -> None:
        """Refuses a forward pass that torch.compile traces (its graph would run without the
        rounding); turns the products' mode on where the recipe casts them."""
        if _under_compile(module):
            raise RuntimeError(_COMPILED.format(who="Simulate", what=_SIMULATE_SEES))
        if self._products is not None:
            self._products.__enter__()

    def _products_off(self, module, args, output) -> None:
        """The end of a forward pass: the products' mode off; a warning naming the weights whose
        products ran uncast, the first time each is seen."""
        self._products.__exit__(None, None, None)
        kept = self._products.kept
        new = [n for n in self._products.uncast if n not in self._warned and n not in kept]
        if new:
            self._warned.update(new)
            uncast = ", ".join(f"{n} ({self._products.uncast[n]})" for n in new)
            warnings.warn(
                f"Simulate: recipe {self.recipe['name']!r} casts the operands of products, but "
                f"these weights' products ran uncast, in FP32: {uncast}",
                stacklevel=2,
            )

    @property
    def coverage(self) -> Optional[Dict[str, Any]]:
        """Which weights' products the forward passes so far cast into the recipe's operand
        formats: ``cast`` and ``uncast`` (parameter names, each once however often it is read
        or tied), ``cast_weights`` and ``product_weights`` (the scalars of the weights cast, and
        of every weight that formed a product), and ``parameters`` (all the model's scalars);
        with ``keep``, also ``kept``: the weights whose products ran uncast because a pattern
        keeps their layer's operands in FP32 (counted in ``product_weights``, not ``uncast``).
        None for a recipe that casts no operands."""
        if self._products is None:
            return None
        sizes = {n: p.numel() for n, p in self.model.named_parameters()}
        cast = sorted(self._products.cast)
        kept = sorted(n for n in self._products.kept if n not in self._products.cast)
        uncast = sorted(
            n for n in self._products.uncast if n not in self._products.cast and n not in kept
        )
        coverage = {
            "cast": cast,
            "uncast": uncast,
            "cast_weights": sum(sizes[n] for n in cast),
            "product_weights": sum(sizes[n] for n in cast + uncast + kept),
            "parameters": sum(sizes.values()),
        }
        if self._kept:
            coverage["kept"] = kept
        return coverage

    def _stored(self, x: torch.Tensor, layer: str) -> torch.Tensor:
        """The activation ``x`` as the recipe stores it at ``layer``: a tensor of its own (never
        a view, so that the model may modify it in place: ``ReLU(inplace=True)``, ``out +=
        identity``) holding ``x`` rounded, whose gradient passes to ``x`` unchanged. A clone
        rounded in place under no_grad: autograd's own node passes the gradient on, where a
        Python ``autograd.Function`` (as :class:`_Store`) costs a Python call in the forward and
        another in the backward, per activation."""
        y = x.clone()
        with torch.no_grad():
            self._round_(y, "activation", layer)
        return y

    def _round_inputs(self, module, args, kwargs):
        return _map_tensors((args, kwargs), lambda a: self._stored(a, "input"))

    def _round_output(self, name: str):
        def hook(module, inputs, output):
            return _map_tensors(output, lambda y: self._stored(y, name))

        return hook

    def _round_input_grads(self, name: str):
        """A module's activation gradients are those with respect to its inputs (as the
        training core's layers store the gradient they pass back)."""

        def hook(module, args, kwargs):
            grad = lambda g: self._round(g, "activation_grad", name)  # noqa: E731
            return _map_tensors(
                (args, kwargs), lambda a: _Store.apply(a, None, grad) if a.requires_grad else a
            )

        return hook

    def _round_loss_grad(self, module, inputs, output):
        grad = lambda g: self._round(g, "activation_grad", "loss")  # noqa: E731
        return _map_tensors(
            output, lambda y: _Store.apply(y, None, grad) if y.requires_grad else y
        )

    def _round_grad(self, name: str):
        def hook(p: torch.Tensor) -> None:
            if p.grad is not None:
                with torch.no_grad():
                    self._round_(p.grad, "weight_grad", _layer_of(name), None, name)

        return hook

    def _read_rounded(
        self, module: torch.nn.Module, layer: str, names: List[str], parameters: Dict[int, str]
    ) -> None:
        """Makes every read of ``module.<name>`` (in its forward or any other module's) see the
        parameter rounded into the weights' format: a subclass of the module's class with a
        property per parameter, as ``torch.nn.utils.parametrize`` does, without renaming the
        parameters (the optimizer, ``state_dict`` and ``named_parameters`` see the FP32 master
        weights). The rounding is redone only when the parameter has changed. Each read is a
        tensor of its own, carrying the parameter's name (``parameters``: by id) for the
        products' mode."""
        cls = type(module)
        for name in names:
            self._weight_sites.append((module, layer, name))

        def read(name: str):
            def get(m):
                p = m._parameters[name]
                w = _Store.apply(p, lambda _: self._weight(p, layer, name).detach(), None)
                w._mixprec_parameter = parameters.get(id(p))
                return w

            return property(get)

        module.__class__ = type(cls.__name__, (cls,), {n: read(n) for n in names})

        def undo() -> None:
            module.__class__ = cls

        self._undo.append(undo)

    def _weight(self, p: torch.Tensor, layer: str, name: str) -> torch.Tensor:
        """Parameter ``p`` rounded into the weights' format: rounded again only when it has
        changed (an optimizer step, or the user writing it)."""
        version = (p._version, p.data_ptr())
        cached = self._weights.get(id(p))
        if cached is None or cached[0] != version:
            with torch.no_grad():
                cached = (version, self._round(p, "weight", layer, None, name))
            self._weights[id(p)] = cached
        return cached[1]

    def _sync_weights(self) -> None:
        """Rounds every changed parameter into the weights' format now, as the training core
        copies the master weights into the weights after each update (counted in that step)."""
        for module, layer, name in self._weight_sites:
            p = module._parameters.get(name)
            if p is not None:
                self._weight(p, layer, name)

    def _after_optimizer_step(self, optimizer, args, kwargs) -> None:
        if all(self._base.formats[c] is None for c in _GLOBAL):
            self._sync_weights()
            return
        names = {id(p): n for n, p in self.model.named_parameters()}
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    name = names.get(id(p), "model")
                    layer = _layer_of(name)
                    self._round_(p, "master", layer, None, name)
                    for key, value in optimizer.state.get(p, {}).items():
                        if isinstance(value, torch.Tensor) and value.dim() > 0:
                            if value.dtype == torch.float32:
                                part = _PARTS.get(key, key)
                                self._round_(value, "optimizer_state", layer, part, name)
        self._sync_weights()

    # -- the loop -------------------------------------------------------------------------------

    @property
    def loss_scale(self) -> float:
        """The scale the next :meth:`backward` multiplies the loss by."""
        if self.grad_scaler is not None:
            return float(self.grad_scaler.get_scale()) if self.grad_scaler.is_enabled() else 1.0
        return float(self.scaler.scale)

    def backward(self, loss: torch.Tensor) -> None:
        """``(loss * scale).backward()``, the scale this step's: the recipe's loss scaler's (or
        the GradScaler's ``scale(loss)``)."""
        self._scale_used = self.loss_scale
        if self.grad_scaler is not None:
            self.grad_scaler.scale(loss).backward()
        else:
            (loss * self._scale_used).backward()

    def step(self) -> bool:
        """Ends the step: unscales the gradients, steps the optimizer unless they overflowed
        under loss scaling (or, with a GradScaler, as ``scaler.step``/``scaler.update`` do),
        updates the scale and the fp8 delayed scales; returns whether the step was skipped."""
        if self.optimizer is None:
            raise ValueError("Simulate.step: no optimizer (pass optimizer=... to Simulate)")
        params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        found_inf = False
        if self.grad_scaler is not None:
            self.grad_scaler.step(self.optimizer)
            found = [
                v
                for state in self.grad_scaler._per_optimizer_states.values()
                for v in state.get("found_inf_per_device", {}).values()
            ]
            found_inf = any(float(v) > 0 for v in found)
            skipped = found_inf and self.grad_scaler.is_enabled()
            self.grad_scaler.update()
        else:
            found_inf = _unscale(params, self._scale_used)
            skipped = self.scaler.update(found_inf)
            if not skipped:
                self.optimizer.step()
        self._end_delayed()
        self.last = {
            "loss_scale": self._scale_used,
            "overflow": found_inf,
            "skipped": skipped,
            "grad_amax": self._grad_amax if self._grad_amax > 0 else None,
            "grad_amax_bounded": self._grad_nonfinite,
            "counts": self.take_counts(),
        }
        self._grad_amax = 0.0
        self._grad_nonfinite = False
        self.steps += 1
        return skipped

    def _end_delayed(self) -> None:
        """Ends the step of the fp8 delayed scales: each cast tensor's next scale from the
        amax seen."""
        for precision in self._precisions:
            if precision.delayed is not None:
                precision.delayed.end_step()

    def take_counts(self) -> Dict[str, Dict[str, int]]:
        """Per tensor class, the values stored and what rounding did to them since the last
        call (the run directory's per-step ``counts``)."""
        counts, self._counts = self._counts, {}
        keys = ("stored", "underflow", "subnormal", "overflow", "nonfinite")
        return {cls: dict(zip(keys, c)) for cls, c in sorted(counts.items())}


#: The classes the recipe stores once for the whole model (its ``keep`` cannot change them).
_GLOBAL = ("master", "optimizer_state")
#: What a rounding counts, in the order `TensorRounder.round_into` returns them.
_COUNT_KEYS = ("underflow", "subnormal", "overflow", "nan", "infinite")


class _Precision:
    """What one recipe (``recipe_json``, the library's full JSON) stores: per tensor class its
    format, None where FP32 (``formats``); the operand classes cast to a block format (blocks
    along a product's summed axis); the 8-bit classes scaled per tensor (their largest value,
    ``fp8_max``) and their delayed scales, where the recipe has fp8 scaling."""

    def __init__(self, recipe_json: str) -> None:
        recipe = json.loads(recipe_json)
        self.formats: Dict[str, Optional[str]] = {}
        for cls, key in (*_CLASS_KEYS.items(), *_OPERANDS.items()):
            name = recipe["gemm_operands"][key] if cls in _OPERANDS else recipe[key]
            self.formats[cls] = None if name == "fp32" else name
        info = {c: _format_info(f) for c, f in self.formats.items() if f is not None}
        self.block_operands = {c for c in _OPERANDS if "block_cols" in info.get(c, {})}
        self.casts_operands = any(self.formats[c] is not None for c in _OPERANDS)
        self.delayed = _mixprec.DelayedScales(recipe_json) if recipe.get("fp8_scaling") else None
        self.fp8_max: Dict[str, float] = {}
        for c, i in info.items():
            if self.delayed is not None and "block_cols" not in i:
                if i["exponent_bits"] + i["mantissa_bits"] < 8:
                    self.fp8_max[c] = i["max"]


def _split_keep(recipe: Any, keep: Optional[Mapping[str, Any]]):
    """The recipe's spec without its ``keep`` (for the library's parser) and the keep map:
    pattern -> (the recipe as given: a preset name or the full recipe dict, its
    :class:`_Precision`), in order; ``keep`` given both ways is a ValueError."""
    spec = recipe
    if isinstance(recipe, str) and recipe.lstrip().startswith("{"):
        try:
            spec = json.loads(recipe)
        except json.JSONDecodeError:
            return recipe, {}  # the library's parser names the error
    if isinstance(spec, Mapping) and "keep" in spec:
        if keep is not None:
            raise ValueError(
                "keep: given both as keep=... and as the recipe's \"keep\"; give one"
            )
        spec = dict(spec)
        keep = spec.pop("keep")
    if not isinstance(spec, str):
        spec = json.dumps(dict(spec))
    if keep is None:
        return spec, {}
    if not isinstance(keep, Mapping):
        raise TypeError(
            f"keep: expected a dict of layer patterns to recipes, got {type(keep).__name__}"
        )
    parsed = {}
    for pattern, given in keep.items():
        if not isinstance(pattern, str):
            raise TypeError(f"keep: a pattern must be a string, got {pattern!r}")
        if isinstance(given, Mapping) and "keep" in given:
            raise ValueError(f"keep[{pattern!r}]: a kept recipe cannot have a keep of its own")
        if not isinstance(given, (str, Mapping)):
            raise TypeError(
                f"keep[{pattern!r}]: expected a preset name or a recipe dict, got "
                f"{type(given).__name__}"
            )
        try:
            given_json = given if isinstance(given, str) else json.dumps(dict(given))
            text = _mixprec.recipe_json(given_json)
        except ValueError as e:
            raise ValueError(f"keep[{pattern!r}]: {e}") from None
        parsed[pattern] = (given if isinstance(given, str) else json.loads(text), _Precision(text))
    return spec, parsed


def _layers_kept(model: torch.nn.Module, keep: Dict[str, Tuple[Any, "_Precision"]]):
    """Per module (by qualified name, ``model`` for the root) that a pattern of ``keep``
    matches, the precision of the first that does; a pattern that matches none is a
    ValueError naming it."""
    names = [name or "model" for name, _ in model.named_modules()]
    kept: Dict[str, _Precision] = {}
    for pattern, (_, precision) in keep.items():
        matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            some = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise ValueError(f"keep: pattern {pattern!r} matches no layer of the model ({some})")
        for n in matched:
            kept.setdefault(n, precision)
    return kept


def _unscale(params: List[torch.Tensor], scale: float) -> bool:
    """Divides the parameters' gradients by ``scale`` (times ``1 / scale`` in float32, as
    GradScaler unscales) and says whether any holds an inf or NaN: one fused call per device
    and dtype, GradScaler's own."""
    groups: Dict[Tuple[Any, Any], List[torch.Tensor]] = {}
    for p in params:
        groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    found = []
    for (device, _), grads in groups.items():
        flag = torch.zeros(1, device=device)
        inv = torch.full((1,), 1.0 / scale, dtype=torch.float32, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, flag, inv)
        found.append(flag)
    return bool(found) and bool(torch.cat([f.cpu() for f in found]).any())


def _format_info(name: str) -> Dict[str, Any]:
    return json.loads(_mixprec.formats_json([name]))[0]


def _map_tensors(value: Any, f: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``f`` applied to every floating-point tensor in ``value``: a tensor, or tuples (named
    too), lists and dicts of them, as LSTMs return ``(output, (h, c))`` and Hugging Face models
    a ``ModelOutput`` (a dict, whose copy keeps its class)."""
    if isinstance(value, torch.Tensor):
        return f(value) if value.is_floating_point() else value
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_map_tensors(v, f) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, f) for v in value)
    if isinstance(value, dict):
        out = copy.copy(value)
        for k, v in value.items():
            out[k] = _map_tensors(v, f)
        return out
    return value


__all__ = ["quantize", "Simulate"]
