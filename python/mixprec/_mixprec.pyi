"""Type stubs of the native module (use the functions of ``mixprec``, which check arguments)."""

from typing import Dict, List, Tuple

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
) -> str:
    """``mixprec analyze --json`` for (name, float32/float64 array, file dtype name) triples."""
