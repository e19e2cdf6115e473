"""Rounding torch tensors into mixprec's formats with torch operations, where the tensors lie.

The twin of the Rust kernels behind :func:`mixprec.quantize`, for tensors on a GPU or any other
device: the same bits and the same counts, formed by torch operations on the device; only the
counts (five numbers) and, for NVFP4, the tensor's largest magnitude (one) reach the host.

Every value is held as the bit pattern of its float64 value (a float32 widened exactly, by
integer operations) in int64, and rounded as ``mixprec::format::Rounder::round_at``
(``src/format/round.rs``) rounds it, in integer arithmetic::

    |x|   = sig * 2^e                               sig < 2^53, from the bits
    q     = max(floor(log2 |x|), emin) - man_bits   the result's quantum 2^q (subnormals off:
                                                    floor(log2 |x|) - man_bits)
    kept  = sig >> (q - e),  rest = sig mod 2^(q - e)
    up    = nearest-even: rest > half, or rest = half and kept odd
            toward-zero: never; up / down: by the sign
            stochastic: floor(rest / 2^(q - e) * 2^32) > u   u = stochastic_bits(seed, index)
    |r|   = (kept + up) * 2^q                       formed on the bit pattern, carries included

then overflow (``|r| > max``), underflow (``|r| = 0``, or below the smallest normal without
subnormals) and the special inputs as the Rust decides them. ``floor(log2 |x|)`` comes from the
exponent bits (no float ``log2``), and a float32 result is narrowed from its float64 pattern by
integer operations, so nothing depends on how a device treats float32 subnormals or NaN
payloads. The stochastic stream is ``mixprec::format::stochastic_bits`` (``random.rs``) in int64
masked to 32 bits; its SplitMix64 step depends only on ``(seed, index >> 32)`` and is computed
on the host, once per 2^32 values.

Block formats (``src/format/block``) take each block's largest magnitude as float32 bits,
derive its scale, scale the block into the element's range, round the elements (saturating)
and scale back. The Rust does that arithmetic in float32 for float32 tensors: here a product
of two float32 values is formed exactly in float64 and rounded into fp32 by the rounding above,
and a quotient is a float64 division (correctly rounded on every IEEE device) rounded into fp32,
which gives the correctly rounded float32 quotient because 53 >= 2 * 24 + 2 (double rounding is
innocuous then; Figueroa, 1995). For float64 tensors the Rust scales in float64, as torch's
float64 multiplication and division do (devices without float64, such as Apple's MPS, are not
supported).
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from . import _mixprec, _names, _round_args, formats
from ._checks import check_tensor
from . import quantize as _quantize_numpy

__all__ = ["quantize", "quantize_torch"]

Counts = Dict[str, int]

_SIGN = -(1 << 63)  # bit 63 of an int64
_ABS = (1 << 63) - 1
_MASK52 = (1 << 52) - 1
_M32 = 0xFFFF_FFFF
_M64 = (1 << 64) - 1
_INF = 0x7FF << 52
_QUIET = 1 << 51
#: f32::NAN and f64::NAN (the same value): what a NaN-scaled block or tensor is filled with.
_NAN = _INF | _QUIET
_F32_MIN_SUBNORMAL = (1023 - 149) << 52
_F32_MAX = float(np.finfo(np.float32).max)
_COUNT_KEYS = ("underflow", "subnormal", "overflow", "nan", "infinite")

#: Every name ``Rounding::from_str`` (round.rs) accepts, lowercased, and the mode it means: the
#: library's table (``mixprec._names()``).
_ROUNDING = {
    alias: r["name"] for r in _names()["rounding"] for alias in (r["name"], *r["aliases"])
}


#: The binding's name for the bits of each dtype whose largest magnitude it reads.
_AMAX_KINDS = {torch.float32: "float", torch.float16: "f16", torch.bfloat16: "bf16"}


def amax(x: torch.Tensor) -> float:
    """The largest magnitude in the non-empty tensor ``x``: infinity where one value is
    infinite and none NaN, NaN where one is NaN. On the CPU, for float32, float16 and
    bfloat16, one pass of the binding over the bits where they lie (``_mixprec.amax``: on 64K
    float16 values a quarter of the time of torch's ``aminmax`` and its two reads, on float32
    half that of ``abs().amax()``); elsewhere torch's ``abs().amax()`` (fp8 widened first,
    exactly)."""
    x = x.detach()
    kind = _AMAX_KINDS.get(x.dtype)
    # A plain dense CPU tensor only: a subclass (DTensor), a sparse or a nested tensor has no
    # numpy view of its values.
    if kind is None or x.device.type != "cpu" or type(x) is not torch.Tensor or x.is_sparse \
            or x.is_nested:
        if x.element_size() == 1:
            x = x.float()  # fp8 has no reductions of its own
        return float(x.abs().amax())
    return _mixprec.amax((x if kind == "float" else x.view(torch.int16)).numpy(), kind)


def _bits(x: float) -> int:
    """The float64 bit pattern of ``x``."""
    return struct.unpack("<q", struct.pack("<d", x))[0]


@dataclass(frozen=True)
class _Element:
    """What rounding needs of an element format (from ``mixprec.formats``, which asks Rust)."""

    man_bits: int
    emin: int
    emax: int
    max: float
    #: float64 patterns of the largest finite value and of the smallest normal.
    max_bits: int
    min_normal_bits: int
    infinity: bool
    nan: bool


@functools.lru_cache(maxsize=64)
def _element(name: str) -> _Element:
    f = formats(name)[0]
    return _Element(
        man_bits=f["mantissa_bits"],
        emin=1 - f["bias"],
        emax=math.frexp(f["max"])[1] - 1,
        max=f["max"],
        max_bits=_bits(f["max"]),
        min_normal_bits=_bits(f["min_normal"]),
        infinity=f["has_infinity"],
        nan=f["has_nan"],
    )


@dataclass(frozen=True)
class _Block:
    """A block format: its scheme (``formats``' ``scheme``: one of ``_names()["block_schemes"]``,
    ``mx``, ``nvfp4`` or ``tile``), block shape and element."""

    scheme: str
    rows: int
    cols: int
    element: _Element


@functools.lru_cache(maxsize=64)
def _target(name: str) -> Union[_Element, _Block]:
    f = formats(name)[0]
    if "block_rows" not in f:
        return _element(name)
    return _Block(f["scheme"], f["block_rows"], f["block_cols"], _element(f["element"]))


@dataclass(frozen=True)
class _Options:
    """How values round: the mode (one of ``mixprec.ROUNDING_MODES``), whether overflow
    saturates, whether subnormal results exist."""

    rounding: str
    saturate: bool
    subnormals: bool


#: How float32 arithmetic rounds: into fp32, nearest-even, overflowing to infinity.
_F32_OPTIONS = _Options("nearest-even", saturate=False, subnormals=True)


def quantize_torch(
    t: torch.Tensor,
    format: str,
    rounding: str = "nearest-even",
    overflow: str = "ieee",
    subnormals: bool = True,
    seed: int = 0,
    return_counts: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, Counts]]:
    """Rounds every value of ``t`` into ``format`` with torch operations on ``t``'s device,
    giving the bits :func:`mixprec.quantize` gives for the same values on the CPU.

    Args:
        t: a float32 or float64 tensor on any device (that has int64 and, for float64
            tensors, float64 operations), any shape and strides.
        format, rounding, overflow, subnormals, seed: as :func:`mixprec.quantize`: an element
            format (``fp16``, ``bf16``, ``fp8-e4m3``, ``eXmY``, ...) or a block format
            (``mxfp8-e4m3``, ``nvfp4``, ``fp8-e4m3@1x128``, ...: blocks along the last axis,
            tiles over the last two with leading axes folded into rows); stochastic rounding
            draws from ``seed`` and each value's C-order position.
        return_counts: also return the counts of what rounding did (``underflow``,
            ``subnormal``, ``overflow``, ``nan``, ``infinite``), as :func:`mixprec.quantize`.

    Returns:
        A new tensor of ``t``'s dtype, device and shape (contiguous), or ``(tensor, counts)``.

    Raises:
        TypeError: ``t`` is not a float32/float64 tensor, or another argument has a wrong type.
        ValueError: an unknown format, rounding mode or overflow rule (the command line's
            message), or a bad seed.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"x: expected a float32 or float64 torch tensor, got {type(t).__name__}")
    if t.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"x: expected a float32 or float64 torch tensor, got dtype {t.dtype}")
    format, rounding, overflow, subnormals, seed = _round_args(
        format, rounding, overflow, subnormals, seed
    )
    # The Rust parses the names (its messages, in its order) before it reads any value.
    empty = np.empty(0, dtype=np.float32)
    _mixprec.quantize_into(empty, empty, format, rounding, overflow, subnormals, seed)
    options = _Options(_ROUNDING[rounding.lower()], overflow.lower() == "saturate", subnormals)
    target = _target(format)

    counts: List[torch.Tensor] = []
    y = _round_tensor(t.detach().reshape(-1), t.shape, target, options, seed, counts)
    y = y.view(t.shape)
    if not return_counts:
        return y
    totals = torch.stack(counts).sum(0).tolist() if counts else [0] * len(_COUNT_KEYS)
    return y, dict(zip(_COUNT_KEYS, (int(c) for c in totals)))


#: Values rounded per pass (whole bands of blocks for block formats): bounds the int64
#: temporaries of a pass, about twenty, to a few GiB whatever the tensor's size.
_CHUNK = 1 << 24


def _round_tensor(
    x: torch.Tensor,
    shape: torch.Size,
    target: Union[_Element, _Block],
    o: _Options,
    seed: int,
    counts: List[torch.Tensor],
) -> torch.Tensor:
    """The float32 or float64 tensor ``x`` (one of ``shape``, flat, in C order) rounded into
    ``target``, in passes of about :data:`_CHUNK` values; the stochastic bits of each pass are
    drawn at its values' positions."""
    n = x.numel()
    single = x.dtype == torch.float32
    out = torch.empty_like(x)
    step, cols, tensor_amax = _CHUNK, 1, 0
    if isinstance(target, _Block) and n:
        cols = shape[-1] if len(shape) else 1
        band = target.rows * cols
        step = max(1, _CHUNK // band) * band
        if target.scheme == "nvfp4":
            parts = (_patterns(x[i : i + step]) for i in range(0, n, step))
            amax = torch.stack([_magnitude(p, single).max() for p in parts]).max()
            tensor_amax = int(amax)  # the one value read back
            if tensor_amax >= 0x7F80_0000:
                # NaN or infinity in the tensor: every value becomes NaN (Nvfp4TensorScale::new).
                counts.append(torch.tensor([0, 0, 0, n, 0], dtype=torch.int64, device=x.device))
                if single:
                    out.view(torch.int32).fill_(0x7FC0_0000)
                else:
                    out.view(torch.int64).fill_(_NAN)
                return out
    for start in range(0, n, step):
        part = _patterns(x[start : start + step])
        u = None
        if o.rounding == "stochastic":
            u = _stochastic_bits(seed, start, part.numel(), x.device)
        if isinstance(target, _Block):
            rounded = _round_blocks(part, single, cols, target, o, u, counts, tensor_amax)
        else:
            rounded = _round(part, target, o, u, counts)
        out[start : start + step] = (
            _narrow(rounded).view(torch.float32) if single else rounded.view(torch.float64)
        )
    return out


def _patterns(x: torch.Tensor) -> torch.Tensor:
    """The float64 bit patterns (int64) of the values of the float32 or float64 tensor ``x``."""
    if x.dtype == torch.float32:
        return _widen(x.view(torch.int32).to(torch.int64))
    return x.view(torch.int64)


def _magnitude(x: torch.Tensor, single: bool) -> torch.Tensor:
    """The float32 bits of each value's magnitude (a float64 rounded to float32 first, as the
    Rust's ``as f32``): the block scales' input."""
    return _narrow(x if single else _to_f32(x)).to(torch.int64) & 0x7FFF_FFFF


def _round(
    x: torch.Tensor,
    f: _Element,
    o: _Options,
    u: Optional[torch.Tensor],
    counts: Optional[List[torch.Tensor]],
    counted: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The float64 patterns ``x`` (int64) rounded into ``f``: ``Rounder::round_at`` value by
    value, ``u`` the stochastic bits of each; appends the events' counts to ``counts`` (of
    the values where ``counted`` is true, when given)."""
    sign = x & _SIGN
    negative = x < 0
    a = x & _ABS
    biased = a >> 52
    normal = biased != 0
    sig = torch.where(normal, (a & _MASK52) | (1 << 52), a)
    e = torch.where(normal, biased - 1075, -1074)
    # floor(log2 |x|); float64 subnormals (below every format's emin) need only be below it:
    # with subnormals they round at emin's quantum, without they become zero either way.
    top = torch.where(normal, biased - 1023, -1023)
    q = (top.clamp(min=f.emin) if o.subnormals else top) - f.man_bits
    shift = q - e  # bits of sig below the quantum
    s = shift.clamp(1, 62)  # sig < 2^53: beyond 53 only "all of sig" matters
    one = torch.ones_like(s)
    kept = sig >> s
    rest = sig & ((one << s) - 1)
    inexact = (shift > 0) & (rest != 0)
    if o.rounding == "nearest-even":
        half = one << (s - 1)
        up = (rest > half) | ((rest == half) & ((kept & 1) == 1))
    elif o.rounding == "stochastic":
        assert u is not None
        # floor(rest / 2^shift * 2^32), read exactly as the Rust forms it.
        frac32 = (rest << (32 - s).clamp(min=0)) >> (shift - 32).clamp(0, 62)
        up = frac32 > u
    elif o.rounding == "up":
        up = ~negative
    elif o.rounding == "down":
        up = negative
    else:
        up = torch.zeros_like(negative)
    up = up & inexact
    # Within the bit pattern (shift <= 52) adding the quantum carries into the exponent as the
    # value does; above it, the value is below the quantum: 0 or 2^q.
    r = torch.where(
        shift <= 0,
        a,
        torch.where(
            shift <= 52,
            a - rest + (up.to(torch.int64) << s),
            torch.where(up, (q + 1023).clamp(min=0) << 52, 0),
        ),
    )

    nan = a > _INF
    inf = a == _INF
    finite = a < _INF
    over = finite & (r > f.max_bits)
    small = r < f.min_normal_bits
    vanished = (r == 0) | small if not o.subnormals else r == 0
    zero = finite & ~over & vanished

    max_r = sign | f.max_bits
    quiet = _quiet_nan(x, f)
    toward_zero = {"toward-zero": True, "up": negative, "down": ~negative}.get(o.rounding, False)
    if o.saturate or not (f.infinity or f.nan):
        overflow_r, inf_r = max_r, max_r
    else:
        away = (sign | _INF) if f.infinity else quiet
        overflow_r = _select(toward_zero, max_r, away)
        inf_r = x if f.infinity else quiet
    out = torch.where(zero, sign, sign | r)
    out = torch.where(over, overflow_r, out)
    out = torch.where(inf, inf_r, out)
    out = torch.where(nan, quiet, out)
    if counts is not None:
        underflow = zero & (a != 0)
        subnormal = finite & ~over & ~zero & small
        events = (underflow, subnormal, over, nan, inf)
        if counted is not None:
            events = tuple(e & counted for e in events)
        counts.append(torch.stack([e.sum() for e in events]))
    return out


def _select(
    cond: Union[bool, torch.Tensor], a: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
    """``torch.where`` for a condition that may be a plain bool."""
    if isinstance(cond, bool):
        return a if cond else b
    return torch.where(cond, a, b)


def _quiet_nan(x: torch.Tensor, f: _Element) -> torch.Tensor:
    """``Rounder::quiet_nan``: the sign and top ``man_bits`` payload bits of ``x`` (IEEE-like
    formats; the all-ones payload in the others), made quiet."""
    top_bits = ((1 << f.man_bits) - 1) << (52 - f.man_bits)
    payload = x & top_bits if f.infinity else top_bits
    return (x & _SIGN) | _INF | _QUIET | payload


def _bit_length(v: torch.Tensor) -> torch.Tensor:
    """The bit length of each value of ``v`` (int64, 0 <= v < 2^32), by binary search."""
    n = torch.zeros_like(v)
    for k in (16, 8, 4, 2, 1):
        big = (v >> k) != 0
        v = torch.where(big, v >> k, v)
        n = n + big.to(torch.int64) * k
    return n + (v != 0).to(torch.int64)


def _widen(b: torch.Tensor) -> torch.Tensor:
    """float32 patterns (int64 holding the int32 views) as the float64 patterns of the same
    values; NaN payloads move to the top of the float64 payload, as a hardware widening does."""
    sign = b & _SIGN
    biased = (b >> 23) & 0xFF
    m = b & 0x7F_FFFF
    # A float32 subnormal m 2^-149 is a float64 normal: its leading bit becomes the implicit one.
    length = _bit_length(m)
    subnormal = ((length + 873) << 52) | ((m << (53 - length).clamp(max=52)) & _MASK52)
    magnitude = torch.where(
        biased == 0,
        torch.where(m == 0, 0, subnormal),
        torch.where(biased == 0xFF, _INF | (m << 29), ((biased + 896) << 52) | (m << 29)),
    )
    return sign | magnitude


def _narrow(x: torch.Tensor) -> torch.Tensor:
    """float64 patterns of float32 values (infinities and NaNs included: the top 23 payload
    bits are kept) as float32 patterns (int32)."""
    a = x & _ABS
    biased = a >> 52
    fraction = (a >> 29) & 0x7F_FFFF
    sig = (a & _MASK52) | (1 << 52)
    magnitude = torch.where(
        biased == 0x7FF,
        0x7F80_0000 | fraction,
        torch.where(
            biased >= 1023 - 126,
            ((biased - 896) << 23) | fraction,
            # float32 subnormals: sig 2^(biased - 1075) = m 2^-149.
            torch.where(a == 0, 0, sig >> (926 - biased).clamp(0, 62)),
        ),
    )
    return torch.where(x < 0, magnitude - (1 << 31), magnitude).to(torch.int32)


def _to_f32(x: torch.Tensor) -> torch.Tensor:
    """float64 patterns rounded to float32 values (still as float64 patterns), as a float32
    operation rounds its exact result."""
    return _round(x, _element("fp32"), _F32_OPTIONS, None, None)


def _f64(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.float64)


def _i64(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int64)


def _block_key(seed: int, hi: int) -> Tuple[int, int]:
    """``BlockKey::new`` (random.rs): SplitMix64 of ``seed + (hi + 1) * golden``, as the
    multiplier (odd) and the XOR of the 2^32 positions from ``hi * 2^32``."""
    z = (seed + (hi + 1) * 0x9E37_79B9_7F4A_7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58_476D_1CE4_E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D0_49BB_1331_11EB) & _M64
    z ^= z >> 31
    return (z & _M32) | 1, z >> 32


def _mul32(a: torch.Tensor, b: Union[int, torch.Tensor]) -> torch.Tensor:
    """``a * b mod 2^32`` for ``a, b < 2^32``, in products below 2^49 (int64 never wraps)."""
    return (a * (b & 0xFFFF) + (((a * (b >> 16)) & 0xFFFF) << 16)) & _M32


def _stochastic_bits(seed: int, start: int, n: int, device: torch.device) -> torch.Tensor:
    """``stochastic_bits(seed, i)`` for the positions ``i`` in ``start..start + n`` (int64
    values below 2^32); the block keys (one per 2^32 positions) are formed on the host."""
    index = torch.arange(n, dtype=torch.int64, device=device) + start
    first, last = start >> 32, (start + max(n, 1) - 1) >> 32
    keys = [_block_key(seed, hi) for hi in range(first, last + 1)]
    if len(keys) == 1:
        mul, xor = keys[0]
        x = _mul32(index & _M32, mul) ^ xor
    else:
        hi = (index >> 32) - first
        muls = torch.tensor([k[0] for k in keys], dtype=torch.int64, device=device)[hi]
        xors = torch.tensor([k[1] for k in keys], dtype=torch.int64, device=device)[hi]
        x = _mul32(index & _M32, muls) ^ xors
    # triple32 (Wellons' hash-prospector).
    x = x ^ (x >> 17)
    x = _mul32(x, 0xED5A_D4BB)
    x = x ^ (x >> 11)
    x = _mul32(x, 0xAC4C_1B51)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x3184_8BAB)
    return x ^ (x >> 14)


def _round_blocks(
    x: torch.Tensor,
    single: bool,
    cols: int,
    block: _Block,
    o: _Options,
    u: Optional[torch.Tensor],
    counts: List[torch.Tensor],
    tensor_amax: int,
) -> torch.Tensor:
    """``BlockRounder`` on the row-major matrix of float64 patterns ``x`` with ``cols``
    columns (whole bands of block rows): ``round_matrix_at``'s float32 arithmetic where
    ``single``, else ``round_matrix_f64_at``'s float64 arithmetic (src/format/block/apply.rs);
    ``tensor_amax`` is the float32 bits of NVFP4's tensor amax (finite)."""
    rows = x.numel() // cols
    magnitude = _magnitude(x, single)
    # The largest magnitude of each block: the matrix padded with zeros to whole blocks.
    r, c = block.rows, block.cols
    R, C = -(-rows // r), -(-cols // c)
    padded = magnitude.new_zeros(R * r, C * c)
    padded[:rows, :cols] = magnitude.view(rows, cols)
    amax = padded.view(R, r, C, c).amax(dim=(1, 3))

    def per_value(grid: torch.Tensor) -> torch.Tensor:
        """A value per block as a value per element of the matrix (flat)."""
        full = grid[:, None, :, None].expand(R, r, C, c).reshape(R * r, C * c)
        return full[:rows, :cols].reshape(-1)

    zero_block = torch.zeros_like(amax, dtype=torch.bool)
    nan_block = amax >= 0x7F80_0000
    divide = block.scheme == "tile"
    if block.scheme == "mx":
        down, up = _mx_scales(amax, block.element)
    elif block.scheme == "nvfp4":
        down, up, zero_block = _nvfp4_scales(amax, tensor_amax)
    elif block.scheme == "tile":
        down = up = _tile_scales(amax, block.element)
    else:
        raise ValueError(f"block scheme '{block.scheme}': not simulated on torch tensors")
    zero_block, nan_block = per_value(zero_block), per_value(nan_block)
    down, up = per_value(down), per_value(up)

    # Into the element's range, in float32 arithmetic (or float64's for float64 values).
    scaled = _i64(_divide(_f64(x), _f64(down)) if divide else _f64(x) * _f64(down))
    if single:
        scaled = _to_f32(scaled)  # the exact product, or the float64 quotient, rounded once
        # `sticky`: a nonzero value that vanished keeps its sign and f32's lowest bit.
        vanished = ((x & _ABS) != 0) & ((scaled & _ABS) == 0)
        scaled = torch.where(vanished, (scaled & _SIGN) | _F32_MIN_SUBNORMAL, scaled)
    scaled = torch.where(zero_block, x & _SIGN, scaled)
    scaled = torch.where(nan_block, _NAN, scaled)
    # A block whose scale back overflows (NVFP4's dequantiser beyond f32's max) leaves as
    # infinities and NaNs: each of its values counts as overflow, not as its element rounded.
    lost = ((up & _ABS) == _INF) & ~zero_block & ~nan_block
    element = _round(scaled, block.element, replace(o, saturate=True), u, counts, ~lost)
    underflow = (zero_block & ((x & _ABS) != 0)).sum()
    zero = torch.zeros_like(underflow)
    counts.append(torch.stack([underflow, zero, lost.sum(), zero, zero]))

    value = _f32_mul(element, up) if single else _i64(_f64(element) * _f64(up))
    # 0 x inf (NVFP4's dequantisation overflowed): the library's NaN, on every machine.
    value = torch.where(((element & _ABS) == 0) & lost, _NAN, value)
    value = torch.where(zero_block, element, value)
    return torch.where(nan_block, element if single else torch.full_like(x, _NAN), value)


def _mx_scales(amax: torch.Tensor, f: _Element) -> Tuple[torch.Tensor, torch.Tensor]:
    """``MxFormat::scale``: ``2^-e`` and ``2^e`` (float64 patterns) for the E8M0 scale
    ``2^e``, ``e = floor(log2 amax) - emax`` clamped to -127..=127."""
    floor_log2 = torch.where(
        amax >= 0x80_0000,
        (amax >> 23) - 127,
        torch.where(amax == 0, -126, _bit_length(amax) - 150),
    )
    e = (floor_log2 - f.emax).clamp(-127, 127)
    return (1023 - e) << 52, (1023 + e) << 52


def _nvfp4_scales(
    amax: torch.Tensor, tensor_amax: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``Nvfp4TensorScale::scale`` of each block: the encode and decode factors (float64
    patterns of float32 values) and whether the block's E4M3 scale rounded to zero."""
    f32 = np.float32
    with np.errstate(all="ignore"):
        amax_t = np.frombuffer(struct.pack("<I", tensor_amax), dtype=np.float32)[0]
        encode = min(f32(2688) / amax_t, f32(_F32_MAX))
        if amax_t == 0 or encode == 0:
            encode = f32(1)
        decode = f32(1) / encode
        factor = encode * (f32(1) / f32(6))
    # s_b = e4m3(amax_b * factor), nearest-even, saturating.
    s = _f32_mul(_widen(amax), float(factor))
    s = _round(s, _element("fp8-e4m3"), _Options("nearest-even", True, True), None, None)
    # down = min(1 / (s_b * S_dec), FLT_MAX), up = (s_b * amax_t) * f32(1 / 2688).
    product = _f64(_f32_mul(s, float(decode)))
    down = _to_f32(_i64(_divide(torch.ones_like(product), product)))
    down = torch.where(down > _bits(_F32_MAX), _bits(_F32_MAX), down)
    up = _f32_mul(_f32_mul(s, float(amax_t)), float(f32(1) / f32(2688)))
    return down, up, s == 0


def _tile_scales(amax: torch.Tensor, f: _Element) -> torch.Tensor:
    """``TileFormat::tile_scale``: ``amax / max_elem`` in float32, 1 for a zero tile, at least
    2^-149 (float64 patterns)."""
    block_amax = _f64(_widen(amax))
    quotient = _to_f32(_i64(_divide(block_amax, torch.full_like(block_amax, f.max))))
    scale = torch.where(quotient == 0, _F32_MIN_SUBNORMAL, quotient)
    return torch.where(amax == 0, _bits(1.0), scale)


def _f32_mul(a: torch.Tensor, b: Union[float, torch.Tensor]) -> torch.Tensor:
    """``a * b`` in float32 arithmetic, for float64 patterns of float32 values (``b`` a float32
    value or such patterns): the product, exact in float64, rounded once into fp32."""
    return _to_f32(_i64(_f64(a) * (_f64(b) if isinstance(b, torch.Tensor) else b)))


def _divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a / b`` correctly rounded: both tensors on the device (torch's CUDA kernel multiplies
    by the reciprocal of a divisor given as a host scalar, which is not the quotient)."""
    return torch.div(a, b)

def quantize(
    t: torch.Tensor,
    format: str,
    rounding: str = "nearest-even",
    overflow: str = "ieee",
    subnormals: bool = True,
    seed: int = 0,
    *,
    out: Optional[torch.Tensor] = None,
    return_counts: bool = False,
) -> Any:
    """Rounds every value of the torch tensor ``t`` into ``format``: :func:`mixprec.quantize`'s
    arguments and result, bit for bit, on tensors.

    CPU tensors (float32 or float64, any strides) are viewed as numpy arrays without a copy and
    rounded by the Rust kernels (C-contiguous ones in place, on all cores); tensors on other
    devices are rounded there by torch operations that give the same bits
    (``mixprec._torch_round``). Block formats run along the last axis (tiles over the last two),
    as for numpy arrays.

    Args:
        t: the tensor (not modified unless it is ``out``; autograd does not see the rounding).
        format, rounding, overflow, subnormals, seed, return_counts: as :func:`mixprec.quantize`.
        out: where to write the result: ``t`` itself, or a tensor of ``t``'s dtype, shape and
            device.

    Returns:
        The rounded tensor (``out`` when given), or ``(tensor, counts)`` with ``return_counts``.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"t: expected a torch tensor, got {type(t).__name__}")
    if out is not None and not isinstance(out, torch.Tensor):
        raise TypeError(f"out: expected a torch tensor, got {type(out).__name__}")
    check_tensor(t, "t")
    if out is not None and out.device != t.device:
        raise ValueError(f"out: on {out.device}, not t's device {t.device}")
    if t.device.type != "cpu":
        result = quantize_torch(
            t.detach(), format, rounding, overflow, subnormals, seed, return_counts
        )
        y, counts = result if return_counts else (result, None)
        if out is not None:
            out.copy_(y)
            y = out
        return (y, counts) if return_counts else y
    if t.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"t: expected a float32 or float64 tensor, got {t.dtype}")
    x = t.detach().numpy()
    dest = None if out is None else out.detach().numpy()
    y, counts = _quantize_numpy(
        x, format, rounding, overflow, subnormals, seed, dest, return_counts=True
    )
    y = out if out is not None else torch.from_numpy(y)
    return (y, counts) if return_counts else y
