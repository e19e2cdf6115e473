"""Type stubs of the native module (use the functions of ``mixprec``, which check arguments)."""

from typing import Dict, List, Optional, Tuple

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

#: Sub-bins per octave (log2) of captured histograms (``mixprec train``'s captures too).
CAPTURE_SUB_BINS_LOG2: int
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
    def add_histogram(
        self,
        layer: str,
        tensor: str,
        part: Optional[str],
        histogram_json: str,
        rounding: Tuple[int, int, int, int, int],
    ) -> None:
        """Adds a histogram formed elsewhere (serde form) and its rounding counts."""
    def sites_json(self) -> str:
        """The sites as ``captures.jsonl`` writes them."""

class RunWriter:
    """``mixprec::train::run::RunWriter``: a run directory being written."""

    def __init__(self, path: str, config_json: str, flush_every: float = 2.0) -> None: ...
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
