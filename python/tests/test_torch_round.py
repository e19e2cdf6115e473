"""The torch rounding path (mixprec._torch_round) against the Rust kernels, bit for bit.

``quantize_torch`` is the path for tensors on a GPU; here it runs on CPU tensors and is compared
with :func:`mixprec.quantize` (the Rust kernels) on the same values: every bit pattern of the
results (NaNs included: the Rust defines their sign and payload) and the counts, for every
element preset, a few ``eXmY``, every block format, every rounding mode, both overflow rules,
subnormals on and off, several seeds, float32 and float64 inputs and several shapes.
"""

import itertools
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed (scripts/python-test installs it)"
)

import mixprec  # noqa: E402
from mixprec._torch_round import _block_key, _stochastic_bits, quantize_torch  # noqa: E402

ELEMENTS = [
    "fp32", "tf32", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "fp6-e2m3", "fp6-e3m2", "fp4-e2m1",
    "e3m4", "e6m9", "e2m1", "e8m1", "e5m23",
]
BLOCKS = [
    "mxfp8-e4m3", "mxfp8-e5m2", "mxfp6-e2m3", "mxfp6-e3m2", "mxfp4", "nvfp4",
    "fp8-e4m3@1x128", "fp8-e4m3@128x128", "fp16@2x3", "e3m4@3x5", "fp4-e2m1@1x7",
]
MODES = ["nearest-even", "toward-zero", "up", "down", "stochastic"]
SEEDS = [0, 7, 2**64 - 1]
ROOT = pathlib.Path(__file__).resolve().parents[2]
UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float64): np.uint64}


def same(x, fmt, rounding="nearest-even", overflow="ieee", subnormals=True, seed=0):
    """Asserts that both paths give the same bits and counts for the numpy array ``x``;
    returns how many values were compared."""
    want, want_counts = mixprec.quantize(
        x, fmt, rounding, overflow, subnormals, seed, return_counts=True
    )
    t = torch.from_numpy(x)
    got, counts = quantize_torch(t, fmt, rounding, overflow, subnormals, seed, return_counts=True)
    assert got.dtype == t.dtype and got.shape == t.shape and got.device == t.device
    what = (fmt, rounding, overflow, subnormals, seed, x.dtype.name, x.shape)
    g, w = got.numpy().view(UINT[x.dtype]).ravel(), want.view(UINT[x.dtype]).ravel()
    bad = np.flatnonzero(g != w)
    if bad.size:
        i = bad[0]
        raise AssertionError(
            f"{what}: {bad.size} values differ, first x[{i}] = {x.ravel()[i]!r}: "
            f"got {got.numpy().ravel()[i]!r} ({g[i]:#x}), want {want.ravel()[i]!r} ({w[i]:#x})"
        )
    assert counts == want_counts, what
    return x.size


def log_uniform(rng, n, lo, hi, dtype):
    """``n`` values of both signs with log2-magnitudes uniform in ``lo..hi``, random mantissas."""
    with np.errstate(over="ignore", under="ignore"):
        v = rng.choice([-1.0, 1.0], n) * np.exp2(rng.uniform(lo, hi, n))
        return v.astype(dtype)


def element_limits(fmt):
    """For an element format, as float64: ties at every binade (between neighbours, and just
    below each power of two), the subnormal/normal boundary and its tie, just below the smallest
    normal, the largest value, its half-ulp tie and its neighbours, twice it, half the smallest
    subnormal (a tie with zero) and three quarters of it."""
    f = mixprec.formats(fmt)[0]
    m, emin = f["mantissa_bits"], 1 - f["bias"]
    emax = int(np.frexp(f["max"])[1]) - 1
    out = []
    for k in range(emin - m - 2, emax + 2):
        ulp = 2.0 ** (max(k, emin) - m)
        for j in (0, 1, 2, 3, 2**m - 1):
            base = 2.0**k + j * ulp
            out += [base + ulp / 2, base + ulp / 4, base + 3 * ulp / 4]
        out += [2.0**k - ulp / 4, 2.0**k * (1 - 2.0**-30)]
    sub, normal, top = f["min_subnormal"], f["min_normal"], f["max"]
    ulp_top = 2.0 ** (emax - m)
    out += [normal - sub / 2, normal - sub, normal * (1 - 2.0**-40), normal, normal + sub / 2]
    out += [top, top + ulp_top / 2, top + ulp_top / 2 * (1 + 2.0**-30),
            top + ulp_top / 2 * (1 - 2.0**-30), top + ulp_top, 2 * top, top * (1 - 2.0**-40)]
    out += [sub, sub / 2, sub * 0.75, sub * 1.5, sub * 2.5, sub / 4]
    return out


def specials(dtype):
    """Zeros, infinities, NaNs with several payloads and signs, float32 subnormals, huge and tiny
    values (and float64 subnormals for float64)."""
    u = UINT[np.dtype(dtype)]
    if dtype == np.float32:
        patterns = [0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF, 0x7FD23456,
                    1, 2, 3, 0x7FFFFF, 0x400000, 0x400001, 0x3FFFFF, 0x80000001, 0x807FFFFF,
                    0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x00800001]
    else:
        patterns = [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001,
                    0x7FF7FFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF, 0x7FF8123456789ABC,
                    1, 2, 0xFFFFFFFFFFFFF, 0x8000000000000001, 0x7FEFFFFFFFFFFFFF,
                    0x0010000000000000, 0x36A0000000000000, 0x36A0000000000001,
                    0x369FFFFFFFFFFFFF, 0x3690000000000000]
    v = np.array(patterns, dtype=u).view(dtype)
    plain = np.array([0.0, -0.0, np.inf, -np.inf, 1.0, -1.0, 1e-30, 1e30, 3e38, 1e-45, 65520.0,
                      448.0, 464.0, 465.0, 480.0, 57344.0, 61440.0, 7.5, 7.75, 28.0, 30.0, 6.0,
                      7.0], dtype=dtype)
    if dtype == np.float64:
        plain = np.concatenate([plain, [1e300, -1e300, 1e-310, 5e-324, 2.0**-149 * 1.5,
                                        2.0**-150, 2.0**-150 * (1 + 2.0**-40)]])
    return np.concatenate([v, plain])


def element_values(fmt, dtype, seed=3):
    rng = np.random.default_rng(seed)
    lo = -160 if dtype == np.float32 else -1080
    hi = 130 if dtype == np.float32 else 1030
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        limits = np.array(element_limits(fmt), dtype=np.float64)
        limits = np.concatenate([limits, -limits]).astype(dtype)
        near = np.concatenate([np.nextafter(limits, np.inf), np.nextafter(limits, -np.inf)])
        return np.concatenate([
            log_uniform(rng, 3000, lo, hi, dtype),
            log_uniform(rng, 3000, -40, 20, dtype),
            limits, near, specials(dtype),
        ])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", ELEMENTS)
def test_element_formats_equal_rust_bit_for_bit(fmt, dtype):
    x = element_values(fmt, dtype)
    n = 0
    for rounding, overflow, subnormals in itertools.product(MODES, ["ieee", "saturate"],
                                                            [True, False]):
        for seed in SEEDS if rounding == "stochastic" else [0]:
            n += same(x, fmt, rounding, overflow, subnormals, seed)
    # A 2-D tensor: the stream positions are the C-order indices.
    n += same(x[: (x.size // 7) * 7].reshape(7, -1), fmt, "stochastic", "ieee", True, 3)
    assert n > 100_000


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "e4m3fn", "half"])
def test_every_fp16_pattern(fmt):
    x = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float32)
    for rounding in MODES:
        for overflow, subnormals in [("ieee", True), ("saturate", False)]:
            same(x, fmt, rounding, overflow, subnormals, seed=11)


def block_values(shape, dtype, seed):
    """Blocks of every magnitude: each row's values spread 40 binades below a magnitude that
    changes from row to row (f32 subnormals to near f32's max), with zeros, a zero row, tiny
    values in big blocks and (when ``special``) NaN and infinities."""
    rng = np.random.default_rng(seed)
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    cols = shape[-1] if shape else 1
    top = rng.uniform(-140, 126, (rows, 1))
    if dtype == np.float64:
        top = np.where(rng.random((rows, 1)) < 0.2, rng.uniform(-1000, 1000, (rows, 1)), top)
    below = rng.uniform(0, 40, (rows, cols))
    with np.errstate(over="ignore", under="ignore"):
        v = rng.choice([-1.0, 1.0], (rows, cols)) * np.exp2(top - below)
        v = v.astype(dtype)
    v[rng.random((rows, cols)) < 0.05] = 0
    if rows > 3:
        v[2] = 0
        v[3, ::3] = rng.choice([-1.0, 1.0], v[3, ::3].shape) * np.float32(1e-40)
    return np.ascontiguousarray(v.reshape(shape))


def with_specials(v):
    v = v.copy()
    flat = v.reshape(-1)
    flat[5] = np.nan
    flat[min(70, flat.size - 1)] = -np.inf
    flat[min(150, flat.size - 1)] = np.inf
    return v


def block_shapes(fmt):
    if "@" in fmt:
        return [(45,), (37, 45), (3, 130, 70), (5, 1)]
    return [(1000,), (37, 45), (6, 64), (2, 3, 17), ()]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", BLOCKS)
def test_block_formats_equal_rust_bit_for_bit(fmt, dtype):
    n = 0
    for i, shape in enumerate(block_shapes(fmt)):
        x = block_values(shape, dtype, seed=i)
        cases = [x, with_specials(x)] if x.size > 5 else [x]
        for v in cases:
            for rounding, subnormals in itertools.product(MODES, [True, False]):
                for seed in SEEDS if rounding == "stochastic" else [0]:
                    n += same(v, fmt, rounding, "ieee", subnormals, seed)
            n += same(v, fmt, "nearest-even", "saturate", True, 0)
    assert n > 10_000


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nvfp4_edge_cases(dtype):
    """A zero tensor; block scales that round to zero; a tensor amax above f32's max over 448,
    whose dequantisation overflows (infinities, and NaN for zero elements)."""
    zeros = np.zeros(40, dtype=dtype)
    zeros[3] = -0.0
    tiny_blocks = np.concatenate([np.full(16, 1e-12), [1e3] * 16, np.full(16, 1e-9)])
    huge = np.concatenate([[1e36, 1.0, 0.0, -1e36, 1e35, 1e-3], np.full(10, 2.0)])
    for x in (zeros, tiny_blocks.astype(dtype), huge.astype(dtype)):
        for rounding in MODES:
            same(x, "nvfp4", rounding, "ieee", True, 5)
            same(x, "nvfp4", rounding, "ieee", False, 5)


def test_tile_quotients_in_f32_subnormals():
    """Tiles of a huge amax holding tiny values: quotients in float32's subnormals, formed in
    float64 and rounded once into float32 (the division's correct rounding)."""
    rng = np.random.default_rng(9)
    x = log_uniform(rng, 128 * 40, -140, -100, np.float32).reshape(40, 128)
    x[:, 0] = np.float32(3e38)
    x[::2, 0] = np.float32(1e30)
    for fmt in ("fp8-e4m3@1x128", "e5m10@1x128", "fp8-e4m3@4x32"):
        for rounding in MODES:
            same(x, fmt, rounding, "ieee", True, 1)
            same(x, fmt, rounding, "ieee", False, 1)


def known_stream():
    """The rows of tests/data/stochastic_bits.txt, the stream's known values (computed apart from
    the code; random.rs's tests read them too): ``{"key": [(seed, hi, splitmix64)], "bits":
    [(seed, index, bits)]}``."""
    rows = {"key": [], "bits": []}
    for line in (ROOT / "tests" / "data" / "stochastic_bits.txt").read_text().splitlines():
        words = line.split()
        if words and words[0] in rows:
            rows[words[0]].append(tuple(int(w, 0) for w in words[1:]))
    return rows


def test_stochastic_bits_known_values():
    """The stream's known values, across 2^32 boundaries."""
    known = known_stream()
    assert (len(known["key"]), len(known["bits"])) == (2, 8), "rows of stochastic_bits.txt"
    for seed, hi, z in known["key"]:
        assert _block_key(seed, hi) == ((z & 0xFFFFFFFF) | 1, z >> 32), (seed, hi)
    for seed, index, bits in known["bits"]:
        got = _stochastic_bits(seed, index, 1, torch.device("cpu"))
        assert got.tolist() == [bits], (seed, index)
    # A stretch that crosses a key boundary draws each position's own key.
    stretch = _stochastic_bits(0, (1 << 32) - 2, 4, torch.device("cpu")).tolist()
    assert stretch[2] == next(b for s, i, b in known["bits"] if (s, i) == (0, 1 << 32))


def test_stochastic_threshold():
    """Values whose discarded fraction, as 32 bits, equals their position's random bits (no
    rounding up: the Rust rounds up only when the fraction exceeds them), is just above it, or
    one below: float64 values near 1 into fp16 keep 42 bits below its quantum 2^-10."""
    n = 4096
    u = _stochastic_bits(5, 0, n, torch.device("cpu")).numpy().astype(np.int64)
    for offset in (0, 1023, 1024, -1):
        rest = (u << 10) + offset
        x = 1.0 + np.clip(rest, 0, 2**42 - 1).astype(np.float64) * 2.0**-52
        same(x, "fp16", "stochastic", "ieee", True, 5)
        same(np.ldexp(x, -20), "fp16", "stochastic", "ieee", True, 5)  # subnormals of fp16


def test_results_keep_dtype_shape_and_c_order():
    rng = np.random.default_rng(4)
    base = torch.from_numpy(log_uniform(rng, 37 * 41 * 3, -30, 10, np.float32)).view(37, 41, 3)
    for view in (base[::2, ::3], base.transpose(0, 2), base[:, 5:30, 1]):
        for fmt in ("fp16", "mxfp8-e4m3", "fp8-e4m3@2x8"):
            got = quantize_torch(view, fmt, "stochastic", seed=3)
            want = mixprec.quantize(np.ascontiguousarray(view.numpy()), fmt, "stochastic", seed=3)
            assert got.shape == view.shape and got.dtype == view.dtype
            assert np.array_equal(got.numpy().view(np.uint32), want.view(np.uint32))
    # 0-d, empty, and a tensor that requires grad (rounded, not recorded).
    assert quantize_torch(torch.tensor(0.1), "fp16").item() == np.float32(0.0999755859375)
    empty, counts = quantize_torch(torch.zeros(0, 3), "nvfp4", return_counts=True)
    assert empty.shape == (0, 3) and counts == dict.fromkeys(counts, 0)
    w = torch.ones(3, dtype=torch.float64, requires_grad=True)
    assert not quantize_torch(w * 0.1, "bf16").requires_grad


def test_passes_of_a_large_tensor(monkeypatch):
    """A tensor rounded in several passes (whole bands of blocks for block formats, the stream
    positions running on) gives the bits of one pass."""
    import mixprec._torch_round as tr

    monkeypatch.setattr(tr, "_CHUNK", 1000)
    x = block_values((6, 130, 70), np.float32, seed=8)
    for fmt in ("fp16", "e3m4", "mxfp8-e4m3", "nvfp4", "fp8-e4m3@128x128", "fp16@3x7"):
        for rounding in ("nearest-even", "stochastic"):
            same(x, fmt, rounding, "ieee", True, 3)
            same(x.astype(np.float64), fmt, rounding, "ieee", False, 3)
    same(with_specials(x), "nvfp4", "stochastic", "ieee", True, 3)


class Wrapper(torch.Tensor):
    """A CPU float32 tensor without storage of its own, as FSDP2's DTensor: ``data_ptr`` is 0
    plus its storage offset; it can become a parameter (detach) and does nothing else."""

    @staticmethod
    def __new__(cls, shape, offset=0):
        strides = torch.empty(shape).stride()
        return torch.Tensor._make_wrapper_subclass(
            cls, shape, strides=strides, storage_offset=offset, dtype=torch.float32)

    def __init__(self, shape, offset=0):
        self.offset = offset

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.detach.default:
            return Wrapper(tuple(args[0].shape), args[0].offset)
        raise NotImplementedError(func)


def test_tensor_rounder_equals_quantize_into():
    """Simulate's rounder of CPU float32 tensors (``_mixprec.TensorRounder``) gives the bits and
    counts of ``quantize_into`` into a new tensor and in place, at any storage offset, for
    element and block formats, and with ``amax`` the source's largest finite magnitude before
    rounding (in place too); a tensor it cannot read where it lies, or a ``dst`` that
    overlaps ``src``, is refused."""
    from mixprec import _mixprec

    keys = ("underflow", "subnormal", "overflow", "nan", "infinite")
    for fmt in ("fp16", "bf16", "fp8-e4m3", "e3m4", "mxfp8-e4m3", "nvfp4", "fp8-e4m3@128x128"):
        for rounding, overflow, subnormals, seed in [("nearest-even", "ieee", True, 0),
                                                     ("stochastic", "saturate", False, 9)]:
            r = _mixprec.TensorRounder(fmt, rounding, overflow, subnormals, torch.float32)
            for i, shape in enumerate([(37, 45), (3, 130, 70), (1,), (0, 3)]):
                x = with_specials(block_values(shape, np.float32, i)) if i < 2 else \
                    block_values(shape, np.float32, i)
                want = np.empty_like(x)
                c = _mixprec.quantize_into(x, want, fmt, rounding, overflow, subnormals, seed)
                want_counts = tuple(c[k] for k in keys)
                # Into a new tensor, and in place in a slice of a larger one (an offset).
                src = torch.from_numpy(x.copy())
                dst = torch.full_like(src, 7.0)
                big = torch.zeros(5 + x.size)
                inplace = big[5:].view(x.shape)
                inplace.copy_(src)
                finite = np.abs(x[np.isfinite(x)])
                top = float(finite.max()) if finite.size else 0.0
                for s, d in [(src, dst), (inplace, inplace)]:
                    for amax in (False, True):
                        if d is inplace:
                            d.copy_(src)
                        got = r.round_into(s, d, seed, amax)
                        assert got == (*want_counts, top if amax else None), (fmt, rounding, shape)
                        assert np.array_equal(d.numpy().view(np.uint32), want.view(np.uint32))
                assert np.array_equal(src.numpy().view(np.uint32), x.view(np.uint32))
                assert big[:5].eq(0).all()
    r = _mixprec.TensorRounder("fp16", "nearest-even", "ieee", True, torch.float32)
    z = torch.tensor(0.1)
    assert r.round_into(z, z, 0, True) == (0, 0, 0, 0, 0, np.float32(0.1))
    assert z.item() == np.float32(0.0999755859375)
    for values, top in [([1.0, np.inf, -3.0], 3.0), ([np.nan, 2.0], 2.0), ([-np.inf, np.nan], 0.0)]:
        v = torch.tensor(values)
        assert r.round_into(v, torch.empty_like(v), 0, True)[5] == top, values
    t = torch.ones(4, 6)
    for bad in (t.double(), t.t(), t[:, ::2], t.half(), np.ones(3, np.float32)):
        with pytest.raises(TypeError, match="expected a contiguous float32 CPU tensor"):
            r.round_into(bad, bad, 0)
    with pytest.raises(ValueError, match="shape"):
        r.round_into(t, torch.ones(6, 4), 0)

    # CPU tensors without storage of their own, as a DTensor: data_ptr is 0 plus the storage
    # offset (as torch's TwoTensor of slices says 8).
    for offset in (0, 4):
        for src, dst in [(Wrapper((4, 6), offset), t), (t, Wrapper((4, 6), offset))]:
            with pytest.raises(TypeError, match="without storage of its own"):
                r.round_into(src, dst, 0)
    # A negative view: its memory holds the values negated.
    neg = torch._neg_view(torch.ones(3))
    assert neg.is_neg() and neg.is_contiguous()
    with pytest.raises(TypeError, match="not a negative view"):
        r.round_into(neg, torch.empty(3), 0)
    flat = t.view(-1)
    for src, dst in [(flat[1:], flat[:-1]), (flat[:-1], flat[1:])]:
        with pytest.raises(ValueError, match="overlaps"):
            r.round_into(src, dst, 0)
    # The two halves of one buffer, side by side, share no memory.
    halves = torch.full((2, 12), 0.1)
    assert r.round_into(halves[0], halves[1], 0) == (0, 0, 0, 0, 0, None)
    assert halves[1].eq(np.float32(0.0999755859375)).all() and halves[0].eq(np.float32(0.1)).all()
    with pytest.raises(ValueError):
        _mixprec.TensorRounder("fp17", "nearest-even", "ieee", True, torch.float32)


def test_no_value_reaches_the_host():
    """On the meta device (shapes without data, where reading a value raises) every format but
    NVFP4 rounds: nothing is read back; NVFP4 reads one number, the tensor's amax."""
    for fmt in ("fp16", "fp8-e4m3", "e3m4", "mxfp4", "fp8-e4m3@128x128", "fp16@2x3"):
        for dtype in (torch.float32, torch.float64):
            for rounding in MODES:
                t = torch.empty(3, 70, device="meta", dtype=dtype)
                y = quantize_torch(t, fmt, rounding, subnormals=False)
                assert (y.device, y.dtype, y.shape) == (t.device, t.dtype, t.shape)
    with pytest.raises(RuntimeError, match="item"):
        quantize_torch(torch.empty(3, 70, device="meta"), "nvfp4")


def test_bad_arguments_get_the_numpy_messages():
    x = np.ones(3, dtype=np.float32)
    t = torch.from_numpy(x)
    cases = [
        (ValueError, [{"format": "fp17"}, {"rounding": "nearest-odd"}, {"overflow": "clamp"},
                      {"format": "fp8-e4m3@0x128"}, {"format": "mxfp9"}, {"seed": -1},
                      {"seed": 2**64}]),
        (TypeError, [{"format": 16}, {"rounding": None}, {"subnormals": 1}, {"seed": 1.5},
                     {"seed": True}]),
    ]
    for error, bad in cases:
        for kwargs in bad:
            args = {"format": "fp16", **kwargs}
            with pytest.raises(error) as want:
                mixprec.quantize(x, **args)
            with pytest.raises(error) as got:
                quantize_torch(t, **args)
            assert str(got.value) == str(want.value)
    for bad in (x, torch.ones(3, dtype=torch.float16), torch.ones(3, dtype=torch.int32)):
        with pytest.raises(TypeError):
            quantize_torch(bad, "fp16")


def test_mode_aliases_mean_the_same_modes():
    """Every alias of the library's table (``mixprec._names()``), in capitals too."""
    x = element_values("fp16", np.float32)
    t = torch.from_numpy(x)
    table = mixprec._names()["rounding"]
    assert len(table) == len(MODES)
    pairs = [(a, r["name"]) for r in table for a in (*r["aliases"], r["aliases"][0].upper())]
    for alias, mode in pairs:
        want = quantize_torch(t, "fp16", mode, "SATURATE", seed=2)
        got = quantize_torch(t, "fp16", alias, "saturate", seed=2)
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), alias
        same(x, "fp16", alias, "Saturate", True, 2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "mxfp8-e4m3", "nvfp4", "fp8-e4m3@1x128"])
def test_cuda_rounds_the_bits_and_counts_of_the_cpu(fmt):
    """On CUDA, torch operations give the Rust kernels' bits and counts (nearest and
    stochastic rounding, awkward magnitudes)."""
    from mixprec.torch import quantize

    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 256, generator=g) * torch.exp2(torch.randint(-40, 20, (37, 256), generator=g).float())
    for rounding in ("nearest-even", "stochastic"):
        want, wc = quantize(x, fmt, rounding, seed=9, return_counts=True)
        got, gc = quantize(x.cuda(), fmt, rounding, seed=9, return_counts=True)
        assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32)) and gc == wc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_amax_is_torchs_largest_magnitude_in_any_layout(dtype):
    """``amax`` (the binding's pass over the bits, which the Recorder's and Simulate's
    grad_amax read) against torch's ``abs().amax()`` of the same tensor in float64: every
    16-bit pattern, awkward lengths (a tail past the 32 lanes, the largest value last or
    first), a transpose, a stride-0 broadcast and a strided slice, negative values, infinity
    and NaN."""
    from mixprec._torch_round import amax

    def want(x):
        return float(x.double().abs().amax())

    g = torch.Generator().manual_seed(3)
    cases = []
    if dtype != torch.float32:
        every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
        cases += [every, every[every.isfinite()], every[~every.isnan()]]
    for n in (1, 31, 32, 33, 1023):
        scale = 2.0 ** torch.randint(-20, 10, (n,), generator=g)
        x = (torch.randn(n, generator=g) * scale).to(dtype)
        cases += [x, -x.abs(), x.flip(0)]
        y = x.clone()
        y[-1] = -1e4  # the largest, negative, in the tail
        cases.append(y)
    m = (torch.randn(65, 70, generator=g) * 100).to(dtype)
    cases += [m.t(), m[:, ::3], m[:1].expand(40, 70), torch.zeros(3, dtype=dtype),
              torch.full((5,), -0.0, dtype=dtype)]
    for c in cases:
        got = amax(c)
        finite = c.isfinite()
        if finite.all():
            assert got == want(c), (c.shape, got, want(c))
        else:
            assert not np.isfinite(got) and np.isnan(got) == bool(c.isnan().any())
    for special, nan in ((float("inf"), False), (float("-inf"), False), (float("nan"), True)):
        x = torch.ones(100, dtype=dtype)
        x[40] = special
        got = amax(x)
        assert np.isnan(got) == nan and not np.isfinite(got)
        x[41] = float("nan")
        assert np.isnan(amax(x))


def test_the_node_hooks_read_each_gradient_as_amax():
    """The Recorder's node hooks (``_mixprec.NodeHook``, read in Rust where a tensor lies) keep,
    per hook called, the largest finite magnitude of the gradients of its edges and sums and
    whether one held an inf or NaN, as ``amax`` reads each: every dtype, a slice with a storage
    offset, a transpose, a permutation, a broadcast (stride 0), a strided slice (read by
    ``amax``: its block holds values it skips), an odd tail, a 0-dim and an empty tensor, one
    that requires grad, float64 (read by ``amax`` itself); only an inf or NaN passed on, not one
    summed, calls back. A cast's hook also reads the gradient it received, where shapes agree."""
    from mixprec import _mixprec
    from mixprec._torch_round import amax

    reader = _mixprec.GradAmax(torch.Tensor, torch.strided, torch.float32, torch.float16,
                               torch.bfloat16, amax, torch._C._current_graph_task_id)
    called = []
    g = torch.Generator().manual_seed(5)
    cases = []
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        x = (torch.randn(67, 33, generator=g) * 2.0 ** torch.randint(-9, 9, (67, 33), generator=g))
        x = x.to(dtype)
        x[0, 0] = -5e4  # the largest, negative, before the offset below
        x[66, 32] = -7e3  # the largest past it, in the tail
        skipped = x.clone()
        skipped[0, 1] = 6e4  # the largest of the block, not of the slice
        cases += [x, x[1:], x.t(), x[3, 5], x[:0], x.clone().requires_grad_(),
                  x[:64].reshape(4, 16, 3, 11).permute(2, 0, 3, 1), x[5:7].expand(3, 2, 33),
                  x[:, 2:3].expand(67, 5), skipped[:, ::2]]
        bad = x.clone()
        bad[9, 9] = float("nan") if dtype == torch.float32 else float("inf")
        cases.append(bad)
    for c in cases:
        for passed, sums in (([0], []), ([], [0])):
            hook = _mixprec.NodeHook(reader, "node", passed, sums,
                                     lambda *args: called.append(args))
            hook((c,) if passed else (None,), (c,) if sums else ())
            taken = reader.take()
            if not c.numel():
                assert taken == [] and not called
                continue
            m = amax(c.detach())
            finite = bool(np.isfinite(m))
            assert taken == [(-1, m if finite else 0.0, not finite)], (c.dtype, c.shape)
            assert len(called) == (0 if finite or sums else 1)
            called.clear()
    # A cast into float16: the values before rounding (float32) read beside those passed on.
    src = torch.randn(40, 8, generator=g)
    src[7, 3] = 1e5  # inf in float16
    for received, passed_on, want in (
        (src, src.half(), (1e5, True)),
        (src / 1e3, (src / 1e3).half(), (100.0, False)),
        (src[:20], src.half(), (0.0, True)),  # shapes differ: only the inf passed on
    ):
        hook = _mixprec.NodeHook(reader, "node", [0], [], lambda *args: called.append(args),
                                 True)
        hook((passed_on,), (received,))
        task, m, bad = reader.take()[0]
        assert (m, bad) == (pytest.approx(want[0], rel=1e-6), want[1])
        assert len(called) == want[1]
        called.clear()
