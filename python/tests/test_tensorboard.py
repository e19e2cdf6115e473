"""`mixprec export-tensorboard` read back by TensorBoard's own reader (the `tensorboard` package's
EventMultiplexer and EventAccumulator, which check every record's checksums): every scalar equals
its value in metrics.jsonl and every histogram's buckets equal the capture's bins.

Two runs trained by the mixprec binary: a dynamic scaler starting at 2^24, so that its first steps
overflow and are skipped, and a static scale of 2^-12, so that gradients underflow.
"""

import json
import math

import numpy as np
import pytest

from tensorboard.backend.event_processing import (
    event_accumulator,
    event_file_loader,
    plugin_event_multiplexer,
)
from tensorboard.util import tensor_util

EVENTS = "events.out.tfevents.0.mixprec"
ALL = {
    event_accumulator.SCALARS: 0,
    event_accumulator.HISTOGRAMS: 0,
    event_accumulator.TENSORS: 0,
}


def f32(x):
    return float(np.float32(x))


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, cli):
    root = tmp_path_factory.mktemp("tensorboard")
    runs = {
        "skips": ["--recipe", "fp16-dynamic", "--loss-scale", "2^24", "--steps", "30"],
        "underflows": ["--recipe", "fp16-master", "--loss-scale", "2^-12", "--steps", "12"],
    }
    for name, args in runs.items():
        r = cli("train", *args, "--batch", "16", "--capture-every", "5", "--eval-every", "10",
                "--out", str(root / name))
        assert r.returncode == 0, r.stderr
    logdir = root / "logs"
    r = cli("export-tensorboard", *(str(root / n) for n in runs), "--out", str(logdir))
    assert r.returncode == 0, r.stderr
    assert f"tensorboard --logdir {logdir}" in r.stdout
    return root, logdir, list(runs)


def run_and_events(exported, which):
    """One exported run's directory, and TensorBoard's accumulator of its events."""
    root, logdir, names = exported
    acc = event_accumulator.EventAccumulator(str(logdir / names[which]), size_guidance=ALL)
    acc.Reload()
    return root / names[which], acc


def test_tensorboard_finds_one_run_per_subdirectory(exported):
    _, logdir, names = exported
    mux = plugin_event_multiplexer.EventMultiplexer(size_guidance=ALL)
    mux.AddRunsFromDirectory(str(logdir))
    mux.Reload()
    assert sorted(mux.Runs()) == sorted(names)
    for name in names:
        assert [p.name for p in (logdir / name).iterdir()] == [EVENTS]


def test_the_first_event_is_the_file_version(exported):
    _, logdir, names = exported
    events = list(event_file_loader.EventFileLoader(str(logdir / names[0] / EVENTS)).Load())
    assert events[0].file_version == "brain.Event:2"
    assert events[0].source_metadata.writer == "mixprec export-tensorboard"
    assert all(e.HasField("summary") for e in events[1:])


@pytest.mark.parametrize("which", [0, 1])
def test_scalars_equal_the_metrics(exported, which):
    run, acc = run_and_events(exported, which)
    steps = lines(run / "metrics.jsonl")
    summary = json.loads((run / "summary.json").read_text())

    def series(tag):
        return {e.step: e.value for e in acc.Scalars(tag)}

    assert sorted(series("loss")) == [s["step"] for s in steps]
    skipped = np.cumsum([s["skipped"] for s in steps])
    expected = {
        "loss": lambda s, i: f32(s["loss"]) if s["loss"] is not None else math.nan,
        "loss_scale": lambda s, i: f32(s["loss_scale"]),
        "skipped": lambda s, i: float(s["skipped"]),
        "skipped_steps": lambda s, i: float(skipped[i]),
        "overflow": lambda s, i: float(s["overflow"]),
        "grad_amax": lambda s, i: f32(s["grad_amax"]),
        "updates_lost": lambda s, i: f32(s["updates_lost"]),
    }
    for tag, value in expected.items():
        got = series(tag)
        for i, s in enumerate(steps):
            want = value(s, i)
            assert got[s["step"]] == want or (math.isnan(want) and math.isnan(got[s["step"]])), (
                tag, s["step"])
    for cls in steps[0]["counts"]:
        got = series(f"underflow/{cls}")
        for s in steps:
            c = s["counts"][cls]
            assert got[s["step"]] == f32(c["underflow"] / c["stored"]), (cls, s["step"])
    evals = {s["step"]: f32(s["eval"]["value"]) for s in steps if "eval" in s}
    assert evals and series("eval/test_accuracy") == evals
    # The run's duration spread over its steps.
    wall = [e.wall_time for e in acc.Scalars("loss")]
    assert wall == sorted(wall)
    assert wall[-1] == pytest.approx(summary["wall_seconds"])
    if which == 0:
        assert 0 < skipped[-1] == summary["skipped_steps"]
        assert series("skipped_steps")[steps[-1]["step"]] == skipped[-1]
    else:
        assert max(series("underflow/weight_grad").values()) > 0.05


def expected_buckets(h):
    """The capture's bins as TensorBoard's buckets: zeros first, then one per power of two."""
    assert h["sub_bins_log2"] == 0
    limits = [2.0 ** (h["first_bin"] + i + 1) for i in range(len(h["bins"]))]
    counts = list(map(float, h["bins"]))
    if h["zeros"]:
        lowest = 2.0 ** h["first_bin"] if h["bins"] else 5e-324
        limits, counts = [lowest, *limits], [float(h["zeros"]), *counts]
    return limits, counts


@pytest.mark.parametrize("which", [0, 1])
def test_histograms_equal_the_captures(exported, which):
    run, acc = run_and_events(exported, which)
    captures = lines(run / "captures.jsonl")
    assert len(captures) >= 3
    checked = 0
    for cap in captures:
        for site in cap["sites"]:
            h = site["values"]
            part = f"/{site['part']}" if "part" in site else ""
            tag = f"{site['tensor']}/{site['layer']}{part}"
            finite = sum(h["bins"]) + h["zeros"]
            found = [e for e in acc.Histograms(tag) if e.step == cap["step"]] \
                if tag in acc.Tags()["histograms"] else []
            if finite == 0:
                assert not found, tag
                continue
            (event,) = found
            v = event.histogram_value
            limits, counts = expected_buckets(h)
            assert list(v.bucket_limit) == limits, tag
            assert list(v.bucket) == counts, tag
            assert v.num == finite
            assert v.max == h["amax"]
            assert v.min == (0.0 if h["zeros"] else h["min_nonzero"])
            assert (v.sum, v.sum_squares) == (h["sum_abs"], h["sum_sq"])
            checked += 1
        for r in cap["update_ratios"]:
            (event,) = [e for e in acc.Histograms(f"update_ratio/{r['layer']}")
                        if e.step == cap["step"]]
            assert list(event.histogram_value.bucket) == expected_buckets(r["ratios"])[1]
            checked += 1
    assert checked > 3 * len(captures)


def test_tensorboards_histogram_dashboard_takes_the_buckets(exported):
    """What TensorBoard's histogram dashboard draws: its loader turns each histogram into
    (left, right, count) rows (float32), from min through the bucket limits to max, which must
    be contiguous and never go backwards."""
    _, logdir, names = exported
    events = event_file_loader.EventFileLoader(str(logdir / names[1] / EVENTS)).Load()
    drawn = 0
    for event in events:
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name == "histograms":
                buckets = tensor_util.make_ndarray(value.tensor)
                assert buckets.shape[1] == 3, value.tag
                assert (buckets[:, 0] <= buckets[:, 1]).all(), value.tag
                assert (buckets[1:, 0] == buckets[:-1, 1]).all(), value.tag
                assert buckets[:, 2].sum() > 0, value.tag
                drawn += 1
    assert drawn > 10
