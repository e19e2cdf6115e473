"""Records a PyTorch training loop as a mixprec run directory, for ``mixprec report``.

::

    from mixprec.torch import Recorder

    device = "cuda" if torch.cuda.is_available() else "cpu"  # fp16 autocast runs on the CPU too
    model.to(device)                                         # before making opt
    scaler = torch.amp.GradScaler(device)
    with Recorder(model, out="runs/x", format="fp16", every=100, optimizer=opt,
                  scaler=scaler) as rec:
        for x, y in data:
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            rec.step(loss)   # after scaler.step (before or after scaler.update)
            scaler.update()

Every step writes a line of ``metrics.jsonl``: the loss, the GradScaler's scale (the one this
step's backward used), whether it found an inf or NaN and so skipped the step, and ``grad_amax``:
what decides whether the step overflows at another scale, the largest magnitude of the gradients
the backward pass stored in the loop's precision, unscaled. Hooks on the autograd graph's
nodes, from the start of each forward pass of the model (with gradients on) to the optimizer's
step (or the scaler's update, or ``rec.step``), read what the backward passes that reach the
model store narrower than FP32 (the dtype the graph's input metadata names, so autocast inside a
framework's wrapper of the forward counts whatever dtype its outputs are cast back to): each gradient a node passes on to another, each that a node or a weight
receives summed from several, and for a cast into a narrow format the FP32 values cast (before
rounding); of each, its largest magnitude. These are the values proportional to the loss scale:
halving the loss halves ``grad_amax`` (``python/tests/test_zoo_recorder.py``, on GPT-2, BERT,
ResNet-18 and ViT). The values a node's formula forms inside it (gelu_new's 3x^2 of its saved
input, in GPT-2) are not gradients and do not count; nor do FP32 sums that the loop never stores
narrower (the weights' ``.grad``). Under a power-of-two change of scale a value stored finite
decides overflow exactly as the value before rounding does. Where an inf or NaN formed in the
backward pass (the loss finite), the gradients it reached are unknown at other scales:
``grad_amax`` is then the largest of the values known (a tensor holding an inf or NaN says
nothing of its others), a lower bound, and the step is marked ``grad_amax_bounded``
(``summary.json`` counts them as ``bounded_steps``). But where a node passed on an inf or NaN
from finite gradients, the hook calls it again on zero gradients: an inf or NaN again means a
value inside its formula overflowed whatever the scale (gelu_new's 3x^2 past 65504 in fp16),
and the step names the node under ``intermediate_overflow`` and overflows at every scale (not
bounded); the report says no scale avoids it. The hooks cost, per forward pass, a look at
each node created (in one Python loop once the model's forward pass returns), and per node that
passes on or sums a narrow gradient a hook of the binding's, which reads each such gradient's
largest magnitude on the host (on the CPU one pass over its bits where they lie;
``reports/perf/python.md``).
A loop whose first step stores no narrow gradient (FP32 throughout) runs without them from then
on (unless autocast or a narrow weight shows before a forward pass), and ``grad_amax`` is the largest magnitude of the weights' gradients, one
reduction per step (an inf or NaN among them marks the step bounded): what overflows there is
FP32, at 2^128, far above any of its gradients. To judge a narrow format's overflow, record the
loop in it (autocast). The recorder warns, once each, where the loop stores no narrow gradient
though ``format`` is narrow, where it stores another dtype than ``format``'s (Lightning's
``16-mixed`` on the CPU runs in bfloat16), and where a step ran more backward passes through the
model than the GradScaler scaled losses (an FP32 backward for a dump, done inside the loop,
mixes into that step's ``grad_amax`` and capture). The gradients are taken at the optimizer's
step (or the scaler's update), so frameworks that zero them before calling back lose nothing;
``HFCallback`` and ``LightningCallback`` (``mixprec.torch``) drive a recorder from the Hugging
Face and Lightning trainers. A model compiled by ``torch.compile`` is
refused (when the recorder is made, or at its first forward pass): its fused backward hides the
gradients, and its graph the capture hooks.
On capture steps (the first, then every ``every``) hooks see the weights the
forward reads, every leaf module's output (activations, forward hooks) and its gradient
(activation gradients, hooks on the outputs), every parameter's gradient once accumulated
(weight gradients, post-accumulate-grad hooks) and the optimizer's state, and a line of
``captures.jsonl`` holds their log2 histograms (gradients scaled by the loss scale, as the
backward pass held them) and the counts of rounding them into ``format``, formed in Rust: where
CPU tensors lie, and from one copy to the host (in the tensor's dtype) of tensors on other
devices, on capture steps only.

The directory is the one ``mixprec train`` writes (written by the same Rust code), its config a
recorded run's (``mixprec::run::RecordedConfig``): the precision the loop trained in as a
recipe (``format`` for the weights the forward reads, the activations and both gradients, FP32
master weights and optimizer state, as ``torch.autocast`` trains) whose loss scaling is the
GradScaler's own policy: the ``gradscaler`` preset with the scaler's initial scale, growth and
backoff factors and growth interval (``none`` without a scaler, or with it disabled). ``mixprec
report DIR --out PAGE`` renders it, finished or not; ``mixprec replay DIR --policy run`` replays
the scaler's policy over it. A loop that raises leaves an unfinished run
(its ``INCOMPLETE`` marker, and every step recorded so far), which ``report`` reads too; one
that raises before its first step (while setting up) leaves nothing: the directories the
recorder made are removed, and a directory that existed (empty) stays, empty.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import time
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils._pytree import tree_leaves

from . import _mixprec, _ranks

from ._simulate import _COMPILED as _COMPILED_TEMPLATE
from ._simulate import _PARTS, Simulate, _check_model, _is_grad_scaler, _policy, _under_compile
from ._torch_round import amax

__all__ = ["Recorder"]

#: Floating dtypes narrower than FP32: the values a mixed-precision loop stores in them decide
#: its overflow.
_NARROW = frozenset(
    getattr(torch, name)
    for name in ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                 "float8_e5m2fnuz")
    if hasattr(torch, name)
)
#: Autograd nodes whose gradient is their incoming gradient cast into the input's dtype (the
#: backward of ``.to(dtype)`` and of ``copy_``): the incoming gradient is the value before
#: rounding.
_CAST_NODES = {"ToCopyBackward0", "CopyBackwards"}
#: Autograd nodes that pass on the values they receive, moved (a view, a transpose, a slice
#: padded with zeros, a clone), in the same dtype: their largest magnitude is that of the
#: gradient they received, which the node that passed it on (or the sum it is) counted.
_SAME_VALUES = {
    "AliasBackward0", "CloneBackward0", "PermuteBackward0",
    "ReshapeAliasBackward0", "SelectBackward0", "SliceBackward0", "SplitBackward0",
    "SplitWithSizesBackward0", "SqueezeBackward0", "SqueezeBackward1", "SqueezeBackward2",
    "TBackward0", "TransposeBackward0", "TransposeBackward1", "UnbindBackward0",
    "UnsafeViewBackward0", "UnsqueezeBackward0", "ViewBackward0",
}
#: What the recorder says of a model compiled by torch.compile.
_RECORDER_SEES = (
    "the node hooks grad_amax is taken from (its fused backward hides the gradients) and the "
    "capture hooks"
)
_COMPILED = _COMPILED_TEMPLATE.format(who="Recorder", what=_RECORDER_SEES)


def _finite(x: float) -> Optional[float]:
    """``x``, or None (JSON ``null``, as the run directory writes values that are not finite)."""
    return x if math.isfinite(x) else None


def _format(name: str) -> Dict[str, Any]:
    return json.loads(_mixprec.formats_json([name]))[0]


def _element_format(name: Any) -> Dict[str, Any]:
    """The properties of the element format ``name``: what a recorded run's recipe stores each
    tensor class in, and what its captures count the rounding into. A block format is refused
    with a ValueError naming ``format`` and the formats accepted (the library's list)."""
    if not isinstance(name, str):
        raise TypeError(f"format: expected a str, got {type(name).__name__}")
    try:
        _mixprec.Capture(name, [])  # the element formats' parser, as the run's recipe's
    except ValueError as e:
        try:
            block = _format(name)
        except ValueError:
            raise ValueError(f"format: {e}") from None
        expected = str(e).split(": expected ", 1)[-1]
        raise ValueError(
            f"format: {name!r} is a block format ({block['element']} values sharing a scale per "
            f"block), which a recorded run's recipe cannot store; expected {expected} (to "
            f"train in a block format, record a Simulate: "
            f"Recorder(model, out, simulate=Simulate(model, 'mxfp8', optimizer=opt)))"
        ) from None
    return _format(name)




class _BackwardAmax:
    """Hooks on the autograd nodes of the recorded model's backward pass: from the start of a
    forward pass of the model (with gradients on) to the optimizer's step or
    :meth:`Recorder.step`, every node created is looked at (a node-creation hook), and so is
    every node of the graph a forward pass returns when the hook was not on yet (a walk from its
    outputs' gradient functions). A node is hooked when it passes on a narrow gradient along an
    edge of the graph (its dtype is the one the receiving node's input metadata names; for a
    cast into a narrow dtype, the values cast count too) or receives one as the sum of several (a
    tensor used more than once: what a leaf's ``.grad`` accumulates, or the input of a node
    that several nodes feed). Nodes that only move the values they receive (views, transposes,
    slices: ``_SAME_VALUES``) add nothing to the largest magnitude and are not hooked for what
    they pass on. Each hook keeps, with the backward pass's id, the largest magnitude (inf or
    NaN when one is) of each such gradient. The values a node's formula forms inside it
    are not gradients and are not counted; nor is the seed of a backward pass (the ones it
    starts from, not scaled). But when a node passes on an inf or NaN though every gradient it
    received is finite, the hook calls the node again on zero gradients: when an inf or NaN
    comes out again, a value inside its formula overflowed whatever the scale (an
    *intermediate overflow*), and the node's type is kept. Only the backward passes that reach
    the recorded model (a hook on its outputs says which) count. Each hook reads its magnitudes
    on the host (on CUDA a synchronization per hooked node)."""

    def __init__(self) -> None:
        #: Per backward pass (its id) and hooked node: the largest finite magnitude of the
        #: gradients read, and whether one held an inf or NaN; kept by the binding's hooks.
        self.reader = _mixprec.GradAmax(torch.Tensor, torch.strided, torch.float32,
                                        torch.float16, torch.bfloat16, amax,
                                        torch._C._current_graph_task_id)
        self.intermediate: List[Tuple[int, str]] = []
        self.ours: set = set()
        #: The look at each node (the binding's): per (node, input), the number of nodes that
        #: feed it; per hooked node, the edges whose gradients count and the inputs that
        #: receive sums; the hooks' handles.
        self.graph = _mixprec.GraphLook(self.reader, list(_NARROW), sorted(_SAME_VALUES),
                                        sorted(_CAST_NODES))
        #: The node-creation hook pushed: None, ``"collect"`` (a forward pass of the model runs:
        #: the nodes it creates are kept, a C call each, and looked at once it returns, in one
        #: loop: a Python call per node inside the forward pass cost GPT-2's 0.9 ms a step more)
        #: or ``"look"`` (each node looked at as it is created).
        self.creating: Optional[str] = None
        self.created: List[Any] = []
        #: Whether the module each node is created in is wanted (while steps overflow): nodes
        #: are then looked at as they are created.
        self.per_module = False
        #: Whether a node of a torch.compile'd graph was seen.
        self.compiled = False
        #: The narrow dtypes of the gradients the graphs looked at pass (what the loop stores,
        #: whatever its outputs' dtypes say) since the last :meth:`take`.
        self.dtypes: set = set()
        #: The leaf module whose forward pass is running (its name), and the module each node
        #: looked at was created in; per backward pass, the first node that passed on an inf
        #: or NaN from finite gradients: (node type, module).
        self.module: Optional[str] = None
        self.module_of: Dict[Any, Optional[str]] = {}
        self.formed: Dict[int, Tuple[str, Optional[str]]] = {}

    @property
    def on(self) -> bool:
        """Whether a node is hooked, or the node-creation hook is on."""
        return self.graph.hooked > 0 or self.creating is not None

    def hook(self, node) -> None:
        """The node-creation hook: looks at ``node`` as it is created."""
        self.look((node,))

    def look(self, nodes) -> None:
        """Looks at each of ``nodes`` (each once: nodes created, or a walk's): counts the edges
        it feeds, and hooks it, or the nodes it feeds, where a narrow gradient passes
        (``_mixprec.GraphLook.look``)."""
        if self.graph.look(nodes, self.module, self.module_of, self.dtypes, self._nonfinite,
                           self._cast_nonfinite):
            self.compiled = True

    def _nonfinite(self, node, grad_outputs, passed) -> None:
        """A hooked node passed on an inf or NaN along an edge of ``passed``: where every
        gradient it received is finite, it formed there (the first of the pass is where its
        overflow began), and maybe inside its formula whatever the scale."""
        if self._cast_nonfinite(node, grad_outputs, passed) and \
                _overflows_inside(node, grad_outputs, passed):
            self.intermediate.append((torch._C._current_graph_task_id(), type(node).__name__))

    def _cast_nonfinite(self, node, grad_outputs, _passed) -> bool:
        """A hooked cast (or any node) passed on an inf or NaN: where every gradient it received
        is finite, it formed there (a cast: rounding into a narrow dtype overflowed), kept as
        the pass's first where none came before; whether it formed there."""
        if not _all_received_finite(grad_outputs):
            return False
        task = torch._C._current_graph_task_id()
        self.formed.setdefault(task, (type(node).__name__, self.module_of.get(node)))
        return True

    def start(self, forward: bool = False) -> None:
        """Looks at every node created from now on (from the start of a forward pass of the
        recorded model with gradients on, in a loop that stores narrow tensors): ``forward``,
        those the forward pass creates once it returns (:meth:`look_created`), unless each
        node's module is wanted; the others as they are created."""
        if not torch.is_grad_enabled():
            return
        mode = "collect" if forward and not self.per_module else "look"
        if self.creating == mode:
            return
        if self.creating:
            torch._C._autograd._pop_node_creation_hook()
            self._look_collected()
        torch._C._autograd._push_node_creation_hook(
            self.created.append if mode == "collect" else self.hook)
        self.creating = mode

    def look_created(self) -> None:
        """A forward pass of the model returned: looks at the nodes it created, and at each
        node created from now on as it is created."""
        if self.creating == "collect":
            self.start()

    def _look_collected(self) -> None:
        created, self.created = self.created, []
        self.look(created)

    def walk(self, roots) -> None:
        """Looks at the graph behind ``roots`` (a forward pass that ran with the hook off)."""
        stack, nodes, walked = list(roots), [], set()
        while stack:
            node = stack.pop()
            if node is not None and node not in walked:
                walked.add(node)
                nodes.append(node)
                stack.extend(f for f, _ in node.next_functions)
        self.look(nodes)

    def stop(self) -> None:
        """Removes every hook (the optimizer's step, :meth:`Recorder.step`)."""
        if self.creating:
            self.creating = None
            torch._C._autograd._pop_node_creation_hook()
        self.created = []
        self.graph.stop()
        self.module_of = {}

    def mark(self, _grad_outputs) -> None:
        """A hook on the recorded model's outputs: the backward pass running reaches it."""
        self.ours.add(torch._C._current_graph_task_id())

    def take(self) -> Tuple[Optional[float], bool, bool, List[str], int, Optional[Tuple]]:
        """Of the backward passes that reached the model since the last call: the largest
        finite magnitude of the narrow gradients (None when none was finite and nonzero),
        whether any held an inf or NaN, whether any was seen at all, the types of the nodes
        that overflowed inside (in the order seen, once each), how many backward passes there
        were, and where the first of them formed an inf or NaN (node type, module), if one
        did; then forgets them."""
        seen = [(m, bad) for task, m, bad in self.reader.take() if task in self.ours]
        inside = list(dict.fromkeys(n for task, n in self.intermediate if task in self.ours))
        passes = len(self.ours)
        formed = next((self.formed[t] for t in sorted(self.formed) if t in self.ours), None)
        self.intermediate, self.ours, self.formed = [], set(), {}
        if not seen:
            return None, False, False, inside, passes, formed
        # A tensor's magnitudes are known where its largest is finite (no inf, no NaN).
        largest = max(m for m, _ in seen)
        nonfinite = any(bad for _, bad in seen)
        return (largest if largest > 0 else None), nonfinite, True, inside, passes, formed


class _Callback:
    """What the trainers' callbacks (``HFCallback``, ``LightningCallback``) share: the
    recorder's settings, given when the callback is made, and the :class:`Recorder`, made and
    entered when training starts (its format and name from what the framework runs in) and left
    when it ends."""

    def __init__(self, out, every: int = 100, format: Optional[str] = None,
                 name: Optional[str] = None, flush_every: float = 2.0) -> None:
        self.out, self.every, self.format, self.name = out, every, format, name
        self.flush_every = flush_every
        self.recorder: Optional[Recorder] = None

    def _start(self, model, format: str, prefix: str, optimizer, scaler) -> None:
        format = self.format or format
        self.recorder = Recorder(
            model, self.out, format, self.every, optimizer=optimizer, scaler=scaler,
            name=self.name or f"{prefix}-{format}", flush_every=self.flush_every,
        )
        self.recorder.__enter__()

    def _finish(self, exception: Optional[BaseException] = None) -> None:
        if self.recorder is not None:
            kind = None if exception is None else type(exception)
            tb = None if exception is None else exception.__traceback__
            self.recorder.__exit__(kind, exception, tb)


#: The torch dtype of each element format a loop can store in.
_TORCH_DTYPES = {
    name: getattr(torch, dtype)
    for name, dtype in (("fp16", "float16"), ("bf16", "bfloat16"), ("fp8-e4m3", "float8_e4m3fn"),
                        ("fp8-e5m2", "float8_e5m2"))
    if hasattr(torch, dtype)
}


def _torch_optimizer(optimizer: Optional[Any]) -> Optional[Any]:
    """The torch optimizer inside a framework's wrapper (accelerate's ``AcceleratedOptimizer``
    keeps it as ``optimizer``, Lightning's ``LightningOptimizer`` as ``_optimizer``), whose step
    hooks and state the recorder reads."""
    seen = []
    while optimizer is not None and not hasattr(optimizer, "_optimizer_step_pre_hooks"):
        seen.append(type(optimizer).__name__)
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if inner is None or len(seen) > 8:
            raise TypeError(
                f"optimizer: expected a torch.optim.Optimizer, or a wrapper holding one as "
                f".optimizer or ._optimizer, got {' -> '.join(seen)}"
            )
        optimizer = inner
    return optimizer


def _scaler_now(scaler: Any) -> Optional[Tuple[float, bool]]:
    """The scale a ``GradScaler`` used since its last update and whether it found an inf or
    NaN; None when it has not stepped since."""
    found = [
        v
        for state in scaler._per_optimizer_states.values()
        for v in state["found_inf_per_device"].values()
    ]
    if not found:
        return None
    return float(scaler.get_scale()), any(float(v) > 0 for v in found)


def _tensors(output: Any) -> List[torch.Tensor]:
    """The tensors in a module's output (a tensor, or tuples, lists, dicts and Hugging Face
    ``ModelOutput``s of them)."""
    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]


def _all_finite(t: torch.Tensor) -> Any:
    """Whether every value of the non-empty float tensor ``t`` is finite: a bool on the CPU
    (the binding's pass over its bits, mostly), else a 0-dim tensor on its device, read (a
    synchronization) only when needed."""
    if t.device.type == "cpu":
        return math.isfinite(amax(t))
    return torch.isfinite(t).all()


def _all_received_finite(grad_outputs) -> bool:
    """Whether every gradient a node received (its hook's ``grad_outputs``) is finite."""
    return all(g is None or bool(torch.isfinite(g).all()) for g in grad_outputs)


def _first_formed(forward, backward, loss_finite: bool) -> Optional[Dict[str, Any]]:
    """Where a step that overflowed first formed an inf or NaN, as a storage site: first, an
    activation a leaf module's forward pass returned (``forward``: per module run, its name,
    type and its outputs' finiteness; the backward only carried that on), or the loss (formed
    outside the modules); else an activation gradient that a node of the backward passed on
    (``backward``: the node's type and the module it was made in)."""
    for name, op, finite in forward:
        if not all(bool(f) for f in finite):
            return {"layer": name, "tensor": "activation", "op": op}  # a leaf, or the model
    if not loss_finite:
        return {"layer": "loss", "tensor": "activation", "op": "loss"}
    if backward is not None:
        return {"layer": backward[1] or "model", "tensor": "activation_grad", "op": backward[0]}
    return None


def _overflows_inside(node, grad_outputs, passed: List[int]) -> bool:
    """Whether ``node``, which passed on an inf or NaN along an edge of ``passed`` from finite
    gradients, formed it inside its formula whatever the gradients it received: the node,
    called again on zeros in their place, passes on an inf or NaN again (a formula linear in
    its gradient gives zeros unless a value formed from the saved tensors alone overflowed).
    False when the node cannot be called again (its saved tensors are gone)."""
    # The node's own outputs, before the engine sums them to its inputs' shapes (a broadcast
    # bias): where that sum overflows, the scale is the cause, and a sum of zeros is zero.
    try:
        again = node(*[None if g is None else torch.zeros_like(g) for g in grad_outputs])
    except RuntimeError:
        return False
    if isinstance(again, torch.Tensor):
        again = (again,)
    return any(
        again[i] is not None and not bool(torch.isfinite(again[i]).all()) for i in passed
    )


class Recorder:
    """Records a training loop into the run directory ``out``: created (``config.json`` and
    the ``INCOMPLETE`` marker) on entering the ``with`` block, or at the first :meth:`step` or
    :meth:`close` without one; checked when the recorder is made, which writes nothing.

    Args:
        model: the ``torch.nn.Module`` trained (a ``DistributedDataParallel`` is unwrapped).
        out: the run directory, new or empty (with ``ranks="each"``, rank ``r`` writes
            ``out/rank{r}``).
        format: the format the values are judged against (rounding counts, the report's zones
            and windows): ``fp16``, ``bf16``, ``fp8-e4m3``, ``fp8-e5m2`` or any element format
            of :func:`mixprec.formats` (not a block format: the run's recipe stores each tensor
            class in an element format; to train in MXFP8 or NVFP4, record a :class:`Simulate`);
            default ``fp16``, or with ``simulate`` the recipe's
            (:meth:`Simulate.judged_format`).
        every: capture every ``every`` steps (and the first); 0: never.
        optimizer: the optimizer, whose state is captured on capture steps (optional).
        scaler: the loop's ``torch.amp.GradScaler``, if it uses one: its policy goes into the
            run's config, and every step records its scale and whether it skipped the step.
        simulate: the :class:`Simulate` the loop trains under: the run's config records its
            recipe, every step its loss scale, overflow, skipped step and per-class rounding
            counts (call :meth:`step` after ``sim.step()``), and capture steps the values its
            storage points rounded, before rounding, with what rounding did to them.
        ranks: with ``torch.distributed`` initialised, ``"zero"`` (only rank 0 records; the
            others' calls do nothing), ``"each"`` (every rank records its own directory) or
            ``"merge"`` (every rank captures what it holds, and rank 0 writes one run, ``out``,
            whose captures are the exact merge of the ranks': FSDP2's shards of the weights,
            their gradients and the optimizer's state, DDP's copies once, the union of the
            ranks' activations and activation gradients; the loss is the mean over the ranks,
            ``grad_amax`` the largest; every rank must call :meth:`step` and :meth:`close`;
            see ``mixprec._ranks``). Under FSDP2 a rank's values are its shards, whichever
            ``ranks``.
        name: the run's name in reports (default ``pytorch-{format}``).
        flush_every: the longest, in seconds, a step's line waits in memory before it reaches
            ``metrics.jsonl`` (capture steps, :meth:`flush`, :meth:`close` and an exception
            leaving the ``with`` block write everything at once).

    Raises:
        ValueError: a bad format (a block format included), ``every``, ``ranks`` or
            ``flush_every``, or an ``out`` that holds anything (the command line's message).
        TypeError: a ``model`` that is not a ``torch.nn.Module``, a ``scaler`` that is not a
            ``torch.amp.GradScaler``, a ``simulate`` that is not a :class:`Simulate`.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        out: "str | os.PathLike[str]",
        format: Optional[str] = None,
        every: int = 100,
        *,
        optimizer: Optional[torch.optim.Optimizer] = None,
        scaler: Optional[Any] = None,
        simulate: Optional[Simulate] = None,
        ranks: str = "zero",
        name: Optional[str] = None,
        flush_every: float = 2.0,
    ) -> None:
        _check_model(model, "Recorder", _RECORDER_SEES)
        if scaler is not None and not _is_grad_scaler(scaler):
            raise TypeError(
                "scaler: expected the loop's torch.amp.GradScaler, or None, got "
                f"{type(scaler).__name__}"
            )
        if simulate is not None and not isinstance(simulate, Simulate):
            raise TypeError(
                f"simulate: expected a mixprec.torch.Simulate, or None, got "
                f"{type(simulate).__name__}"
            )
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"every: expected a whole number of steps >= 0, got {every!r}")
        if ranks not in ("zero", "each", "merge"):
            raise ValueError(f"ranks: expected 'zero', 'each' or 'merge', got {ranks!r}")
        if simulate is not None and scaler is not None:
            raise ValueError(
                "scaler: with simulate=..., the loss scaling is the Simulate's (give it the "
                "GradScaler: Simulate(model, recipe, scaler=scaler))"
            )
        self.simulate = simulate
        if format is None:
            format = "fp16" if simulate is None else simulate.judged_format()
        self._format_info = _element_format(format)  # ValueError with the library's list
        self.format = format
        self.every = every
        self.name = name or (
            f"pytorch-{format}" if simulate is None else f"pytorch-{simulate.recipe['name']}"
        )
        if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)):
            model = model.module
        self.model = model
        self.optimizer = _torch_optimizer(optimizer)
        self.scaler = scaler
        rank, world = 0, 1
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        self.active = ranks in ("each", "merge") or rank == 0
        #: Merging the ranks' captures: weight gradients are taken at the end of the backward
        #: pass (after DDP's all-reduce), replicated DTensors counted once.
        self._merge = ranks == "merge" and world > 1
        self._end_of_backward = _ranks.EndOfBackward()
        path = pathlib.Path(out)
        if ranks == "each" and world > 1:
            path = path / f"rank{rank}"
        self.path = path
        self._leaves = [
            (n or "model", m) for n, m in model.named_modules() if not any(True for _ in m.children())
        ]
        self._layers = [n for n, _ in self._leaves]
        if simulate is not None and simulate.rounds("activation", "input"):
            self._layers.insert(0, "input")
        if simulate is not None and simulate.rounds("activation_grad", "loss"):
            self._layers.append("loss")
        self._param_layer = {}
        for n, p in model.named_parameters():
            self._param_layer[p] = n.rsplit(".", 1)[0] if "." in n else "model"
        self._hooks: List[Any] = []
        self._capture: Optional[Any] = None
        self._step = 0
        self._start = time.monotonic()
        self._sim_steps = 0 if simulate is None else simulate.steps
        self._writer = None
        self._watch = []
        #: Whether the loop stores narrow gradients (its graphs' input metadata say so); None
        #: before its first step. A loop found FP32 at its first step is looked at again only
        #: where autocast or a narrow weight says so before a forward pass.
        self._loop_narrow: Optional[bool] = None
        #: A forward pass (gradients on) ran since the backward's results were last taken, and
        #: what was taken (at the first of the optimizer's step, the scaler's update and
        #: :meth:`step`, while the gradients are still there).
        self._fresh = False
        self._taken: Optional[Tuple[Any, ...]] = None
        #: The scaler's state kept by its wrapped ``update`` (scale, found inf), and whether
        #: :meth:`step` read it live before the update, which then keeps nothing; the losses
        #: it scaled since the last step.
        self._scaler_state: Optional[Tuple[float, bool]] = None
        self._live_read = False
        self._scaled = 0
        self._warned: set = set()
        #: Per leaf module run forward (gradients on) since the last take: its name, type and
        #: whether each of its outputs was finite (tensors, read only when the step overflowed).
        self._forward_checks: List[Tuple[str, str, Any]] = []
        if not self.active:
            return
        if scaler is not None and not scaler.is_enabled():
            warnings.warn(
                "Recorder: the GradScaler is disabled (torch.amp.GradScaler('cuda') without "
                "CUDA disables itself; use the device the model runs on): the run records no "
                "loss scaling",
                stacklevel=2,
            )
        low = self._format_info["name"]
        recipe = {
            "name": self.name,
            "weights": low,
            "activations": low,
            "activation_grads": low,
            "weight_grads": low,
            "optimizer_state": "fp32",
            "master_weights": "fp32",
            "loss_scaling": _policy(scaler),
        }
        if simulate is not None:
            recipe = dict(simulate.recipe, name=self.name)
        config = {
            "source": "pytorch",
            "recipe": recipe,
            "format": format,
            "capture_every": every,
            "model": type(model).__name__,
            "layers": self._layers,
            "parameters": sum(p.numel() for p in model.parameters()),
            "optimizer": type(self.optimizer).__name__ if optimizer is not None else None,
            "torch": torch.__version__,
            "rank": rank,
            "world_size": world,
        }
        if self._merge:
            self._writer = _ranks.MergedWriter(
                str(path), json.dumps(config), float(flush_every), list(model.parameters()))
        else:
            self._writer = _mixprec.RunWriter(str(path), json.dumps(config), float(flush_every))
        self._backward = _BackwardAmax()
        self._watch: List[Any] = []
        if simulate is None:
            self._watch_backward()
        if scaler is not None and scaler.is_enabled():
            self._wrap_scaler(scaler)
        if every > 0:
            self._begin_capture()

    # -- capture ---------------------------------------------------------------------------

    def _add(self, layer: str, tensor: str, t: torch.Tensor, part: Optional[str] = None) -> None:
        """Adds ``t``'s values to the site (layer, tensor, part) of the current capture."""
        t = _ranks.local(t.detach(), self._merge)  # a DTensor's shard
        if t is None or not (t.is_floating_point() and t.numel()):
            return
        sim = self.simulate
        if sim is not None:
            if sim.rounds(tensor, layer):
                return  # the Simulate captures what it rounds, before rounding
            # Stored in FP32 by the recipe: nothing is rounded.
            values = t.float().contiguous().cpu().numpy()
            self._capture.add_stored(layer, tensor, part, values, (0, 0, 0, 0, 0))
            return
        if t.device.type != "cpu":
            # One copy to the host in the tensor's own dtype, on capture steps only: the
            # histogram and the rounding counts are the library's, formed where the copy lies.
            t = t.cpu()
        if t.dtype in (torch.float32, torch.float64):
            self._capture.add(layer, tensor, part, t.numpy(), "float")
        elif t.dtype in (torch.float16, torch.bfloat16):
            kind = "f16" if t.dtype == torch.float16 else "bf16"
            self._capture.add(layer, tensor, part, t.view(torch.int16).numpy(), kind)
        else:
            self._capture.add(layer, tensor, part, t.float().numpy(), "float")

    def _begin_capture(self) -> None:
        self._capture = _mixprec.Capture(self.format, self._layers)
        if self.simulate is not None:
            self.simulate.capture = self._capture
        with torch.no_grad():
            for p, layer in self._param_layer.items():
                self._add(layer, "weight", p)
        for name, module in self._leaves:
            self._hooks.append(module.register_forward_hook(self._forward_hook(name)))
        for p, layer in self._param_layer.items():
            if p.requires_grad:
                self._hooks.append(p.register_post_accumulate_grad_hook(self._grad_hook(layer)))

    def _forward_hook(self, name: str):
        def hook(module, inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) and output else output
            if not isinstance(out, torch.Tensor):
                return
            self._add(name, "activation", out)
            if out.requires_grad:
                out.register_hook(lambda g: self._add(name, "activation_grad", g))

        return hook

    def _grad_hook(self, layer: str):
        def hook(p):
            if self._merge:
                # Once DDP's all-reduce has written the average.
                self._end_of_backward.defer(lambda: hook_now(p))
            else:
                hook_now(p)

        def hook_now(p):
            if p.grad is not None and self._capture is not None:
                self._add(layer, "weight_grad", p.grad)

        return hook

    def _end_capture(self):
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.optimizer is not None:
            with torch.no_grad():
                for p, state in self.optimizer.state.items():
                    layer = self._param_layer.get(p)
                    if layer is None:
                        continue
                    for key, value in state.items():
                        if isinstance(value, torch.Tensor) and value.dim() > 0:
                            self._add(layer, "optimizer_state", value, _PARTS.get(key, key))
        capture, self._capture = self._capture, None
        if self.simulate is not None:
            self.simulate.capture = None
        return capture

    # -- steps -----------------------------------------------------------------------------

    def _grad_amax(self) -> Tuple[Optional[float], bool]:
        """The largest finite magnitude of the parameters' (unscaled) gradients, and whether
        one was inf or NaN."""
        grads = [_ranks.local(p.grad) for p in self._param_layer if p.grad is not None]
        if not grads:
            return None, False
        # One concatenation per device and dtype, then one reduction each: on the CPU a few
        # times faster than torch._foreach_norm(grads, inf) for a model's few dozen tensors.
        groups: Dict[Tuple[Any, Any], List[torch.Tensor]] = {}
        for g in grads:
            groups.setdefault((g.device, g.dtype), []).append(g.reshape(-1))
        amaxes = [torch.cat(gs).abs().max().to(torch.float64).cpu() for gs in groups.values()]
        norms = torch.stack(amaxes)
        amax = float(norms.max())
        if math.isfinite(amax):
            return (amax if amax > 0 else None), False
        finite = [g[torch.isfinite(g)] for g in grads]
        amax = max((float(g.abs().max()) for g in finite if g.numel()), default=0.0)
        return (amax if amax > 0 else None), True

    def step(self, loss: Any, scaler: Optional[Any] = None) -> None:
        """Records one training step; call once per optimizer step.

        With a ``torch.amp.GradScaler`` (given to the constructor), call it after
        ``scaler.step(optimizer)``, before or after ``scaler.update()``: the recorder wraps the
        scaler's ``update``, which keeps the scale this step's backward used and whether it found
        an inf or NaN (and so skipped the step) before it changes them. The gradients are read at
        the optimizer's step (or the scaler's update), so a framework that zeroes them before
        calling back still records them.

        Args:
            loss: the step's loss (unscaled; a tensor or a number).
            scaler: the constructor's ``scaler`` again, or nothing.

        Raises:
            ValueError: a ``scaler`` that is not the constructor's (whose policy the run's
                config records).
            RuntimeError: the scaler has not stepped since the last :meth:`step` (``rec.step``
                called before ``scaler.step``).
        """
        if scaler is not None and scaler is not self.scaler:
            raise ValueError(
                "scaler: not the GradScaler given to Recorder(..., scaler=scaler), whose policy "
                "the run's config records; pass the loop's scaler to the constructor"
            )
        scaler = self.scaler
        if not self.active:
            return
        self._step += 1
        step = self._step
        loss = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        scale, found_inf = 1.0, False
        scaled = scaler is not None and scaler.is_enabled()
        if scaled:
            state = _scaler_now(scaler)
            if state is not None:
                self._live_read = True  # the update that follows keeps nothing
                self._scaler_state = None
            else:
                state, self._scaler_state = self._scaler_state, None
            if state is None:
                raise RuntimeError(
                    "rec.step(loss, scaler=scaler): the scaler has not stepped since the last "
                    "rec.step; call rec.step after scaler.step(optimizer)"
                )
            scale, found_inf = state
        counts: Dict[str, Any] = {}
        sim = self.simulate
        if sim is not None:
            if sim.steps != self._sim_steps + 1:
                raise RuntimeError(
                    "rec.step(loss): call it once after each sim.step() (the Simulate's step "
                    "says what the step's loss scale, overflow and rounding were)"
                )
            self._sim_steps = sim.steps
            last = sim.last
            scale, found_inf, counts = last["loss_scale"], last["overflow"], last["counts"]
        capture = self._end_capture() if self._capture is not None else None
        amax, bounded, inside = None, False, []
        nonfinite = False
        if sim is not None:
            # Before rounding, as the storage points saw them: the values the recipe stores.
            amax, bounded = last["grad_amax"], last["grad_amax_bounded"]
            if not (sim.rounds("activation_grad") or sim.rounds("weight_grad")):
                amax, bounded = self._grad_amax()
        else:
            if self._taken is None:
                self._fresh = True  # no forward pass seen since the last step: take anyway
                self._take()
            (amax, bounded, seen, inside, passes, dtypes, grads, formed), self._taken = \
                self._taken, None
            if amax is not None:
                amax /= scale
            if not seen:
                # No backward pass seen, or none narrow: the weights' gradients, as FP32 holds
                # them.
                amax, bounded = grads
            if not scaled:
                nonfinite = grads[1]
            self._judge_loop(step, dtypes, passes, scaled)
        overflow = found_inf or nonfinite
        skipped = found_inf if sim is None else last["skipped"]
        record = {
            "step": step,
            "loss": _finite(loss),
            "loss_scale": scale,
            "overflow": overflow,
            "skipped": skipped,
            "updates_lost": None,
            "grad_amax": amax,
            # An inf or NaN hid later gradients; a non-finite loss, or a value inside a node's
            # formula that overflows whatever its gradient, overflows at every scale.
            "grad_amax_bounded": bool(bounded and math.isfinite(loss) and not inside),
            "counts": counts,
        }
        if inside:
            record["intermediate_overflow"] = inside
        if sim is None and (overflow or not math.isfinite(loss)):
            site = _first_formed(*formed, math.isfinite(loss))
            if site is not None:
                record["first_nonfinite"] = site
        if sim is None:
            self._localize(overflow or not math.isfinite(loss))
        self._writer.step(json.dumps(record, allow_nan=False), capture)
        if self.every > 0 and (step + 1) % self.every == 0:
            self._begin_capture()

    def _localize(self, on: bool) -> None:
        """Hooks every leaf module (on) or none (off) for where a step's inf or NaN formed."""
        if on and not self._localizing:
            for module, enter, leave in self._localizers:
                self._localizing += [module.register_forward_pre_hook(enter),
                                     module.register_forward_hook(leave)]
        elif not on:
            for h in self._localizing:
                h.remove()
            self._localizing = []
        self._backward.per_module = on

    def _take(self) -> None:
        """Takes what the backward passes since the last forward pass left (the node hooks'
        magnitudes, and the weights' gradients where those are needed), once per step: at the
        first of the optimizer's step, the scaler's update and :meth:`step`, while the
        gradients are still there (frameworks zero them before a callback's step end)."""
        if not self._fresh or self.simulate is not None:
            return
        self._fresh = False
        backward = self._backward
        backward.stop()
        amax, bounded, seen, inside, passes, formed = backward.take()
        dtypes, backward.dtypes = backward.dtypes, set()
        scaled = self.scaler is not None and self.scaler.is_enabled()
        grads = self._grad_amax() if not (seen and scaled) else (None, False)
        formed = (self._forward_checks, formed)
        self._forward_checks = []
        self._taken = (amax, bounded, seen, inside, passes, dtypes, grads, formed)

    def _judge_loop(self, step: int, dtypes: set, passes: int, scaled: bool) -> None:
        """What the step's graphs say of the loop: whether it stores narrow gradients at all
        (decided at the first step), in the recorded format's dtype, and (with a scaler) in as
        many backward passes as the scaler scaled losses; each warned of once."""
        if self._loop_narrow is None or dtypes:
            self._loop_narrow = bool(dtypes)
        if not dtypes:
            self._warn_fp32()
        name = self._format_info["name"]
        want = _TORCH_DTYPES.get(name)
        if dtypes and want is not None and want not in dtypes:
            seen = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
            self._warn_once(
                "dtype",
                f"Recorder: the loop stores its gradients in {seen}, yet the run {self.name!r} "
                f"is recorded as trained in {name}: its counts, windows and advice judge {name}; "
                f"record it with the format it runs in",
            )
        if scaled and passes > self._scaled:
            self._warn_once(
                "passes",
                f"Recorder: step {step} ran {passes} backward passes through the model, but the "
                f"GradScaler scaled {self._scaled} loss(es): a backward pass at another scale (an "
                f"FP32 dump's?) mixed its gradients into the step's grad_amax and capture; run "
                f"it outside the recorded loop",
            )
        self._scaled = 0

    def _warn_once(self, key: str, message: str, stacklevel: int = 4) -> None:
        """Warns of ``key`` once, pointing at the loop's call of :meth:`step` (``stacklevel``
        frames up: this, its caller, :meth:`_judge_loop`, :meth:`step`)."""
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=stacklevel)

    def _wrap_scaler(self, scaler: Any) -> None:
        """Wraps the scaler instance's ``scale`` (counting the losses it scales) and ``update``
        (keeping, before it runs, the scale this step used and whether it found an inf or NaN),
        so that :meth:`step` may come after the update: accelerate and Lightning call
        ``scaler.step`` and ``scaler.update`` back to back."""
        scale, update = scaler.scale, scaler.update

        def scaled(outputs):
            self._scaled += 1
            return scale(outputs)

        def updated(*args, **kwargs):
            self._take()
            if self._live_read:
                self._live_read = False
            else:
                self._scaler_state = _scaler_now(scaler)
            return update(*args, **kwargs)

        scaler.scale, scaler.update = scaled, updated
        self._unwrap_scaler = lambda: [
            scaler.__dict__.pop(k, None) for k, f in (("scale", scaled), ("update", updated))
            if scaler.__dict__.get(k) is f
        ]

    def close(self, metric: Optional[Tuple[str, float]] = None) -> None:
        """Finishes the run: writes ``summary.json`` and removes the ``INCOMPLETE`` marker.

        Args:
            metric: ``(name, value)`` of the trained model's evaluation, for the summary;
                default: the mean loss of the last (up to 20) steps, named
                ``mean_loss_last_20_steps``.
        """
        if not self.active or not self._writer.open:
            return
        self._release()
        # The summary's counts, final loss and divergence come from what the writer tallied
        # of the steps, by the same Rust code as `mixprec train`'s.
        weights_finite = all(bool(torch.isfinite(_ranks.local(p)).all())
                             for p in self.model.parameters())
        # Which weights' products the Simulate cast: the report names any left in FP32.
        coverage = None if self.simulate is None else self.simulate.coverage
        if coverage is not None:
            # The run's coverage has no field for the weights a keep leaves uncast on purpose:
            # the config's recipe names the layers kept.
            coverage.pop("kept", None)
        self._writer.finish(
            self.name,
            sum(p.numel() for p in self.model.parameters()),
            weights_finite,
            time.monotonic() - self._start,
            None if metric is None else (str(metric[0]), float(metric[1])),
            None if coverage is None else json.dumps(coverage),
        )

    def flush(self) -> None:
        """Writes the steps held in memory to the run directory (they reach it within 2 s, and
        at every capture step, anyway)."""
        if self.active and self._writer.open:
            self._writer.flush()

    def __enter__(self) -> "Recorder":
        # The run directory is created here (or, used without ``with``, at the first step):
        # a recorder made and never used leaves nothing behind.
        if self.active:
            self._writer.create()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        elif self.active and self._writer.open:
            self._release()
            if self._step == 0:
                # A loop that failed while setting up: nothing to report, nothing left behind.
                self._writer.discard()
            else:
                # An unfinished run: every step so far on disk, the marker kept.
                self._writer.flush()

    def _release(self) -> None:
        """Removes the hooks and the scaler's wrappers."""
        if self.simulate is None:
            self._localize(False)
        for h in self._hooks + self._watch:
            h.remove()
        self._hooks, self._watch = [], []
        self._backward.stop()
        if self.scaler is not None and self.scaler.is_enabled():
            self._unwrap_scaler()

    def _watch_backward(self) -> None:
        """Hooks on the model: the start of a forward pass (gradients on) in a loop that stores
        narrow tensors (:meth:`_narrow_before`) turns the node hooks on; its end hooks each of
        the outputs' gradient functions to say which backward passes reach the model (and, where
        only the outputs say the loop stores narrow tensors, walks the graph behind them); the
        optimizer's step (its backward passes done) and :meth:`step` remove them, so that the
        optimizer and other work between steps run without them. In a loop that stores none they
        stay off: :meth:`step` takes the weights' gradients."""
        backward = self._backward

        def inputs(module, args):
            if _under_compile(module):
                raise RuntimeError(_COMPILED)
            self._forward_starts()

        def outputs(module, args, output):
            if torch.compiler.is_compiling():
                raise RuntimeError(_COMPILED)
            if not torch.is_grad_enabled():
                return
            leaves = _tensors(output)
            roots = [t.grad_fn for t in leaves if t.grad_fn is not None]
            self._reaches(roots, self._narrow(leaves))
            check("model", module, leaves)
            if backward.compiled or any(type(n).__name__ == "CompiledFunctionBackward"
                                        for n in roots):
                raise RuntimeError(_COMPILED)

        def enter(name):
            def hook(module, args):
                backward.module = name

            return hook

        def check(name, module, leaves):
            # Whether each output is finite: on the CPU the binding's one pass over its bits;
            # elsewhere a reduction each, read only when a step overflowed.
            if torch.is_grad_enabled():
                finite = [_all_finite(t) for t in leaves if t.is_floating_point() and t.numel()]
                if finite:
                    self._forward_checks.append((name, type(module).__name__, finite))

        def leave(name):
            def hook(module, args, output):
                backward.module = None
                check(name, module, _tensors(output))

            return hook

        self._watch = [self.model.register_forward_pre_hook(inputs),
                       self.model.register_forward_hook(outputs)]
        # While steps overflow, each leaf module says which nodes it made and whether its
        # outputs were finite, so that the next overflowing step names where it began (a Python
        # call per module cost 4.6 ms of GPT-2's 18.5 ms CPU step: not paid by clean steps).
        self._localizers = [(m, enter(n), leave(n)) for n, m in self._leaves]
        self._localizing: List[Any] = []
        if self.optimizer is not None:
            self._watch.append(self.optimizer.register_step_pre_hook(lambda *_: self._take()))

    def _forward_starts(self) -> None:
        """A forward pass of the model begins: with gradients on, in a loop that stores narrow
        gradients (or not known yet, or autocast or a narrow weight says so now), the node hooks
        look at every node it creates."""
        if not torch.is_grad_enabled():
            return
        self._fresh = True
        if self._loop_narrow is not False or self._narrow_before():
            self._backward.start(forward=True)

    def _reaches(self, roots, narrow: bool) -> None:
        """The graph behind ``roots`` (a forward pass's outputs, or a loss) belongs to the model:
        the backward passes through them are the model's. Where the node hooks were off and
        ``narrow`` says the loop stores narrow tensors, the graph is walked."""
        backward = self._backward
        self._fresh = True
        backward.look_created()
        if narrow and not backward.creating:
            backward.walk(roots)
            backward.start()
        if backward.creating:
            for node in roots:
                node.register_prehook(backward.mark)

    def _warn_fp32(self) -> None:
        """Warns, once, that the loop stores nothing narrower than FP32 while the run's recipe
        says it stores ``format`` (the usual cause: autocast for another device, which does
        nothing)."""
        if self._format_info["name"] in ("fp32", "tf32"):
            return
        self._warn_once(
            "fp32",
            f"Recorder: the loop stores no tensor narrower than FP32 (no autocast on the "
            f"model's device: torch.autocast('cuda') does nothing on the CPU, nor does "
            f"accelerate's fp16; FP32 weights and gradients), yet the run {self.name!r} is "
            f"recorded as trained in {self._format_info['name']}: its counts are of FP32 values rounded into "
            f"{self._format_info['name']}; use torch.autocast(device) on the model's device, "
            f"or format='fp32' for an FP32 loop",
            stacklevel=5,
        )

    def _narrow_before(self) -> bool:
        """Whether a forward pass about to run stores narrow tensors, as far as can be told
        before it: a weight in a narrow dtype, or autocast on for the weights' device."""
        p = next(iter(self._param_layer), None)
        return p is not None and (torch.is_autocast_enabled(p.device.type)
                                  or any(q.dtype in _NARROW for q in self._param_layer))

    def _narrow(self, leaves: List[torch.Tensor]) -> bool:
        """Whether the forward pass whose output tensors are ``leaves`` ran in a loop that
        stores tensors narrower than FP32: autocast on for a device of its outputs, or an
        output or a weight in a narrow dtype."""
        return (
            any(t.dtype in _NARROW for t in leaves)
            or any(torch.is_autocast_enabled(d) for d in {t.device.type for t in leaves})
            or any(p.dtype in _NARROW for p in self._param_layer)
        )
