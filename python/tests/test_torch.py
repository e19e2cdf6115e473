"""mixprec.torch.Recorder on a small transformer trained on CPU with autocast and a GradScaler.

The captured histograms are checked against histograms computed here with numpy from the same
tensors (taken by hooks of the test's own), the recorded scales against the scaler's, and the
recorded run against `mixprec report`.
"""

import json
import math
import os
import pathlib
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")

import mixprec  # noqa: E402
import mixprec._mixprec  # noqa: E402
from mixprec.torch import Recorder  # noqa: E402


class TinyTransformer(torch.nn.Module):
    """A token classifier: embedding, two encoder layers, mean pooling, linear head."""

    def __init__(self, vocab=32, d=32, heads=2, layers=2, classes=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 64, dropout=0.0, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, classes)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def batches(steps, batch=8, seq=12, vocab=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, vocab, (batch, seq), generator=g)
        yield x, x[:, 0] % 4


def train(out, steps=7, every=3, init_scale=2.0**24, dtype=torch.float16, spy=None, inf_at=(),
          after_update=False, **scaler_args):
    """Trains with autocast and a GradScaler (``growth_interval`` 2 unless given) and the
    recorder; returns the scales the scaler used, step by step, and whether it skipped each
    step. ``spy(step, model)`` is called before each step's forward; at the steps of ``inf_at``
    a weight gradient is made inf after the backward pass (an overflow the scaler must skip).
    ``rec.step`` comes before ``scaler.update()``, or after it (as frameworks order them) with
    ``after_update`` and the gradients zeroed first (as the HF Trainer does before its
    callbacks' step end)."""
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler_args.setdefault("growth_interval", 2)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, **scaler_args)
    scales, skipped = [], []
    fmt = "bf16" if dtype == torch.bfloat16 else "fp16"
    with Recorder(model, out=out, format=fmt, every=every, optimizer=opt, scaler=scaler) as rec:
        for step, (x, y) in enumerate(batches(steps), start=1):
            if spy is not None:
                spy(step, model)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=dtype):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            if step in inf_at:
                model.head.weight.grad[0, 0] = math.inf
            scaler.step(opt)
            scales.append(scaler.get_scale())
            if after_update:
                scaler.update()
                opt.zero_grad(set_to_none=True)
                rec.step(loss)
            else:
                rec.step(loss)
                scaler.update()
            skipped.append(scaler.get_scale() < scales[-1])
    return scales, skipped


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def numpy_histogram(arrays):
    """The capture histogram of the values of ``arrays`` (one bin per power of two), from
    numpy: frexp gives |x| = m 2^e with 0.5 <= m < 1, so the bin is e - 1."""
    x = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])
    a = np.abs(x)
    nz = np.isfinite(x) & (a != 0)
    e = np.frexp(a[nz])[1] - 1
    h = {
        "zeros": int(np.sum(x == 0)),
        "nan": int(np.sum(np.isnan(x))),
        "pos_inf": int(np.sum(x == np.inf)),
        "neg_inf": int(np.sum(x == -np.inf)),
        "negatives": int(np.sum(x[nz] < 0)),
        "amax": float(a[nz].max()) if nz.any() else 0.0,
        "min_nonzero": float(a[nz].min()) if nz.any() else None,
        "first_bin": int(e.min()) if nz.any() else 0,
        "bins": np.bincount(e - e.min()).tolist() if nz.any() else [],
    }
    return h


def to_numpy(t):
    return t.detach().float().numpy().copy()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_captured_histograms_equal_numpys(tmp_path, dtype):
    """On capture steps the test's own hooks keep copies of the weights, each leaf module's
    output and its gradient, and each parameter's accumulated gradient; numpy's histograms of
    them are the recorded ones, site by site."""
    every, seen, hooks = 3, {}, []

    def spy(step, model):
        for h in hooks:
            h.remove()
        hooks.clear()
        if not (step == 1 or step % every == 0):
            return
        sites = seen[step] = {}

        def put(key, t):
            sites.setdefault(key, []).append(to_numpy(t))

        names = {p: n.rsplit(".", 1)[0] for n, p in model.named_parameters()}
        for p, layer in names.items():
            put((layer, "weight"), p)
            hooks.append(p.register_post_accumulate_grad_hook(
                lambda p, layer=layer: put((layer, "weight_grad"), p.grad)))
        for name, m in model.named_modules():
            if any(True for _ in m.children()):
                continue

            def fwd(m, i, o, name=name):
                put((name, "activation"), o)
                o.register_hook(lambda g: put((name, "activation_grad"), g))

            hooks.append(m.register_forward_hook(fwd))

    out = tmp_path / "run"
    # No step skipped (Adam has state); autocast stores activations in `dtype`.
    train(out, every=every, spy=spy, init_scale=2.0**8, dtype=dtype)
    captures = read_jsonl(out / "captures.jsonl")
    assert [c["step"] for c in captures] == [1, 3, 6]
    for c in captures:
        sites = {(s["layer"], s["tensor"]): s for s in c["sites"] if "part" not in s}
        assert set(sites) == set(seen[c["step"]]), c["step"]
        for key, arrays in seen[c["step"]].items():
            got, want = sites[key]["values"], numpy_histogram(arrays)
            for field, value in want.items():
                assert got[field] == value, (c["step"], key, field)
        parts = {s["part"] for s in c["sites"] if s["tensor"] == "optimizer_state"}
        assert parts == {"adam_m", "adam_v"}


def test_scales_and_skips_equal_the_scalers(tmp_path):
    out = tmp_path / "run"
    # 2^24 overflows fp16's gradients at first: the scaler backs off, skipping steps.
    scales, skipped = train(out, steps=12, init_scale=2.0**24)
    steps = read_jsonl(out / "metrics.jsonl")
    assert [s["loss_scale"] for s in steps] == scales
    assert [s["skipped"] for s in steps] == skipped
    assert any(skipped) and not all(skipped)
    assert all(s["overflow"] == s["skipped"] for s in steps)
    assert all(s["grad_amax"] is None or s["grad_amax"] > 0 for s in steps)
    # Counts on capture steps only: what the hooks stored, per class.
    assert steps[0]["counts"]["activation"]["stored"] > 0
    assert steps[1]["counts"] == {}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["skipped_steps"] == sum(skipped)
    assert not (out / "INCOMPLETE").exists()


def test_rec_step_after_the_scalers_update_and_zero_grad_records_the_same(tmp_path):
    """Frameworks call scaler.step and scaler.update back to back and zero the gradients
    before a callback's step end: the recorder takes the scale and skip from its wrap of the
    scaler's update, and the gradients at the optimizer's step, so every line (scale, skip,
    overflow, grad_amax) and every capture equals the one recorded between step and update."""
    kw = dict(steps=12, every=5, init_scale=2.0**24, inf_at=(9,))
    before, after = tmp_path / "before", tmp_path / "after"
    scales, skipped = train(before, **kw)
    assert (scales, skipped) == train(after, after_update=True, **kw)
    assert any(skipped) and not all(skipped)
    a, b = read_jsonl(before / "metrics.jsonl"), read_jsonl(after / "metrics.jsonl")
    drop = ("wall_time_s",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in a] == \
        [{k: v for k, v in r.items() if k not in drop} for r in b]
    assert all(r["grad_amax"] is not None for r in b)
    assert (before / "captures.jsonl").read_text() == (after / "captures.jsonl").read_text()


@pytest.mark.parametrize("steps,diverged", [(10, False), (22, True)])
def test_the_summary_follows_trains_rules(tmp_path, steps, diverged):
    # Every step overflows (an inf gradient planted) and is skipped: a run stuck skipping its
    # last 20 steps has diverged, a shorter one has not (its scaler was still backing off), as
    # for `mixprec train`: the summary is tallied by the same Rust code.
    out = tmp_path / "run"
    _, skipped = train(out, steps=steps, inf_at=range(1, steps + 1))
    assert all(skipped)
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["skipped_steps"], summary["overflow_steps"]) == (steps, steps)
    assert summary["diverged"] is diverged
    records = read_jsonl(out / "metrics.jsonl")
    assert summary["final_loss"] == records[-1]["loss"]
    # The default metric: the mean of the last 20 finite losses.
    last = [r["loss"] for r in records[-20:] if r["loss"] is not None]
    assert summary["eval_metric"]["name"] == "mean_loss_last_20_steps"
    assert summary["eval_metric"]["value"] == pytest.approx(sum(last) / len(last), rel=1e-12)


def test_report_renders(tmp_path, cli):
    out = tmp_path / "run"
    train(out, steps=7)
    r = cli("report", str(out), "--out", str(tmp_path / "page"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "page" / "index.html").is_file()


def test_the_report_of_a_recording_agrees_with_itself(tmp_path, cli):
    """Issue 29, case 3: the recorder rounds every captured value into its format, so the page
    labels the optimizer state's counts fp16's (stored in fp32), not fp32's; and the steps that
    held inf or NaN (the first two, from 2^20) are in section 8 too, with where the first inf
    or NaN formed: a node of the backward pass that passed it on as an activation gradient."""
    out = tmp_path / "run"
    _, skipped = train(out, steps=7, init_scale=2.0**20)
    assert any(skipped)
    r = cli("report", str(out), "--out", str(tmp_path / "page"))
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "page" / "report.json").read_text())
    run = report["runs"][0]
    assert run["formats"]["optimizer_state"] == "fp32"
    assert run["counted_formats"]["optimizer_state"] == "fp16"
    page = (tmp_path / "page" / "index.html").read_text()
    assert "<td>fp16 (stored in fp32)</td>" in page
    n = run["overflow"]["count"]
    assert n > 0
    assert f"{n} steps had inf or NaN gradients, " in page
    assert re.search(r"<td>pytorch-fp16</td><td>[^<]+</td><td>activation_grad</td>"
                     r"<td>\w+Backward\d</td><td>\d+</td><td>1</td>", page), page
    assert "No inf or NaN was stored in any run." not in page


def test_analyze_reads_torch_tensors_and_knows_an_overflowed_step(tmp_path):
    """The book's recipe (docs/src/analyze.md; issue 29, cases 1 and 2): ``mixprec.analyze`` on
    the CPU gradients of a step, as torch tensors. In FP32 (autocast off) the step is healthy; under autocast at
    2^24, unscaled, it overflowed: the analysis says so and backs off below the scale the
    survivors allow."""
    torch.manual_seed(0)
    model = TinyTransformer()
    x, y = next(batches(1))

    def grads(autocast, scale):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        (loss * scale).backward()
        return {n: (p.grad.detach().float() / scale).contiguous()
                for n, p in model.named_parameters() if p.grad is not None}

    healthy = mixprec.analyze(grads(False, 1.0))
    assert not healthy["dump"]["overflowed"] and not healthy["dump"]["many_zeros"]
    assert healthy["explanation"].startswith("For a training run in fp16, start the loss scale at 2^")
    over = mixprec.analyze(grads(True, 2.0**24))
    assert over["dump"]["overflowed"], over["dump"]
    # Every value is inf or NaN here: nothing to scale, and the step said to have overflowed.
    assert "this dump comes from a step whose gradients overflowed" in over["explanation"].lower()
    r = over["recommendation"]
    if r is not None and r["log2_scale"] is not None:
        assert r["log2_scale"] <= r["overflow_log2_scale"] - 2
    for t in over["tensors"]:
        assert (t["amax"] is None) == (t["nonfinite"] == t["count"])


@pytest.mark.filterwarnings("ignore:Recorder. the GradScaler is disabled")  # on purpose
def test_config_says_the_formats_and_the_scalers_policy(tmp_path, cli):
    """The config's recipe: autocast's formats and the GradScaler's own parameters (not its
    defaults), which the report's run table shows; a disabled scaler is no loss scaling."""
    out = tmp_path / "run"
    train(out, steps=3, init_scale=2.0**12, growth_interval=7, growth_factor=4.0,
          backoff_factor=0.25)
    recipe = json.loads((out / "config.json").read_text())["recipe"]
    classes = ("weights", "activations", "activation_grads", "weight_grads", "optimizer_state",
               "master_weights")
    assert [recipe[c] for c in classes] == ["fp16"] * 4 + ["fp32"] * 2
    ls = recipe["loss_scaling"]
    assert (ls["kind"], ls["init_scale"], ls["growth_factor"], ls["backoff_factor"],
            ls["growth_interval"], ls["hysteresis"]) == ("dynamic", 4096.0, 4.0, 0.25, 7, 1)
    r = cli("report", str(out), "--out", str(tmp_path / "page"))
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "page" / "index.html").read_text()
    assert "<td>fp16 / fp16 / fp16 / fp16 / fp32 / fp32</td>" in html
    assert "init_scale 4096.0, growth_factor 4.0, backoff_factor 0.25, growth_interval 7" in html
    train(tmp_path / "off", steps=2, enabled=False)
    config = json.loads((tmp_path / "off" / "config.json").read_text())
    assert config["recipe"]["loss_scaling"] == {"kind": "none"}


def test_replaying_the_scalers_policy_gives_the_recorded_scales_and_skips(tmp_path, cli):
    """`replay --policy run`: the GradScaler's policy from the config, stepped over the recorded
    gradients, gives the recorded scale and skip decision at every step: the scale grows every
    3 clean steps and backs off at the forced overflow of step 8."""
    out = tmp_path / "run"
    scales, skipped = train(out, steps=16, every=5, init_scale=2.0**10, growth_interval=3,
                            inf_at=(8,))
    assert skipped[7] and sum(skipped) == 1
    assert len(set(scales)) >= 4  # grew, grew, backed off, grew
    r = cli("replay", str(out), "--policy", "run", "gradscaler:init_scale=2^10", "--json")
    assert r.returncode == 0, r.stderr
    own, other = json.loads(r.stdout)["policies"]
    assert own["policy"].startswith("run (gradscaler:init_scale=1024,growth_interval=3)")

    def scale_at(p, t):
        return [s for at, s in p["scale_changes"] if at <= t][-1]

    assert [scale_at(own, t) for t in range(1, 17)] == scales
    assert own["skipped"]["steps"] == [t for t, s in enumerate(skipped, start=1) if s]
    assert own["matches_run"]
    # The same initial scale with GradScaler's default growth interval (2000) never grows: the
    # check above can tell policies apart.
    assert not other["matches_run"]


@pytest.mark.filterwarnings("ignore:Recorder. the loop stores no tensor narrower")  # FP32 on purpose
def test_a_crashed_loop_leaves_a_reportable_run(tmp_path, cli):
    """A loop that raises at step 6: the run keeps its INCOMPLETE marker and every step so far.
    Step 3's capture wrote steps 1 to 3; the time-based flush is put out of reach (a day) and
    the recorder kept alive (so no flush when it is dropped): only the flush on the way out of
    the ``with`` block can write steps 4 and 5, whatever the machine's speed."""
    out = tmp_path / "run"
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(model, out=out, every=3, optimizer=opt, flush_every=86400.0)
    with pytest.raises(RuntimeError, match="the loop fails"):
        with rec:
            for step, (x, y) in enumerate(batches(7), start=1):
                if step == 6:
                    raise RuntimeError("the loop fails")
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                rec.step(loss)
    assert (out / "INCOMPLETE").exists() and not (out / "summary.json").exists()
    assert [s["step"] for s in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4, 5]
    assert [c["step"] for c in read_jsonl(out / "captures.jsonl")] == [1, 3]
    r = cli("report", str(out), "--out", str(tmp_path / "page"))
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "page" / "index.html").read_text()
    assert "<td>UNFINISHED (killed or running)</td>" in html
    assert rec.path == out  # kept alive to here


def test_bad_arguments(tmp_path):
    model = TinyTransformer()
    with pytest.raises(ValueError, match="unknown format 'fp17'"):
        Recorder(model, out=tmp_path / "a", format="fp17")
    with pytest.raises(ValueError, match="every"):
        Recorder(model, out=tmp_path / "a", every=-1)
    with pytest.raises(ValueError, match="ranks"):
        Recorder(model, out=tmp_path / "a", ranks="all")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        Recorder(model, out=tmp_path / "full")
    with pytest.raises(ValueError, match="flush_every"):
        Recorder(model, out=tmp_path / "a", flush_every=-1.0)
    # A second rec.step with no scaler.step between: no step of the scaler to record.
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    rec = Recorder(model, out=tmp_path / "b", every=0, scaler=scaler)
    x, y = next(batches(1))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    rec.step(loss, scaler=scaler)
    with pytest.raises(RuntimeError, match="not stepped since the last rec.step"):
        rec.step(loss, scaler=scaler)
    rec.close()
    assert "update" not in vars(scaler) and "scale" not in vars(scaler)  # unwrapped
    # A scaler the constructor did not get: its policy is not in the config.
    rec = Recorder(model, out=tmp_path / "c", every=0)
    with pytest.raises(ValueError, match="Recorder\\(..., scaler=scaler\\)"):
        rec.step(loss, scaler=scaler)


def test_block_formats_are_refused_by_name(tmp_path):
    """A block format is refused as such (the run's recipe stores element formats), naming
    format= and listing the element formats; an unknown name lists exactly those too; neither
    message carries a JSON position, and nothing is written."""
    model = TinyTransformer()
    element = mixprec._mixprec.Capture  # the element formats' parser
    with pytest.raises(ValueError) as e:
        element("mxfp4", [])
    accepted = str(e.value).split(": expected ", 1)[1]
    for name in ("mxfp4", "nvfp4", "fp8-e4m3@1x128"):
        with pytest.raises(ValueError) as e:
            Recorder(model, out=tmp_path / name, format=name)
        message = str(e.value)
        assert message.startswith(f"format: '{name}' is a block format"), message
        assert f"expected {accepted} (" in message and "line 1" not in message, message
    with pytest.raises(ValueError) as e:
        Recorder(model, out=tmp_path / "fp17", format="fp17")
    assert str(e.value) == f"format: unknown format 'fp17': expected {accepted}"
    assert "mxfp" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("ignore:Recorder. the loop stores no tensor narrower")  # FP32 on purpose
def test_the_run_directory_is_made_when_the_loop_starts(tmp_path):
    """Made, a recorder writes nothing (its directory only checked); entering the ``with``
    block creates the run (config and marker), and without one the first step does."""
    model = TinyTransformer()
    Recorder(model, out=tmp_path / "unused", every=0)
    rec = Recorder(model, out=tmp_path / "entered", every=0)
    assert not (tmp_path / "unused").exists() and not (tmp_path / "entered").exists()
    with rec:
        assert (tmp_path / "entered" / "config.json").exists()
        assert (tmp_path / "entered" / "INCOMPLETE").exists()
    assert (tmp_path / "entered" / "summary.json").exists()
    rec = Recorder(model, out=tmp_path / "stepped", every=1)
    rec.flush()
    assert not (tmp_path / "stepped").exists()
    x, y = next(batches(1))
    rec.step(torch.nn.functional.cross_entropy(model(x), y))
    assert (tmp_path / "stepped" / "INCOMPLETE").exists()
    rec.close()
    assert [s["step"] for s in read_jsonl(tmp_path / "stepped" / "metrics.jsonl")] == [1]
    # The directory is still checked when the recorder is made.
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        Recorder(model, out=tmp_path / "full")


def test_an_fp32_loop_recorded_as_fp16_is_warned_of(tmp_path):
    """The book's loop (docs/src/pytorch-recorder.md) with autocast and GradScaler for a device
    they are off on (what "cuda" is without CUDA): the loop trains in FP32 with no loss scaling while the run says
    fp16; the recorder warns once of each. Under CPU autocast, or recorded as fp32, it does not."""
    import warnings

    def loop(out, autocast, fmt="fp16", steps=3, scaler=None):
        torch.manual_seed(0)
        model = TinyTransformer()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Recorder(model, out=out, format=fmt, every=0, optimizer=opt, scaler=scaler) as rec:
                for x, y in batches(steps):
                    opt.zero_grad()
                    with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
                        loss = torch.nn.functional.cross_entropy(model(x), y)
                    loss.backward()
                    opt.step()
                    rec.step(loss)
        return [str(w.message) for w in caught if "Recorder:" in str(w.message)]

    fp32 = loop(tmp_path / "fp32-loop", autocast=False)
    assert len(fp32) == 1 and "stores no tensor narrower than FP32" in fp32[0], fp32
    assert "'pytorch-fp16' is recorded as trained in fp16" in fp32[0]
    assert loop(tmp_path / "autocast", autocast=True) == []
    assert loop(tmp_path / "as-fp32", autocast=False, fmt="fp32") == []
    off = loop(tmp_path / "off", autocast=True, steps=1,
               scaler=torch.amp.GradScaler("cpu", enabled=False))
    assert off == [off[0]] and "the GradScaler is disabled" in off[0], off


def _ddp_worker(rank, world, port, out, ranks):
    """One rank of a 2-process DistributedDataParallel loop (gloo, CPU) under the recorder."""
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(TinyTransformer())
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8)
        with Recorder(model, out=out, every=2, optimizer=opt, scaler=scaler, ranks=ranks) as rec:
            # Each rank its own batches, as a DistributedSampler gives them.
            for x, y in batches(3, seed=rank):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                rec.step(loss)
                scaler.update()
    finally:
        torch.distributed.destroy_process_group()
    # Leave without running the C++ runtime's exit handlers: torch's threads can abort a rank
    # there ("terminate called without an active exception", SIGABRT, about once in 15-20 runs
    # on 2 cores, a barrier before the teardown did not help), after every file is written.
    os._exit(0)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("ranks", ["each", "zero"])
def test_distributed_data_parallel(tmp_path, cli, ranks):
    """Two CPU processes (gloo): with ranks="each" every rank writes its own finished run in
    out/rank{r}, its own losses (each rank saw its own batches); with "zero" only rank 0
    writes, into out itself. Each run renders."""
    out = tmp_path / "run"
    torch.multiprocessing.spawn(_ddp_worker, args=(2, _free_port(), str(out), ranks), nprocs=2)
    if ranks == "each":
        assert sorted(p.name for p in out.iterdir()) == ["rank0", "rank1"]
        runs = [out / "rank0", out / "rank1"]
    else:
        assert not (out / "rank0").exists() and not (out / "rank1").exists()
        runs = [out]
    losses = []
    for rank, run in enumerate(runs):
        config = json.loads((run / "config.json").read_text())
        assert (config["rank"], config["world_size"]) == (rank, 2)
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 3 and not (run / "INCOMPLETE").exists()
        assert [c["step"] for c in read_jsonl(run / "captures.jsonl")] == [1, 2]
        losses.append([s["loss"] for s in read_jsonl(run / "metrics.jsonl")])
        r = cli("report", str(run), "--out", str(tmp_path / f"page{rank}"))
        assert r.returncode == 0, r.stderr
    if ranks == "each":
        assert losses[0] != losses[1]


def float16_of_backward(loss):
    """Hooks on every autograd node of ``loss``'s graph; returns the list they fill, during its
    backward pass, with the largest magnitude of each float16 gradient a node forms (for a cast
    into float16, of the FP32 values cast)."""
    amax = []

    def grab(node):
        def hook(grad_inputs, grad_outputs):
            cast = type(node).__name__ == "ToCopyBackward0"
            for g in grad_inputs:
                if isinstance(g, torch.Tensor) and g.dtype == torch.float16:
                    # A cast into float16: the values before rounding.
                    src = grad_outputs[0] if cast else g
                    amax.append(float(src.abs().max()))

        return hook

    nodes, stack = set(), [loss.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in nodes:
            continue
        nodes.add(n)
        n.register_hook(grab(n))
        stack.extend(f for f, _ in n.next_functions)
    return amax


def test_grad_amax_is_the_recorded_models_backward_in_float16(tmp_path):
    """``grad_amax`` is the largest magnitude of the float16 tensors the model's backward pass
    formed (read back here by hooks on every autograd node: their float16 gradients, and for a
    cast into float16 the FP32 values cast), unscaled; another model's backward pass inside the
    step counts for nothing; the dispatch mode is off from the optimizer's step on and between
    steps."""
    def run(out, other):
        torch.manual_seed(0)
        model = TinyTransformer()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        side = torch.nn.Linear(4, 4)
        seen = []
        with Recorder(model, out=out, every=0, optimizer=opt, scaler=scaler) as rec:
            for x, y in batches(4):
                opt.zero_grad()
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = torch.nn.functional.cross_entropy(model(x), y)
                    if other:  # an unrecorded model's backward, huge, inside the step
                        (side(torch.full((2, 4), 1e4)).sum() * 1e3).backward()
                assert rec._backward.on
                amax = float16_of_backward(loss)
                scale = scaler.get_scale()
                scaler.scale(loss).backward()
                scaler.step(opt)
                assert not rec._backward.on  # the optimizer stepped (no step skips here)
                rec.step(loss)
                scaler.update()
                seen.append(max(amax) / scale)
        return [r["grad_amax"] for r in read_jsonl(out / "metrics.jsonl")], seen

    alone, seen = run(tmp_path / "a", False)
    with_other, _ = run(tmp_path / "b", True)
    assert alone == with_other
    for recorded, fp16 in zip(alone, seen):
        # What the nodes' hooks see is what the mode sees between nodes (it also sees the
        # values inside each node's backward, none larger here).
        assert recorded == fp16 > 0


class FloatOutput(TinyTransformer):
    """An FP32 output, whatever the weights and autocast."""

    def forward(self, tokens):
        return super().forward(tokens).float()


class HalfOutput(TinyTransformer):
    """A float16 output, whatever the weights."""

    def forward(self, tokens):
        return super().forward(tokens).half()


@pytest.mark.parametrize(
    "model_type,half,autocast",
    [(FloatOutput, True, False), (HalfOutput, False, False), (FloatOutput, False, True)],
    ids=["float16 weights", "float16 output", "autocast, FP32 output"],
)
def test_a_loop_that_stores_float16_records_it(tmp_path, model_type, half, autocast):
    """float16 weights, or a float16 output, or autocast with an FP32 output: the loop stores
    float16 tensors, the mode is on, and ``grad_amax`` is theirs, as the nodes' hooks see them."""
    torch.manual_seed(0)
    model = model_type()
    if half:
        model.half()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    seen = []
    with Recorder(model, out=tmp_path / "run", every=0, optimizer=opt) as rec:
        for x, y in batches(3):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            assert rec._backward.on
            amax = float16_of_backward(loss)
            loss.backward()
            opt.step()
            rec.step(loss)
            seen.append(max(amax))
    assert [r["grad_amax"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == seen
    assert all(a > 0 for a in seen)


def test_grad_amax_of_negative_gradients(tmp_path):
    """Every gradient negative (the loss -sum(w x), float16): the largest magnitude is the
    least value's, |-(3 + 1)|."""
    w = torch.nn.Parameter(torch.ones((), dtype=torch.float16))
    model = torch.nn.Module()
    model.w = w
    model.forward = lambda x: x * model.w
    with Recorder(model, out=tmp_path / "run", every=0) as rec:
        loss = -model(torch.tensor([3.0, 1.0], dtype=torch.float16)).sum()
        loss.backward()
        rec.step(loss)
    assert [r["grad_amax"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [4.0]


def test_a_gradient_holding_an_inf_says_nothing_of_its_other_values(tmp_path):
    """The loss 2 sum(w x) summed in FP32, w and x in float16, x = (60000, 1): w's gradient
    (120000 -> inf, 2) holds an inf, so of the values known only the cast's FP32 input (2, 2)
    counts, and the step is bounded."""
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    model.forward = lambda x: x * model.w
    with Recorder(model, out=tmp_path / "run", every=0) as rec:
        loss = model(torch.tensor([60000.0, 1.0], dtype=torch.float16)).float().sum() * 2
        loss.backward()
        assert torch.isinf(model.w.grad[0]) and math.isfinite(loss.item())
        rec.step(loss)
    (step,) = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert (step["grad_amax"], step["grad_amax_bounded"]) == (2.0, True)


@pytest.mark.filterwarnings("ignore:Recorder. the loop stores no tensor narrower")  # FP32 on purpose
def test_an_fp32_loop_records_the_weights_gradients(tmp_path):
    """A loop that stores no narrow tensor (no autocast, FP32 weights and outputs) runs without
    the node hooks once its first step's graph showed no narrow gradient: ``grad_amax`` is the
    largest magnitude of the weights' gradients (unscaled), and a step with an inf among them is
    marked bounded."""
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    seen = []
    with Recorder(model, out=tmp_path / "run", every=2, optimizer=opt, scaler=scaler) as rec:
        for step, (x, y) in enumerate(batches(4), start=1):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            assert rec._backward.on == (step == 1)
            scaler.scale(loss).backward()
            if step == 3:
                model.head.weight.grad[0, 0] = math.inf
            scaler.step(opt)  # unscales the gradients in place
            grads = [p.grad[torch.isfinite(p.grad)] for p in model.parameters()]
            seen.append(max(float(g.abs().max()) for g in grads))
            rec.step(loss)
            scaler.update()
    steps = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [s["grad_amax"] for s in steps] == seen
    assert [s.get("grad_amax_bounded", False) for s in steps] == [False, False, True, False]


def test_a_gradient_received_from_two_nodes_counts_as_their_sum(tmp_path):
    """``w`` (float16) used twice, ``x w + x w``: each product's node passes on ``x`` to ``w``,
    which receives their sum, ``2 x``: the sum is a gradient the backward pass stores in
    float16 too, and here the largest, |2 3|."""
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    model.forward = lambda x: x * model.w + x * model.w
    with Recorder(model, out=tmp_path / "run", every=0) as rec:
        loss = model(torch.tensor([3.0, 1.0], dtype=torch.float16)).float().sum()
        loss.backward()
        rec.step(loss)
    assert [r["grad_amax"] for r in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [6.0]


def test_a_cast_into_float16_counts_the_values_before_rounding(tmp_path):
    """The loss ``c sum(w x)`` summed in FP32, w and x float16, x = 1: the gradient cast into
    float16 is ``c`` in FP32. At c = 1 + 2^-12 float16 rounds it to 1: the value before rounding
    counts. At c = 70000 float16 rounds it to inf: the value before rounding is finite, and the
    gradients below it are inf (the step bounded)."""
    for c, bounded in ((1 + 2.0**-12, False), (70000.0, True)):
        model = torch.nn.Module()
        model.w = torch.nn.Parameter(torch.ones(1, dtype=torch.float16))
        model.forward = lambda x: x * model.w
        out = tmp_path / str(c)
        with Recorder(model, out=out, every=0) as rec:
            loss = model(torch.ones(1, dtype=torch.float16)).float().sum() * c
            loss.backward()
            rec.step(loss)
        (step,) = read_jsonl(out / "metrics.jsonl")
        assert (step["grad_amax"], step.get("grad_amax_bounded", False)) == (c, bounded)


def test_a_backward_the_scaler_did_not_scale_inside_a_step_is_warned_of(tmp_path):
    """Two scaled backward passes in a step (gradient accumulation) are the loop's own; an
    extra FP32 backward inside a recorded step (a dump done in the loop) mixes gradients at
    another scale into the step's grad_amax and capture: the recorder says so, naming the step,
    once."""
    torch.manual_seed(0)
    model = TinyTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Recorder(model, out=tmp_path / "run", every=2, optimizer=opt, scaler=scaler) as rec:
            for step, (x, y) in enumerate(batches(4), start=1):
                opt.zero_grad()
                h = len(x) // 2
                for xs, ys in ((x[:h], y[:h]), (x[h:], y[h:])):
                    with torch.autocast("cpu", dtype=torch.float16):
                        loss = torch.nn.functional.cross_entropy(model(xs), ys) / 2
                    scaler.scale(loss).backward()
                if step >= 3:  # the book's dump, done inside the loop
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                scaler.step(opt)
                rec.step(loss)
                scaler.update()
    said = [str(w.message) for w in caught if str(w.message).startswith("Recorder")]
    assert len(said) == 1 and "step 3 ran 3 backward passes" in said[0], said
