"""mixprec: exact FP16/BF16/FP8 rounding and loss-scale analysis for numpy arrays.

Bindings of the mixprec Rust toolkit. Every function gives what the ``mixprec`` command line
gives for the same values, bit for bit:

- :func:`quantize` rounds float32/float64 arrays into a format (``mixprec quantize``), with the
  counts of underflow, subnormal results, overflow, NaN and infinite inputs on request;
- :func:`formats` lists the formats' properties (``mixprec formats --json``);
- :func:`explain` says how one value (or bit pattern) is stored in a format, field by field
  (``mixprec explain --json``);
- :func:`analyze` tells which loss scales keep named arrays in a format (``mixprec analyze
  --json``).

:class:`mixprec.torch.Recorder` (``from mixprec.torch import Recorder``, which imports torch)
records a PyTorch training loop as a run directory that ``mixprec report`` renders.

Bad arguments raise :class:`ValueError` (a bad value, with the command line's message) or
:class:`TypeError` (a wrong type).
"""

from __future__ import annotations

import functools
import json
import operator
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, Union, overload

import numpy as np

from . import _mixprec

__all__ = ["quantize", "formats", "explain", "analyze", "ROUNDING_MODES", "OVERFLOW_RULES"]



@functools.lru_cache(maxsize=None)
def _names() -> Dict[str, Any]:
    """The library's tables of names (``_mixprec.names_json``), parsed once: ``rounding`` and
    ``overflow`` (each ``{"name", "aliases"}``), ``classes`` (``{"name", "recipe_key",
    "operand"}``: a class as the run directory names it, the recipe key of its format, inside
    ``gemm_operands`` for an operand, ``None`` for the update), ``optimizer_parts``
    (``{"name", "optimizer"}``) and ``block_schemes``. Callers must not modify it."""
    return json.loads(_mixprec.names_json())


#: The rounding modes ``quantize`` accepts (as the command line's ``--rounding``), canonical
#: names; the library's table also reads aliases (``rne``, ``sr``, ...).
ROUNDING_MODES = tuple(r["name"] for r in _names()["rounding"])
#: The overflow rules ``quantize`` accepts (as the command line's ``--overflow``).
OVERFLOW_RULES = tuple(r["name"] for r in _names()["overflow"])

Counts = Dict[str, int]


def _float_array(x: Any, what: str) -> np.ndarray:
    """``x`` as a numpy float32/float64 array without copying; TypeError for anything else.

    Objects that are not numpy arrays but export DLPack (a CPU torch tensor) are viewed through
    ``np.from_dlpack``, which does not copy.
    """
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        try:
            x = np.from_dlpack(x)
        except (TypeError, ValueError, RuntimeError, BufferError) as e:
            raise TypeError(f"{what}: cannot view {type(x).__name__} as a numpy array: {e}") from e
    if not isinstance(x, np.ndarray):
        raise TypeError(
            f"{what}: expected a numpy float32 or float64 array, got {type(x).__name__}"
        )
    # A float32/float64 array of the other byte order compares unequal to np.float32: ask
    # about the byte order first, so that its message names the real problem.
    if x.dtype.kind == "f" and not x.dtype.isnative:
        native = x.dtype.newbyteorder("=")
        if native in (np.float32, np.float64):
            raise TypeError(
                f"{what}: expected native byte order, got dtype {x.dtype.str} (convert with "
                f".astype('{native.str}'))"
            )
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{what}: expected a numpy float32 or float64 array, got dtype {x.dtype}")
    return x


def _seed(seed: Any) -> int:
    if isinstance(seed, bool):
        raise TypeError("seed: expected an int, got bool")
    try:
        seed = operator.index(seed)
    except TypeError:
        raise TypeError(f"seed: expected an int, got {type(seed).__name__}") from None
    if not 0 <= seed < 2**64:
        raise ValueError(f"invalid seed '{seed}': expected a whole number from 0 to 2^64-1")
    return seed


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what}: expected a str, got {type(value).__name__}")
    return value


def _round_args(
    format: Any, rounding: Any, overflow: Any, subnormals: Any, seed: Any
) -> Tuple[str, str, str, bool, int]:
    """:func:`quantize`'s options, their types checked (their values are the Rust's to check):
    shared with the torch path (``mixprec._torch_round``)."""
    names = (_str(format, "format"), _str(rounding, "rounding"), _str(overflow, "overflow"))
    if not isinstance(subnormals, (bool, np.bool_)):
        raise TypeError(f"subnormals: expected a bool, got {type(subnormals).__name__}")
    return (*names, bool(subnormals), _seed(seed))


@overload
def quantize(
    x: np.ndarray,
    format: str,
    rounding: str = ...,
    overflow: str = ...,
    subnormals: bool = ...,
    seed: int = ...,
    out: Optional[np.ndarray] = ...,
    *,
    return_counts: Literal[False] = ...,
) -> np.ndarray: ...


@overload
def quantize(
    x: np.ndarray,
    format: str,
    rounding: str = ...,
    overflow: str = ...,
    subnormals: bool = ...,
    seed: int = ...,
    out: Optional[np.ndarray] = ...,
    *,
    return_counts: Literal[True],
) -> Tuple[np.ndarray, Counts]: ...


def quantize(
    x: np.ndarray,
    format: str,
    rounding: str = "nearest-even",
    overflow: str = "ieee",
    subnormals: bool = True,
    seed: int = 0,
    out: Optional[np.ndarray] = None,
    *,
    return_counts: bool = False,
) -> Union[np.ndarray, Tuple[np.ndarray, Counts]]:
    """Rounds every value of ``x`` into ``format``, as ``mixprec quantize`` does.

    The result has ``x``'s dtype and shape and holds values of the format (widened exactly):
    float32 values are rounded from their float32 value, float64 values from their float64
    value, each once, directly into the format.

    Args:
        x: a numpy float32 or float64 array of any shape and strides (or an object exporting
            DLPack, such as a CPU torch tensor, viewed without a copy).
        format: ``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8-e4m3`` (``e4m3fn``), ``fp8-e5m2`` or
            ``eXmY`` (see :func:`formats`), or a block-scaled format (``mxfp8-e4m3``,
            ``mxfp8-e5m2``, ``mxfp6-e2m3``, ``mxfp6-e3m2``, ``mxfp4``, ``nvfp4``, tiles
            ``ELEMENT@RxC`` such as ``fp8-e4m3@1x128``): blocks run along the last axis (tiles
            over the last two, leading axes folded into rows), as ``mixprec analyze`` reads a
            tensor; NVFP4's tensor scale is the whole array's.
        rounding: ``nearest-even``, ``toward-zero``, ``up``, ``down`` or ``stochastic``.
            Stochastic rounding draws its random bits from ``seed`` and each value's position in
            C order (row-major flat index), so results do not depend on strides or threads.
        overflow: ``ieee`` (infinity, or NaN in ``fp8-e4m3``; the largest finite value for
            directed roundings toward zero) or ``saturate`` (always +-max).
        subnormals: ``False`` flushes results below the smallest normal to a zero of the input's
            sign (the command line's ``--subnormals off``).
        seed: the seed of stochastic rounding, 0 to 2**64 - 1.
        out: where to write the result: ``x`` itself (rounding in place), or a writeable array
            of ``x``'s dtype and shape. A new C-contiguous array when None.
        return_counts: also return a dict of what rounding did: ``underflow`` (nonzero finite
            inputs that became zero), ``subnormal`` (nonzero results below the smallest
            normal), ``overflow`` (finite inputs beyond the largest finite value), ``nan`` and
            ``infinite`` (such inputs).

    Returns:
        The rounded array (``out`` when given), or ``(array, counts)`` with ``return_counts``.

    Raises:
        TypeError: ``x`` or ``out`` is not a float32/float64 numpy array, or their dtypes differ.
        ValueError: an unknown format, rounding mode or overflow rule (the command line's
            message), a bad seed, ``out`` of another shape or not writeable.

    A C-contiguous ``out`` (or result) is rounded where it lies, on all cores, without holding
    the GIL; other layouts go through one contiguous buffer.

    >>> import numpy as np, mixprec
    >>> mixprec.quantize(np.array([0.1, 1e-8, 65520.0]), "fp16")
    array([0.09997559, 0.        ,        inf])
    """
    x = _float_array(x, "x")
    format, rounding, overflow, subnormals, seed = _round_args(
        format, rounding, overflow, subnormals, seed
    )
    if out is None:
        out = np.empty(x.shape, dtype=x.dtype)
    elif out is not x:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out: expected a numpy array, got {type(out).__name__}")
        if out.dtype != x.dtype:
            raise TypeError(f"out: dtype {out.dtype} is not x's dtype {x.dtype}")
        if out.shape != x.shape:
            raise ValueError(f"out: shape {out.shape} is not x's shape {x.shape}")
        if np.may_share_memory(x, out):
            # Overlapping but different views: read from a copy, as numpy ufuncs do.
            x = x.copy()
    if not out.flags.writeable:
        raise ValueError("out: the array is read-only")
    counts = _mixprec.quantize_into(x, out, format, rounding, overflow, subnormals, seed)
    return (out, counts) if return_counts else out


def formats(*names: str) -> List[Dict[str, Any]]:
    """The properties of formats, as ``mixprec formats --json`` lists them.

    Args:
        names: format names (``fp16``, ``e3m4``, ``mxfp8-e4m3``, ...); the presets of both
            kinds when none are given.

    Returns:
        One dict per format, the element formats first: ``name``, ``exponent_bits``,
        ``mantissa_bits``, ``bias``, ``max``, ``min_normal``, ``min_subnormal``, ``epsilon``,
        ``log2_max``, ``log2_min_normal``, ``log2_min_subnormal``, ``has_infinity``; then the
        block-scaled formats with the keys ``mixprec formats --json`` gives them.

    Raises:
        ValueError: an unknown format name (the command line's message).

    >>> [f["name"] for f in mixprec.formats()]
    ['fp32', 'tf32', 'fp16', 'bf16', 'fp8-e4m3', 'fp8-e5m2']
    """
    return json.loads(_mixprec.formats_json([_str(n, "format name") for n in names]))


#: The keys of :func:`explain`'s result (and of its ``neighbours``, ``error`` and ``bits``) that
#: hold numbers; JSON spells the non-finite ones as strings.
_EXPLAIN_NUMBERS = ("value", "stored", "below", "above", "ulp", "absolute", "relative", "ulps")


def _explain_numbers(d: Dict[str, Any]) -> Dict[str, Any]:
    for k, v in d.items():
        if isinstance(v, dict):
            _explain_numbers(v)
        elif k in _EXPLAIN_NUMBERS and isinstance(v, str):
            d[k] = float(v)
    return d


def explain(
    value: Union[str, float, int],
    format: str = "fp16",
    rounding: str = "nearest-even",
    overflow: str = "ieee",
    subnormals: bool = True,
    seed: int = 0,
) -> Dict[str, Any]:
    """How ``value`` is stored in ``format``, as ``mixprec explain --json`` tells it.

    Args:
        value: a number (a float is taken exactly: its shortest repr reads back as the same
            binary64), or a string: a decimal or scientific number, ``inf``, ``-inf``, ``nan``,
            or a bit pattern of the format (``"0x3c00"``, ``"0b..."``), which is decoded.
        format, rounding, overflow, subnormals, seed: as for :func:`quantize` (element formats
            only).

    Returns:
        A dict: ``input``, the format (``format``, ``total_bits``, ``exponent_bits``,
        ``mantissa_bits``, ``bias``) and options, ``pattern`` (the bit pattern given, or None),
        ``value`` (the input as binary64) and ``value_exact`` (its exact decimal), ``read_as``,
        ``stored`` and ``stored_exact``, ``bits`` (``hex``, ``sign``, ``exponent``,
        ``mantissa``, ``kind``, ``exponent_value``, ``significand``; None for NaN in a format
        without NaN), ``nan_kind``, ``exactly_representable``, ``neighbours`` (``below``,
        ``above``, their ``below_bits``/``above_bits``, ``ulp``), ``tie``, ``error``
        (``absolute``, ``relative``, ``ulps``), ``event`` (``normal``, ``subnormal``,
        ``underflow``, ``overflow``, ``infinite``, ``nan``), ``scale_log2`` (the power of two
        of the loss scale that would make it normal, negative to scale an overflow down) and
        ``outcome`` (the sentence the command prints). Numbers are floats, infinities and NaN
        included.

    Raises:
        ValueError: a value that is neither a number nor a pattern of the format's width, or a
            bad format or option (the command line's message).

    >>> mixprec.explain(1e-8)["event"], mixprec.explain(1e-8)["scale_log2"]
    ('underflow', 13)
    """
    if isinstance(value, bool):
        raise TypeError("value: expected a number or a str, got bool")
    if isinstance(value, (int, np.integer)):
        value = str(int(value))
    elif isinstance(value, (float, np.floating)):
        value = repr(float(value))
    value = _str(value, "value")
    args = _round_args(format, rounding, overflow, subnormals, seed)
    return _explain_numbers(json.loads(_mixprec.explain_json(value, *args)))


def _dtype_name(a: np.ndarray) -> str:
    return {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32"}[a.dtype]


_FORMAT_DEFAULT = "fp16"
_SWEEP_DEFAULTS = ("0..32", 0, 0.001)


def analyze(
    tensors: Mapping[str, Any],
    format: str = "fp16",
    scales: str = "0..32",
    margin: int = 0,
    max_underflow: float = 0.001,
    compare_blocks: Optional[str] = None,
) -> Dict[str, Any]:
    """Which loss scales keep these tensors in ``format``: ``mixprec analyze --json``'s result.

    With a block format (``"mxfp8-e4m3"``, ``"nvfp4"``, a tile ``"fp8-e4m3@1x128"``, ...), what
    each block's scale leaves of the tensors instead (blocks along the last axis, tiles over the
    last two, leading axes folded into rows), as ``mixprec analyze --format mxfp8-e4m3 --json``;
    with ``compare_blocks="fp8-e4m3"`` (or another element of the comparison), per-tensor
    scaling, MX, NVFP4 and tiles side by side, as ``--compare-blocks=fp8-e4m3``.

    Args:
        tensors: tensor name -> numpy float64, float32 or float16 array (float16 widened
            exactly; any shape and strides), or an object exporting DLPack. Names keep the
            mapping's order.
        format: the format the scaled values are rounded into: an element format, or a block
            format.
        scales: the log2 scales swept, ``LO..HI`` (each end ``k`` or ``2^k``), as ``--scales``.
        margin: bits of headroom kept below overflow, as ``--margin``.
        max_underflow: the largest share of values allowed to underflow, as
            ``--max-underflow``.
        compare_blocks: the element format whose block schemes are compared (then ``format``,
            ``scales``, ``margin`` and ``max_underflow`` keep their defaults, as the command
            line's ``--compare-blocks`` refuses ``--format``, ``--scales``, ``--margin`` and
            ``--max-underflow``).

    Returns:
        The dict that ``mixprec analyze FILES --json`` prints for files holding these tensors
        (each tensor's ``file`` is ``"<array>"``).

    Raises:
        TypeError: ``tensors`` is not a mapping of str to float arrays.
        ValueError: no tensors, or a bad format, scale range, margin or underflow share (the
            command line's message); a scale range, margin or underflow share other than the
            defaults with a block format (they set the loss-scale sweep, which block formats do
            not have); ``format``, ``scales``, ``margin`` or ``max_underflow`` other than the
            defaults with ``compare_blocks``.
    """
    if not isinstance(tensors, Mapping):
        raise TypeError(f"tensors: expected a mapping of names to arrays, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError("tensors: no tensors to analyze")
    if isinstance(margin, bool):
        raise TypeError("margin: expected an int, got bool")
    margin = operator.index(margin)
    if not -(2**31) <= margin < 2**31:
        raise ValueError(
            f"invalid --margin '{margin}': expected a whole number of bits from 0 to 2000"
        )
    max_underflow = float(max_underflow)
    items = []
    for name, a in tensors.items():
        name = _str(name, "tensor name")
        dtype = None
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and a.dtype.itemsize == 2:
            # Widened exactly (of either byte order: astype copies into a native float32).
            a, dtype = a.astype(np.float32), "F16"
        a = _float_array(a, name)
        items.append((name, a, dtype or _dtype_name(a)))
    compare = None if compare_blocks is None else _str(compare_blocks, "compare_blocks")
    format = _str(format, "format")
    if compare is not None:
        # As the command line's --compare-blocks conflicts with --format, --scales, --margin
        # and --max-underflow: the comparison picks its formats from its element and has no
        # loss scale. (A default passed by name cannot be told from one left out.)
        given = [
            (name, value)
            for name, value, default in zip(
                ("format", "scales", "margin", "max_underflow"),
                (format, scales, margin, max_underflow),
                (_FORMAT_DEFAULT, *_SWEEP_DEFAULTS),
            )
            if value != default
        ]
        if given:
            name, value = given[0]
            flag = "--" + name.replace("_", "-")
            raise ValueError(
                f"{name}={value!r} cannot be used with compare_blocks (as {flag} with "
                f"--compare-blocks): the comparison takes its formats from its element "
                f"{compare!r} and has no loss-scale sweep"
            )
    sweep_given = (scales, margin, max_underflow) != _SWEEP_DEFAULTS
    return json.loads(
        _mixprec.analyze_json(
            items,
            format,
            _str(scales, "scales"),
            margin,
            max_underflow,
            compare,
            sweep_given,
        )
    )

