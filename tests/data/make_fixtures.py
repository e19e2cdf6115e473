"""Makes the small tensor files under tests/data/ with the reference libraries, and records what a
reader must find in them (expected.json), value for value.

Run from the repository root with numpy and safetensors installed (not a dependency of the crate):
    python3 -m venv /tmp/io-venv && /tmp/io-venv/bin/pip install numpy safetensors
    /tmp/io-venv/bin/python tests/data/make_fixtures.py

expected.json maps each file name to {"read": [...], "skipped": [...]}, tensors in file order, each
with name, dtype (as mixprec::io::Dtype displays it), shape and, for read tensors, "bits": the IEEE
binary64 bit pattern of every value widened to f64 (exact), in storage order.
"""

import json
import os
import struct

import numpy as np
from numpy.lib import format as npformat
from safetensors import TensorSpec, serialize
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
DTYPE = {"float64": "F64", "float32": "F32", "float16": "F16"}


def bits(values):
    """f64 bit patterns of values widened to f64, in storage order."""
    flat = np.asarray(values).ravel(order="K").astype(np.float64)
    return [int(b) for b in flat.view(np.uint64)]


def entry(name, arr, dtype=None):
    arr = np.asarray(arr)
    dtype = dtype or DTYPE.get(arr.dtype.name)
    if dtype is None:
        return {"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape)}, False
    return {"name": name, "dtype": dtype, "shape": list(arr.shape), "bits": bits(arr)}, True


def specials(dtype):
    """A few awkward values of a float type: signed zeros, extremes, subnormals, inf, NaN."""
    info = np.finfo(dtype)
    return np.array(
        [0.0, -0.0, 1.0, -2.5, info.max, -info.max, info.tiny, info.smallest_subnormal,
         -info.smallest_subnormal, np.inf, -np.inf, np.nan, 0.1, 1 / 3],
        dtype=dtype,
    )


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return sorted(header, key=lambda k: header[k]["data_offsets"])


def make_safetensors(expected):
    rng = np.random.default_rng(7)
    tensors = {
        "weight.grad": rng.standard_normal((2, 3)).astype(np.float64) * 1e-3,
        "specials32": specials(np.float32),
        "half": specials(np.float16),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "step": np.array([1, -2, 3], dtype=np.int64),
        "mask": np.array([True, False]),
    }
    path = os.path.join(HERE, "mixed.safetensors")
    save_file(tensors, path, metadata={"source": "make_fixtures.py"})
    by_name = {}
    for name, arr in tensors.items():
        e, ok = entry(name, arr)
        if not ok:
            e["dtype"] = {"int64": "I64", "bool": "BOOL"}[arr.dtype.name]
        by_name[name] = (e, ok)
    record(expected, "mixed.safetensors", [by_name[n] for n in safetensors_header(path)])

    # numpy has no bfloat16: write its bit patterns through the raw serializer. The values are the
    # f32 numbers whose low 16 bits are zero, so bf16 -> f32 is exact by construction.
    wide = np.concatenate([specials(np.float32)[:11], [np.float32(np.nan), 1.0e-39, 3.0e38]])
    wide = wide.astype(np.float32)
    halves = (wide.view(np.uint32) >> 16).astype("<u2")
    truth = (halves.astype(np.uint32) << 16).view(np.float32)
    keep = [halves]
    spec = {"bf": TensorSpec(dtype="bfloat16", shape=[len(halves)], data_ptr=halves.ctypes.data,
                             data_len=halves.nbytes)}
    data = serialize(spec)
    del keep
    with open(os.path.join(HERE, "bf16.safetensors"), "wb") as f:
        f.write(data)
    e, _ = entry("bf", truth, dtype="BF16")
    record(expected, "bf16.safetensors", [(e, True)])


def record(expected, file, entries):
    expected[file] = {
        "read": [e for e, ok in entries if ok],
        "skipped": [e for e, ok in entries if not ok],
    }


def make_npy(expected):
    rng = np.random.default_rng(11)
    cases = {
        "f64_2d.npy": rng.standard_normal((3, 4)),
        "f32.npy": specials(np.float32),
        "f16.npy": specials(np.float16),
        "scalar.npy": np.array(-7.5),
        "empty.npy": np.zeros((0,), dtype=np.float32),
        "big_endian.npy": (rng.standard_normal((2, 3)) * 1e5).astype(">f4"),
        "big_endian_f8.npy": specials(np.float64).astype(">f8"),
        "big_endian_f2.npy": specials(np.float16).astype(">f2"),
        "fortran.npy": np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3) / 8),
        "ints.npy": np.arange(5, dtype=np.int32),
    }
    for file, arr in cases.items():
        np.save(os.path.join(HERE, file), arr)
        e, ok = entry(os.path.splitext(file)[0], arr)
        record(expected, file, [(e, ok)])
    for version in [(2, 0), (3, 0)]:
        file = f"v{version[0]}.npy"
        arr = np.linspace(-1, 1, 5, dtype=np.float32)
        with open(os.path.join(HERE, file), "wb") as f:
            npformat.write_array(f, arr, version=version)
        e, ok = entry(os.path.splitext(file)[0], arr)
        record(expected, file, [(e, ok)])


def make_npz(expected):
    rng = np.random.default_rng(13)
    arrays = {
        "layer1/w": rng.standard_normal((4, 3)).astype(np.float32),
        "h": specials(np.float16),
        "counts": np.arange(4, dtype=np.int8),
        "s": np.array(0.125),
        "nothing": np.zeros((2, 0), dtype=np.float64),
    }
    entries = [entry(name, arr) for name, arr in arrays.items()]
    np.savez(os.path.join(HERE, "stored.npz"), **arrays)
    record(expected, "stored.npz", entries)
    np.savez_compressed(os.path.join(HERE, "compressed.npz"), **arrays)
    record(expected, "compressed.npz", entries)


def main():
    expected = {}
    make_safetensors(expected)
    make_npy(expected)
    make_npz(expected)
    # One line per file keeps the record small and its diffs readable.
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in expected.items()]
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    main()
