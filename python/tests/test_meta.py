"""Meta-device tensors in the torch API (issue 42, class 6): a tensor on the ``meta`` device has
no values, so Recorder, Simulate and quantize name it in a ValueError before touching data,
rather than reach torch's own error ("Cannot copy out of meta tensor", ``.item()``) in the middle
of the work, or return a meta tensor without a word. Rows of the project's bad-input table
(reports/reliability.md)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")

from mixprec.torch import Recorder, Simulate, quantize  # noqa: E402


def meta_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 4, device="meta"), torch.nn.ReLU())


def test_recorder_names_a_meta_parameter_and_writes_nothing(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"parameter '0.weight' is on the meta device"):
        Recorder(meta_model(), out=out, format="fp16")
    assert not out.exists()


def test_simulate_names_a_meta_parameter():
    with pytest.raises(ValueError, match=r"parameter '0.weight' is on the meta device"):
        Simulate(meta_model(), "fp16-dynamic")


def test_a_meta_buffer_is_named_too():
    model = torch.nn.BatchNorm1d(4)
    model.register_buffer("table", torch.empty(3, device="meta"))
    with pytest.raises(ValueError, match=r"buffer 'table' is on the meta device"):
        Simulate(model, "fp16-dynamic")


@pytest.mark.parametrize("fmt", ["fp16", "mxfp8-e4m3", "nvfp4"])
def test_quantize_refuses_a_meta_tensor_in_every_kind_of_format(fmt):
    t = torch.empty(4, 32, device="meta")
    with pytest.raises(ValueError, match=r"t: the tensor is on the meta device"):
        quantize(t, fmt)


def test_a_wrong_dtype_is_still_a_type_error():
    with pytest.raises(TypeError, match=r"int64"):
        quantize(torch.zeros(4, dtype=torch.int64), "fp16")
