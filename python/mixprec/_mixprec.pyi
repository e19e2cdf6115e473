"""Type stubs of the native module (use the functions of ``mixprec``, which check arguments)."""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

#: The ``file`` recorded for tensors given as arrays in ``analyze``'s result.
ARRAY_PATH: str

def quantize_into(
    x: np.ndarray,
    out: np.ndarray,
    format: str,
    rounding: str,
    overflow: str,
    subnormals: bool,
    seed: int,
) -> Dict[str, int]:
    """Rounds ``x`` into ``out`` (``x`` itself, or a non-overlapping array of its dtype and
    shape); returns the counts (underflow, subnormal, overflow, nan, infinite)."""

def formats_json(names: List[str]) -> str:
    """``mixprec formats --json`` for ``names`` (the presets when empty)."""

def names_json() -> str:
    """The library's tables of names as one JSON object: ``rounding`` and ``overflow`` (each
    ``{"name", "aliases"}``), ``classes`` (``{"name", "recipe_key", "operand"}``),
    ``optimizer_parts`` (``{"name", "optimizer"}``) and ``block_schemes`` (names)."""

def explain_json(
    value: str, format: str, rounding: str, overflow: str, subnormals: bool, seed: int
) -> str:
    """``mixprec explain --json`` for one value or bit pattern."""

def analyze_json(
    tensors: List[Tuple[str, np.ndarray, str]],
    format: str,
    scales: str,
    margin: int,
    max_underflow: float,
    compare: Optional[str] = None,
    sweep_given: bool = False,
) -> str:
    """``mixprec analyze --json`` for (name, float32/float64 array, file dtype name) triples
    (the block-scaled analysis for a block format or a ``compare`` element)."""

#: The run directory's schema version.
SCHEMA: int

class Capture:
    """The sites of one capture step: log2 histograms and rounding counts into a format."""

    def __init__(self, format: str, layers: List[str]) -> None: ...
    def add(
        self, layer: str, tensor: str, part: Optional[str], values: np.ndarray, kind: str
    ) -> None:
        """Adds a float32/float64 array (kind ``float``) or fp16/bf16 bit patterns as int16
        (kind ``f16``/``bf16``), read where it lies."""
    def add_stored(
        self,
        layer: str,
        tensor: str,
        part: Optional[str],
        values: np.ndarray,
        rounding: Tuple[int, int, int, int, int],
    ) -> None:
        """Adds float32 values as a storage point held them before rounding, with the counts
        of the rounding it did (``Simulate``'s captures)."""
    def sites_json(self, batch_only: bool = False) -> str:
        """The sites as ``captures.jsonl`` writes them; with ``batch_only``, only the classes
        computed from the batch (activations, their gradients, the operands cast from them)."""
    def merge_json(self, sites_json: str) -> None:
        """Merges another capture's sites (another rank's) into this one, site by site: counts
        add, amax is the larger, the smallest nonzero magnitude the smaller, the sums add."""

class RunWriter:
    """``mixprec::run::RunWriter``: a run directory to be written, checked when made and
    created by :meth:`create` or the first write (``step``, ``finish``)."""

    def __init__(self, path: str, config_json: str, flush_every: float = 2.0) -> None: ...
    def create(self) -> None:
        """Creates the directory (marker, ``config.json``, empty logs) if not yet created."""
    @property
    def created(self) -> bool: ...
    def step(self, record_json: str, capture: Optional[Capture] = None) -> None:
        """Appends a ``StepRecord`` (and, with ``capture``, its capture record)."""
    def flush(self) -> None: ...
    def finish(
        self,
        recipe: str,
        parameters: int,
        weights_finite: bool,
        wall_seconds: float,
        metric: Optional[Tuple[str, float]] = None,
    ) -> str:
        """Writes ``summary.json`` from the steps written (the counts, final loss and divergence
        by ``mixprec train``'s rules) and removes the marker; returns the summary as JSON."""
    @property
    def open(self) -> bool: ...

def recipe_json(spec: str, scaler: Optional[str] = None) -> str:
    """A preset name or a recipe object (JSON text), its loss scaling replaced by ``scaler``
    when given, checked, as the full recipe's JSON (what ``train`` resolves)."""

class LossScaler:
    """The recipe's loss scaler (``mixprec::scaling::scaler::LossScaler``)."""

    def __init__(self, recipe_json: str) -> None: ...
    @property
    def scale(self) -> float: ...
    def update(self, found_inf: bool) -> bool:
        """Updates the scale; whether the step must be skipped."""

class DelayedScales:
    """Every cast tensor's fp8 delayed scale (``mixprec::scaling::delayed::DelayedScale``) by name."""

    def __init__(self, recipe_json: str) -> None: ...
    def cast(self, name: str, fp8_max: float, amax: float) -> float:
        """The tensor's scale for this step's casts; ``amax`` joins the step's amax."""
    def end_step(self) -> None: ...

def train_start(
    config_json: str,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, List[Tuple[str, str, np.ndarray]], np.ndarray]:
    """Where ``mixprec train`` starts a classifier: train and test features and labels, the
    initial parameters ``(layer, name, array)`` and the batches' example indices per step."""

def welch_json(a: List[float], b: List[float]) -> Optional[str]:
    """Welch's t-test of ``mean(a) - mean(b)`` (95% interval) as JSON, or None."""

class GradAmax:
    """The Recorder's reader of gradients: CPU float32/float16/bfloat16 tensors whose values
    fill a block of memory (contiguous, permuted, broadcast) read where they lie, any other
    through ``fallback`` (``_torch_round.amax``)."""

    def __init__(self, tensor: Any, strided: Any, float32: Any, float16: Any, bfloat16: Any,
                 fallback: Any, task: Any) -> None: ...
    def take(self) -> List[Tuple[int, float, bool]]:
        """Per hook called since the last call: (backward pass's id, largest finite magnitude,
        whether one held an inf or NaN)."""

class NodeHook:
    """A post hook on an autograd node: reads ``grad_inputs[i]`` for ``i`` in ``passed`` and
    ``grad_outputs[k]`` for ``k`` in ``sums`` into ``reader``; calls ``nonfinite(node,
    grad_outputs, passed)`` where one passed on held an inf or NaN; a ``cast`` node also
    reads, beside each gradient passed on, ``grad_outputs[0]`` where their shapes agree."""

    def __init__(self, reader: GradAmax, node: Any, passed: List[int], sums: List[int],
                 nonfinite: Any, cast: bool = False) -> None: ...
    def __call__(self, grad_inputs: Any, grad_outputs: Any) -> None: ...

class GraphLook:
    """The Recorder's look at the nodes a forward pass created: counts the edges feeding each
    node's inputs and hooks (with a ``NodeHook`` into ``reader``) each node that passes on a
    gradient of a ``narrow`` dtype (unless its type is in ``same_values``: it only moves the
    values) or whose input receives a sum of several; ``casts`` name the casting node types."""

    def __init__(self, reader: GradAmax, narrow: List[Any], same_values: List[str],
                 casts: List[str]) -> None: ...
    def look(self, nodes: Any, module: Any, module_of: Dict[Any, Any], dtypes: Any,
             nonfinite: Any, cast_nonfinite: Any) -> bool:
        """Looks at each of ``nodes`` once; returns whether one was a compiled graph's."""
    @property
    def hooked(self) -> int:
        """How many nodes are hooked."""
    def stop(self) -> None:
        """Removes every hook, and forgets the graph."""

class TensorRounder:
    """One format's rounding (with a recipe's rounding mode, overflow rule and subnormals,
    parsed once) of contiguous float32 CPU tensors, read and written where they lie:
    ``Simulate``'s hot path. ``float32`` is ``torch.float32``."""

    def __init__(self, format: str, rounding: str, overflow: str, subnormals: bool,
                 float32: Any) -> None: ...
    def round_into(self, src: Any, dst: Any, seed: int, amax: bool = False
                   ) -> Tuple[int, int, int, int, int, Optional[float]]:
        """Rounds ``src`` into ``dst`` (``src`` itself, or a tensor of its shape sharing no
        memory with it); returns (underflow, subnormal, overflow, nan, infinite) and, with
        ``amax``, the largest finite magnitude of ``src`` before rounding (else None)."""
