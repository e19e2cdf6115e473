"""The Python package against the command line (bit for bit) and against ml_dtypes.

The binary comes from the ``cli`` fixture (conftest.py).
"""

import json
import math
import pathlib

import numpy as np
import pytest

import mixprec

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORMATS = ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "tf32", "e3m2"]
MODES = ["nearest-even", "toward-zero", "up", "down", "stochastic"]


def values_f64():
    """Every fp16 pattern decoded, the neighbourhoods of each format's limits and ties, and
    log-uniform magnitudes from 1e-30 to 1e30 of both signs (seeded)."""
    fp16 = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64)
    rng = np.random.default_rng(12)
    random = rng.choice([-1.0, 1.0], 4000) * 10.0 ** rng.uniform(-30, 30, 4000)
    limits = []
    for f in mixprec.formats(*FORMATS):
        for v in (f["max"], f["min_normal"], f["min_subnormal"], f["epsilon"]):
            limits += [v, v / 2, v * 1.5, v * (1 + 2**-30), v * (1 - 2**-30), 2 * v]
    # Ties of fp16 (1 + (2k+1) 2^-11) and, through f64, values just off them.
    ties = 1 + (2 * np.arange(64) + 1) * 2.0**-11
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-8, 65519.99, 65520.0, 448.0, 465.0]
    v = np.concatenate([fp16, random, limits, ties, ties + 2.0**-40, special])
    return np.concatenate([v, -v])


def encode(values, fmt):
    """The bit patterns of ``values`` (all exactly in ``fmt``, none NaN), as `--output bits`."""
    f = mixprec.formats(fmt)[0]
    e_bits, m_bits, bias = f["exponent_bits"], f["mantissa_bits"], f["bias"]
    sign = np.signbit(values).astype(np.int64) << (e_bits + m_bits)
    a = np.abs(values)
    out = np.zeros(a.shape, dtype=np.int64)
    inf = np.isinf(a)
    out[inf] = ((1 << e_bits) - 1) << m_bits
    finite = ~inf & (a > 0)
    mant, exp = np.frexp(a[finite])  # a = mant * 2^exp, 0.5 <= mant < 1
    e = exp - 1
    emin = 1 - bias
    normal = e >= emin
    field = np.where(normal, e + bias, 0)
    m = np.where(
        normal, (mant * 2.0 - 1.0) * 2.0**m_bits, a[finite] / f["min_subnormal"]
    )
    assert np.all(m == np.round(m)), "a value not in the format"
    out[finite] = (field.astype(np.int64) << m_bits) | m.astype(np.int64)
    return out | sign


def cli_round(cli, values, fmt, rounding, overflow, subnormals, seed, output):
    args = ["quantize", "--format", fmt, "--rounding", rounding, "--overflow", overflow]
    args += ["--subnormals", "on" if subnormals else "off", "--seed", str(seed)]
    r = cli(*args, "--output", output, stdin="".join(f"{float(v)!r}\n" for v in values))
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


COMBOS = [(m, "ieee", True) for m in MODES] + [
    ("nearest-even", "saturate", True),
    ("toward-zero", "saturate", True),
    ("nearest-even", "ieee", False),
    ("stochastic", "ieee", False),
    ("up", "ieee", False),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fmt", FORMATS)
def test_quantize_equals_cli_bit_for_bit(cli, fmt, dtype):
    with np.errstate(over="ignore", invalid="ignore"):
        x = values_f64().astype(dtype)
    for rounding, overflow, subnormals in COMBOS:
        got = mixprec.quantize(x, fmt, rounding, overflow, subnormals, seed=7)
        assert got.dtype == dtype and got.shape == x.shape
        want = np.array(
            [float(s) for s in cli_round(cli, x, fmt, rounding, overflow, subnormals, 7, "value")]
        )
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        g = got.astype(np.float64)
        assert np.array_equal(g[~nan].view(np.int64), want[~nan].view(np.int64)), (
            fmt, rounding, overflow, subnormals)
        bits = cli_round(cli, x, fmt, rounding, overflow, subnormals, 7, "bits")
        want_bits = np.array([int(b, 16) for b in bits])
        assert np.array_equal(encode(g[~nan], fmt), want_bits[~nan]), (
            fmt, rounding, overflow, subnormals)


def test_every_fp16_pattern_is_kept():
    x = np.arange(2**16, dtype=np.uint16).view(np.float16)
    keep = ~np.isnan(x)
    for dtype in (np.float32, np.float64):
        got = mixprec.quantize(x.astype(dtype), "fp16")
        assert np.array_equal(got.astype(np.float16)[keep].view(np.uint16), x[keep].view(np.uint16))
        assert np.all(np.isnan(got[~keep]))


def ml_dtype_cases():
    ml_dtypes = pytest.importorskip(
        "ml_dtypes", reason="ml_dtypes is not installed (scripts/python-test installs it)"
    )
    return [
        ("fp16", np.float16),
        ("bf16", ml_dtypes.bfloat16),
        ("fp8-e4m3", ml_dtypes.float8_e4m3fn),
        ("fp8-e5m2", ml_dtypes.float8_e5m2),
    ]


def test_nearest_even_equals_ml_dtypes():
    """ml_dtypes' astype from float32 rounds to nearest even, overflowing to inf (NaN in
    float8_e4m3fn), subnormals kept: mixprec's defaults."""
    rng = np.random.default_rng(3)
    np.seterr(over="ignore", invalid="ignore")
    x = np.concatenate(
        [
            rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
            values_f64().astype(np.float32),
        ]
    )
    for fmt, dtype in ml_dtype_cases():
        want = x.astype(dtype).astype(np.float32)
        got = mixprec.quantize(x, fmt)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), fmt
        assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)), fmt


@pytest.mark.parametrize("rounding", ["nearest-even", "stochastic"])
def test_strides_and_orders(rounding):
    rng = np.random.default_rng(5)
    base = (rng.standard_normal((37, 41, 3)) * 1e-5).astype(np.float32)
    views = [
        lambda a: a[::2, ::3],
        lambda a: a[:, 5:30, 1],
        lambda a: a.transpose(2, 0, 1),
        np.asfortranarray,
    ]
    for make in views:
        v = make(base)
        want = mixprec.quantize(np.ascontiguousarray(v), "fp16", rounding, seed=9)
        got = mixprec.quantize(v, "fp16", rounding, seed=9)
        assert got.flags.c_contiguous and np.array_equal(got, want)
        # Into a strided out: only its elements are written.
        big = np.full((2 * v.shape[0],) + v.shape[1:], -1.0, dtype=np.float32)
        out = big[::2]
        assert mixprec.quantize(v, "fp16", rounding, seed=9, out=out) is out
        assert np.array_equal(out, want) and np.all(big[1::2] == -1)
        # In place on a strided view.
        copy = base.copy()
        inplace = make(copy)
        assert mixprec.quantize(inplace, "fp16", rounding, seed=9, out=inplace) is inplace
        assert np.array_equal(inplace, want)


def test_out_in_place_and_overlap():
    x = np.linspace(-1, 1, 1001, dtype=np.float64)
    want = mixprec.quantize(x, "fp8-e4m3")
    y = x.copy()
    r = mixprec.quantize(y, "fp8-e4m3", out=y)
    assert r is y and np.array_equal(y, want)
    # Overlapping views (out shifted by one element) read from the original values.
    z = np.concatenate([x, [0.0]])
    mixprec.quantize(z[:-1], "fp8-e4m3", out=z[1:])
    assert np.array_equal(z[1:], want)
    # 0-d and empty arrays.
    assert mixprec.quantize(np.array(0.1, dtype=np.float32), "fp16") == np.float32(
        0.0999755859375
    )
    assert mixprec.quantize(np.zeros((0, 3)), "fp16").shape == (0, 3)


def test_counts():
    x = np.array([1e-8, -1e-6, 7e4, np.nan, -np.inf, 1.0, 0.0], dtype=np.float32)
    got, counts = mixprec.quantize(x, "fp16", return_counts=True)
    assert counts == {"underflow": 1, "subnormal": 1, "overflow": 1, "nan": 1, "infinite": 1}
    assert got[0] == 0 and got[2] == np.inf and got[5] == 1
    _, counts = mixprec.quantize(x.astype(np.float64), "fp16", overflow="saturate",
                                 return_counts=True)
    assert counts["overflow"] == 1


def test_stochastic_depends_on_seed_only():
    x = np.full(10_000, 1 + 2.0**-12, dtype=np.float32)
    a = mixprec.quantize(x, "fp16", "stochastic", seed=1)
    assert np.array_equal(a, mixprec.quantize(x, "fp16", "stochastic", seed=1))
    assert not np.array_equal(a, mixprec.quantize(x, "fp16", "stochastic", seed=2))
    # 2^-12 is a quarter of fp16's ulp at 1: rounds up with probability 1/4 (the bound is
    # 4.6 standard deviations of the binomial share; the seed makes the test deterministic).
    assert 0.23 < np.mean(a > 1) < 0.27


def test_bad_arguments(cli):
    x = np.ones(3, dtype=np.float32)
    for option, value in [("format", "fp17"), ("rounding", "nearest-odd"), ("overflow", "clamp")]:
        with pytest.raises(ValueError) as e:
            mixprec.quantize(x, **{"format": "fp16", option: value})
        args = {"format": "fp16", "rounding": "nearest-even", "overflow": "ieee", option: value}
        r = cli("quantize", *[a for k, v in args.items() for a in (f"--{k}", v)], stdin="1\n")
        assert r.returncode == 2 and str(e.value) in r.stderr, (str(e.value), r.stderr)
    with pytest.raises(ValueError) as e:
        mixprec.formats("e9m3")
    assert str(e.value) in cli("formats", "e9m3").stderr
    with pytest.raises(ValueError) as e:
        mixprec.analyze({"a": x}, scales="5..2")
    assert str(e.value) in cli("analyze", "a.npy", "--scales", "5..2").stderr
    for bad in ([1.0, 2.0], np.ones(3, dtype=np.int64), np.ones(3, dtype=np.float16), "x"):
        with pytest.raises(TypeError):
            mixprec.quantize(bad, "fp16")
    with pytest.raises(TypeError):
        mixprec.quantize(x, 16)
    with pytest.raises(TypeError):
        mixprec.quantize(x, "fp16", out=np.ones(3, dtype=np.float64))
    with pytest.raises(ValueError):
        mixprec.quantize(x, "fp16", out=np.ones(4, dtype=np.float32))
    ro = np.ones(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        mixprec.quantize(x, "fp16", out=ro)
    with pytest.raises(ValueError):
        mixprec.quantize(x, "fp16", seed=-1)
    with pytest.raises(TypeError):
        mixprec.quantize(x, "fp16", seed=1.5)
    with pytest.raises(ValueError):
        mixprec.analyze({})
    with pytest.raises(TypeError):
        mixprec.analyze({"a": np.ones(3, dtype=np.int32)})
    with pytest.raises(ValueError):
        mixprec.analyze({"a": x}, max_underflow=2.0)
    with pytest.raises(ValueError):
        mixprec.analyze({"a": x}, margin=-1)


def test_formats_equal_cli(cli):
    r = cli("formats", "--json")
    assert r.returncode == 0
    assert mixprec.formats() == json.loads(r.stdout)
    r = cli("formats", "e3m4", "bf16", "--json")
    assert mixprec.formats("e3m4", "bf16") == json.loads(r.stdout)


def test_rounding_and_overflow_names_come_from_the_library():
    """Every name and alias of the library's tables (any case) is accepted by ``quantize`` and
    gives its canonical mode's bits; the public tuples are the tables' canonical names."""
    names = mixprec._names()
    assert mixprec.ROUNDING_MODES == tuple(MODES)
    assert mixprec.OVERFLOW_RULES == ("ieee", "saturate")
    assert [r["name"] for r in names["overflow"]] == list(mixprec.OVERFLOW_RULES)
    x = values_f64()
    aliases = 0
    for entry in names["rounding"]:
        mode = entry["name"]
        want = mixprec.quantize(x, "fp8-e4m3", mode, seed=3).view(np.uint64)
        for alias in entry["aliases"] + [mode.upper()]:
            got = mixprec.quantize(x, "fp8-e4m3", alias, seed=3).view(np.uint64)
            assert np.array_equal(got, want), (alias, mode)
            aliases += 1
    # nearest, rne, rz, truncate, ru, rd, sr, and the five modes in capitals.
    assert aliases == 12


def test_every_block_format_names_a_scheme_of_the_table():
    schemes = mixprec._names()["block_schemes"]
    blocks = [f for f in mixprec.formats() if "block_rows" in f]
    assert {f["scheme"] for f in blocks} == set(schemes)
    by_name = {f["name"]: f["scheme"] for f in blocks}
    assert [by_name["mxfp4"], by_name["nvfp4"], by_name["fp8-e4m3@1x128"]] == schemes
    assert mixprec.formats("bf16@4x8")[0]["scheme"] == "tile"


def test_the_classes_and_parts_tables_cover_a_run_directory(cli, tmp_path):
    """A run of ``mixprec train`` names in its counts every class of the table, in its
    captures only optimizer parts of the table, and its recipe holds a format at each class's
    ``recipe_key``."""
    out = tmp_path / "run"
    r = cli("train", "--recipe", "mxfp8", "--steps", "2", "--batch", "16", "--capture-every",
            "1", "--out", str(out))
    assert r.returncode == 0, r.stderr
    names = mixprec._names()
    classes = {c["name"]: c for c in names["classes"]}
    step = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert list(step["counts"]) == list(classes)
    recipe = json.loads((out / "config.json").read_text())["recipe"]
    keys = [(c["operand"], c["recipe_key"]) for c in classes.values() if c["recipe_key"]]
    assert len(set(keys)) == len(keys) == len(classes) - 1, keys  # all but the update's
    formats = {}
    for name, c in classes.items():
        if c["recipe_key"] is not None:
            holder = recipe["gemm_operands"] if c["operand"] else recipe
            formats[name] = holder[c["recipe_key"]]
    assert formats["gemm_input"] == "mxfp8-e4m3" and formats["gemm_grad_output"] == "mxfp8-e5m2"
    assert formats["master"] == "fp32" and "update" not in formats
    assert [n for n, c in classes.items() if c["operand"]] == [
        "gemm_input", "gemm_weight", "gemm_grad_output"
    ]
    sites = json.loads((out / "captures.jsonl").read_text().splitlines()[0])["sites"]
    parts = {s["part"] for s in sites if s.get("part")}
    adam = {p["name"] for p in names["optimizer_parts"] if p["optimizer"] == "adam"}
    assert parts == adam == {"adam_m", "adam_v", "adam_eps", "adam_denominator"}


def _json_numbers(d):
    """``explain --json``'s object with its non-finite numbers (strings in JSON) as floats."""
    for k, v in d.items():
        if isinstance(v, dict):
            _json_numbers(v)
        elif isinstance(v, str) and v in ("inf", "-inf", "nan") and k not in ("input", "kind", "event"):
            d[k] = float(v)
    return d


@pytest.mark.parametrize(
    "value,args",
    [
        ("0.1", ()),
        ("1e-8", ("--format", "bf16", "--rounding", "up")),
        ("70000", ()),
        ("-70000", ("--overflow", "saturate")),
        ("3e-5", ("--subnormals", "off")),
        ("1000", ("--format", "fp8-e4m3")),
        ("0x7c01", ()),
        ("0x7f", ("--format", "fp8-e4m3")),
        ("nan", ("--format", "fp4-e2m1")),
        ("-inf", ()),
        ("1e400", ()),
        ("2049", ("--rounding", "stochastic", "--seed", "7")),
    ],
)
def test_explain_equals_cli(cli, value, args):
    r = cli("explain", value, *args, "--json")
    assert r.returncode == 0, r.stderr
    want = _json_numbers(json.loads(r.stdout))
    kw = {a[2:]: b for a, b in zip(args[::2], args[1::2])}
    if "subnormals" in kw:
        kw["subnormals"] = kw["subnormals"] == "on"
    if "seed" in kw:
        kw["seed"] = int(kw["seed"])
    got = mixprec.explain(value, **kw)
    assert repr(got) == repr(want)  # NaN compares unequal to itself; its repr does not


def test_explain_numbers_and_errors():
    e = mixprec.explain(2.0**-25)
    assert (e["event"], e["stored"], e["tie"]) == ("underflow", 0.0, True)
    assert mixprec.explain(0.1)["value"] == 0.1  # a float is taken exactly
    assert mixprec.explain(np.float32(0.1))["value"] == float(np.float32(0.1))
    assert mixprec.explain(3)["stored"] == 3.0
    inf = mixprec.explain("inf")
    assert inf["value"] == math.inf and inf["stored"] == math.inf
    assert math.isnan(mixprec.explain("0x7e00")["stored"])
    assert mixprec.explain(70000)["neighbours"]["above"] == math.inf
    with pytest.raises(ValueError, match="'abc'"):
        mixprec.explain("abc")
    with pytest.raises(ValueError, match="fp99"):
        mixprec.explain(1.0, format="fp99")
    with pytest.raises(TypeError, match="bool"):
        mixprec.explain(True)
    with pytest.raises(TypeError, match="rounding"):
        mixprec.explain(1.0, rounding=3)


def without_files(d):
    """``d`` without the tensors' and windows' ``file`` (a path for the command, ``<array>``
    here)."""
    for t in d["tensors"] + d.get("windows", []):
        del t["file"]
    return d


def test_block_analysis_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(12)
    tensors = {
        "w": (rng.standard_normal((130, 70)) * 1e-4).astype(np.float32),
        "g": rng.standard_normal(5000) * 10.0 ** rng.uniform(-12, 1, 5000),
    }
    tensors["w"][0, :5] = [0.0, np.inf, np.nan, 1e-30, 7e4]
    np.savez(tmp_path / "t.npz", **tensors)
    views = {"w": np.asfortranarray(tensors["w"]), "g": np.repeat(tensors["g"], 2)[::2]}
    for flags, kwargs in [
        (["--format", "mxfp8-e4m3"], {"format": "mxfp8-e4m3"}),
        (["--format", "nvfp4"], {"format": "nvfp4"}),
        (["--format", "fp8-e4m3@128x128"], {"format": "fp8-e4m3@128x128"}),
        (["--compare-blocks=fp8-e5m2"], {"compare_blocks": "fp8-e5m2"}),
    ]:
        r = cli("analyze", str(tmp_path / "t.npz"), *flags, "--json")
        assert r.returncode == 0, r.stderr
        got = mixprec.analyze(views, **kwargs)
        assert all(t["file"] == "<array>" for t in got["tensors"])
        assert without_files(got) == without_files(json.loads(r.stdout)), flags
    # The loss-scale sweep's settings mean nothing to a block format: refused, not ignored.
    with pytest.raises(ValueError, match="block format mxfp8-e4m3 has no loss scale"):
        mixprec.analyze(views, format="mxfp8-e4m3", margin=2)
    # Bad names get the command line's messages.
    for flags, kwargs in [
        (["--format", "mxfp9"], {"format": "mxfp9"}),
        (["--compare-blocks=int8"], {"compare_blocks": "int8"}),
    ]:
        with pytest.raises(ValueError) as e:
            mixprec.analyze(views, **kwargs)
        r = cli("analyze", str(tmp_path / "t.npz"), *flags)
        assert r.returncode == 2 and str(e.value) in r.stderr, (str(e.value), r.stderr)


def test_analyze_equals_cli(cli, tmp_path):
    rng = np.random.default_rng(11)
    tensors = {
        "w": (rng.standard_normal((300, 70)) * 1e-4).astype(np.float32),
        "g": rng.standard_normal(5000) * 10.0 ** rng.uniform(-12, 1, 5000),
        "h": (rng.standard_normal((40, 40)) * 1e-3).astype(np.float16),
    }
    tensors["w"][0, :5] = [0.0, np.inf, np.nan, 1e-30, 7e4]
    # One file, so that the command's labels (which name files only when there are several)
    # match the arrays'.
    np.savez(tmp_path / "t.npz", **tensors)
    files = [str(tmp_path / "t.npz")]
    for fmt, scales in [("fp16", "0..32"), ("fp8-e5m2", "-8..20"), ("bf16", "2^0..2^10")]:
        r = cli("analyze", *files, "--format", fmt, "--scales", scales, "--json")
        assert r.returncode == 0, r.stderr
        want = without_files(json.loads(r.stdout))
        # Strided and Fortran-order views give the same result as the files' C-order arrays.
        views = {
            "w": np.asfortranarray(tensors["w"]),
            "g": np.repeat(tensors["g"], 2)[::2],
            "h": tensors["h"],
        }
        got = mixprec.analyze(views, format=fmt, scales=scales)
        assert all(t["file"] == "<array>" for t in got["tensors"])
        assert without_files(got) == want


def test_block_formats_round_along_the_last_axis(cli):
    # One MX block: amax 1000 = 1.95 x 2^9 sets the scale 2^(9 - 8) = 2; 1000 saturates to 896
    # and 0.001 / 2 is below E4M3's smallest subnormal: it underflows inside its block. The
    # second row is a block of its own, whose scale 2^-18 keeps 0.001 (262.1 x 2^-18, stored
    # as E4M3's 256: 2^-10).
    x = np.array([[1000.0, 3.0, 0.001], [0.001, 0.0, 0.0]], dtype=np.float32)
    y, counts = mixprec.quantize(x, "mxfp8-e4m3", return_counts=True)
    assert y.tolist() == [[896.0, 3.0, 0.0], [2.0**-10, 0.0, 0.0]]
    assert (counts["overflow"], counts["underflow"]) == (1, 1)
    assert mixprec.quantize(x.astype(np.float64), "mxfp8-e4m3").tolist() == y.tolist()
    # The same values through the command line, a row at a time, give the same results.
    r = cli("quantize", "--format", "mxfp8-e4m3", "--cols", "3",
            stdin="".join(f"{v!r}\n" for v in x.ravel().tolist()))
    assert r.returncode == 0, r.stderr
    assert [float(v) for v in r.stdout.split()] == y.ravel().tolist()
    assert mixprec.quantize(np.zeros((0, 3), dtype=np.float32), "nvfp4").shape == (0, 3)
    with pytest.raises(ValueError) as e:
        mixprec.quantize(x, "fp8-e4m3@0x128")
    assert str(e.value) in cli("quantize", "--format", "fp8-e4m3@0x128", stdin="1\n").stderr


def test_compare_blocks_refuses_the_other_analyses_settings(cli, tmp_path):
    """--compare-blocks conflicts with --format, --scales, --margin and --max-underflow: the
    binding refuses each (not ignores it), naming the argument as the command line names the
    flag."""
    x = {"w": np.linspace(-1.0, 1.0, 256, dtype=np.float32)}
    np.save(tmp_path / "w.npy", x["w"])
    for name, value, flag in [
        ("format", "mxfp4", ["--format", "mxfp4"]),
        ("format", "bf16", ["--format", "bf16"]),
        ("scales", "0..4", ["--scales", "0..4"]),
        ("margin", 3, ["--margin", "3"]),
        ("max_underflow", 0.5, ["--max-underflow", "0.5"]),
    ]:
        with pytest.raises(ValueError) as e:
            mixprec.analyze(x, compare_blocks="fp8-e4m3", **{name: value})
        assert str(e.value).startswith(f"{name}={value!r} cannot be used with compare_blocks")
        r = cli("analyze", str(tmp_path / "w.npy"), *flag, "--compare-blocks")
        assert r.returncode == 2, r.stderr
        assert f"'{flag[0]} " in r.stderr and "cannot be used with '--compare-blocks" in r.stderr
    # The defaults (given or left out) are the comparison itself.
    plain = mixprec.analyze(x, compare_blocks="fp8-e4m3")
    assert mixprec.analyze(x, "fp16", "0..32", 0, 0.001, "fp8-e4m3") == plain


def test_non_native_byte_order_is_named():
    """A big-endian (non-native) float32 or float64 array is refused for its byte order, the
    message saying how to convert it; a non-native float16 is widened by analyze like any."""
    other, native = (">", "<") if np.little_endian else ("<", ">")
    for kind in ("f4", "f8"):
        x = np.ones(3, dtype=other + kind)
        with pytest.raises(TypeError, match=f"x: expected native byte order, got dtype {other}{kind}"):
            mixprec.quantize(x, "fp16")
        with pytest.raises(TypeError, match=rf"w: .*native byte order.*astype\('{native}{kind}'\)"):
            mixprec.analyze({"w": x})
    h = np.linspace(-2, 2, 9).astype(other + "f2")
    assert mixprec.analyze({"h": h}) == mixprec.analyze({"h": h.astype(np.float16)})


def test_an_unknown_analyze_format_lists_the_block_formats_too():
    """analyze takes element and block formats; an unknown name's message lists both, as the
    command line's does."""
    with pytest.raises(ValueError) as e:
        mixprec.analyze({"g": np.ones(8, dtype=np.float32)}, format="fp17")
    message = str(e.value)
    assert "unknown format 'fp17'" in message and "fp16" in message and "mxfp4" in message, message
