"""mixprec.torch.quantize and mixprec.torch.Simulate: torch tensors rounded as numpy arrays are,
a PyTorch model trained in simulated precision at the points `mixprec train` rounds, checked
against `mixprec train` itself on its built-in MLP, and a simulated run recorded and reported."""

import importlib.util
import json
import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")

import mixprec  # noqa: E402
from mixprec import _mixprec  # noqa: E402
from mixprec.torch import Recorder, Simulate, quantize  # noqa: E402
from mixprec._torch_round import quantize_torch  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def values(n=4096, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = np.exp2(rng.uniform(-30, 12, n)) * rng.choice([-1.0, 1.0], n)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65520.0, 2.0**-25]
    return x.astype(dtype)


FORMATS = ["fp16", "bf16", "fp8-e4m3", "fp8-e5m2", "e3m4", "mxfp8-e4m3", "mxfp4", "nvfp4",
           "fp8-e4m3@1x128"]
MODES = ["nearest-even", "toward-zero", "up", "down", "stochastic"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("rounding", MODES)
def test_quantize_on_cpu_tensors_is_the_numpy_path(fmt, rounding):
    for dtype in (np.float32, np.float64):
        x = values(dtype=dtype).reshape(32, 128)
        for overflow in ("ieee", "saturate"):
            want, wc = mixprec.quantize(x, fmt, rounding, overflow, True, 7, return_counts=True)
            got, gc = quantize(torch.from_numpy(x.copy()), fmt, rounding, overflow, True, 7,
                               return_counts=True)
            assert got.dtype == torch.from_numpy(x).dtype and got.shape == (32, 128)
            np.testing.assert_array_equal(got.numpy().view(np.uint8), want.view(np.uint8))
            assert gc == wc


def test_quantize_strided_and_in_place():
    x = torch.from_numpy(values().reshape(64, 64))
    t = x.t()  # not contiguous
    want = mixprec.quantize(np.ascontiguousarray(t.numpy()), "fp16")
    np.testing.assert_array_equal(quantize(t, "fp16").numpy(), want)
    y = x.clone()
    assert quantize(y, "fp8-e5m2", out=y) is y
    np.testing.assert_array_equal(y.numpy(), mixprec.quantize(x.numpy(), "fp8-e5m2"))
    with pytest.raises(TypeError, match="float32 or float64"):
        quantize(x.half(), "fp16")
    with pytest.raises(ValueError, match="format"):
        quantize(x, "fp17")


def test_quantize_off_the_cpu_takes_the_torch_path():
    # A meta tensor has no values: the torch path keeps every value where the tensor lies; the
    # public quantize names such a tensor instead of returning one without a word (issue 42).
    y = quantize_torch(torch.empty(4, 64, device="meta"), "mxfp8-e4m3")
    assert y.device.type == "meta" and y.shape == (4, 64)
    with pytest.raises(ValueError, match="meta device"):
        quantize(torch.empty(4, 64, device="meta"), "mxfp8-e4m3")


def small_mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def data(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)


def grads_of(model):
    return {n: p.grad.clone() for n, p in model.named_parameters()}


def one_step(recipe, scaler=None, multiplier=2.0**-24, steps=1):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data()
    sim = Simulate(model, recipe, optimizer=opt, scaler=scaler)
    with sim:
        for _ in range(steps):
            opt.zero_grad()
            sim.backward(torch.nn.functional.cross_entropy(model(x), y) * multiplier)
            # The gradients as the backward pass held them: scaled by the loss scale.
            held = {n: p.grad.clone() for n, p in model.named_parameters()}
            scale = sim.loss_scale
            sim.step()
            for n, p in model.named_parameters():
                # The optimizer saw them unscaled.
                np.testing.assert_array_equal(p.grad.numpy(), (held[n] * (1 / scale)).numpy())
    return model, sim, held


def test_fp16_pure_stores_only_fp16_gradients_and_loses_the_small_ones():
    model, sim, scaled = one_step("fp16-pure", multiplier=2.0**-16)
    for name, g in scaled.items():
        # Every weight gradient is a value of fp16 (as the backward pass held it, before
        # unscaling: here the scale is 1).
        np.testing.assert_array_equal(quantize(g, "fp16").numpy(), g.numpy(), err_msg=name)
    lost = sim.last["counts"]["weight_grad"]["underflow"]
    assert lost > 0 and sim.last["counts"]["activation_grad"]["underflow"] > 0
    # With a static loss scale the same step loses nothing (fp16 master weights unscaled, as
    # the recipe must allow: GradScaler refuses to).
    with pytest.raises(ValueError, match="allow_fp16_unscale"):
        one_step("fp16-pure", scaler="static:2^16")
    pure = dict(json.loads(_mixprec.recipe_json("fp16-pure")), allow_fp16_unscale=True)
    _, scaled_sim, _ = one_step(pure, scaler="static:2^16", multiplier=2.0**-16)
    assert scaled_sim.recipe["loss_scaling"] == {"kind": "static", "scale": 2.0**16}
    assert scaled_sim.last["counts"]["weight_grad"]["underflow"] == 0
    assert scaled_sim.last["counts"]["activation_grad"]["underflow"] == 0


class Stored:
    """Stands for a capture: keeps what each storage point gave it."""

    def __init__(self):
        self.calls = []

    def add_stored(self, layer, cls, part, values, counts):
        self.calls.append((cls, values.copy(), counts))


def test_grad_amax_is_the_largest_gradient_stored_and_bounded_past_an_overflow():
    """A simulated step's ``grad_amax`` is the largest magnitude among the gradients its
    storage points rounded (as captured, before rounding) over the loss scale; where an
    overflow upstream left infinities or NaNs, the largest finite one, flagged as a bound."""
    # Gradients in e5m2 with fp8-hybrid's delayed scales: their amax read before scaling.
    e5m2 = dict(json.loads(_mixprec.recipe_json("fp8-hybrid")), name="grads-e5m2",
                activation_grads="fp8-e5m2", weight_grads="fp8-e5m2")
    for recipe, scale, bounded in (("fp16-master", 16, False), ("fp16-master", 24, True),
                                   (e5m2, 8, False)):
        model = small_mlp()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = data()
        with Simulate(model, recipe, optimizer=opt, scaler=f"static:2^{scale}") as sim:
            sim.capture = Stored()
            opt.zero_grad()
            sim.backward(torch.nn.functional.cross_entropy(model(x), y))
            sim.step()
        grads = [v for cls, v, _ in sim.capture.calls if cls.endswith("_grad")]
        kinds = [cls for cls, _, _ in sim.capture.calls if cls.endswith("_grad")]
        assert kinds.count("weight_grad") == 4 and kinds.count("activation_grad") >= 2
        finite = np.concatenate([np.abs(v[np.isfinite(v)]) for v in grads])
        assert (not np.isfinite(np.concatenate([g.ravel() for g in grads])).all()) == bounded
        assert sim.last["grad_amax_bounded"] == bounded
        assert sim.last["grad_amax"] == float(finite.max()) / 2.0**scale


def test_a_gradient_that_overflows_as_it_is_stored_is_no_bound():
    """Weight gradients alone in fp16, the loss scaled past fp16's range: they overflow as they
    are stored (the step overflows), but the values rounded were finite, so ``grad_amax`` is
    their largest and not a bound."""
    recipe = dict(json.loads(_mixprec.recipe_json("fp32")), name="wgrad-fp16", weight_grads="fp16")
    model = small_mlp()
    x, y = data()
    with Simulate(model, recipe, optimizer=torch.optim.SGD(model.parameters(), lr=0.1)) as sim:
        sim.capture = Stored()
        sim.backward(torch.nn.functional.cross_entropy(model(x), y) * 2.0**20)
        sim.step()
    stored = [v for cls, v, _ in sim.capture.calls if cls == "weight_grad"]
    top = max(float(np.abs(v).max()) for v in stored)
    assert np.isfinite(top) and top > 65504
    assert sim.last["counts"]["weight_grad"]["overflow"] > 0 and sim.last["overflow"]
    assert sim.last["grad_amax"] == top and not sim.last["grad_amax_bounded"]


def test_a_capture_holds_the_values_before_rounding():
    """What a capture step records of each storage point is the values it rounded as they were
    before rounding (so that rounding them again loses what the step's counts say), never the
    rounded ones, even where Simulate otherwise rounds in place."""

    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = data()
    with Simulate(model, "fp16-master", optimizer=opt) as sim:
        sim.capture = Stored()
        opt.zero_grad()
        sim.backward(torch.nn.functional.cross_entropy(model(x), y) * 2.0**-16)
        sim.step()
    classes = {cls for cls, _, _ in sim.capture.calls}
    assert {"activation", "activation_grad", "weight_grad", "weight"} <= classes
    lost = 0
    for cls, values, counts in sim.capture.calls:
        _, again = mixprec.quantize(values, "fp16", return_counts=True)
        assert again["underflow"] == counts[0], cls
        lost += counts[0]
    assert lost > 0


def test_the_weight_gradients_are_the_fp32_ones_rounded():
    # Only the weight gradients in fp16: what is stored is exactly the FP32 gradient rounded,
    # and what is lost exactly the nonzero ones at or below half fp16's smallest subnormal.
    recipe = dict(json.loads(_mixprec.recipe_json("fp32")), name="wgrad-fp16", weight_grads="fp16")
    model, sim, stored = one_step(recipe, multiplier=2.0**-16)
    ref = small_mlp()
    x, y = data()
    (torch.nn.functional.cross_entropy(ref(x), y) * 2.0**-16).backward()
    tiny = 0
    for name, p in ref.named_parameters():
        np.testing.assert_array_equal(stored[name].numpy(), quantize(p.grad, "fp16").numpy())
        tiny += int(((p.grad.abs() <= 2.0**-25) & (p.grad != 0)).sum())
    assert tiny > 0 and sim.last["counts"]["weight_grad"]["underflow"] == tiny
    assert set(sim.last["counts"]) == {"weight_grad"}


def test_stochastic_rounding_draws_from_the_seed():
    recipe = dict(json.loads(_mixprec.recipe_json("fp16-master")), rounding="stochastic")
    read = []
    for seed in (1, 1, 2):
        model = small_mlp()
        with Simulate(model, recipe, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), seed=seed):
            read.append(torch.cat([model[0].weight.detach().reshape(-1), model[2].weight.detach().reshape(-1)]))
    assert torch.equal(read[0], read[1]) and not torch.equal(read[0], read[2])
    # Each tensor rounded draws from its own stream: the two layers' weights rounded as if one
    # stream had been reused would agree where their values do; here the streams differ.
    w = small_mlp()[0]._parameters["weight"].detach()
    assert not torch.equal(quantize(w, "fp16", "stochastic", seed=1), quantize(w, "fp16", "stochastic", seed=2))


def test_a_rounding_in_place_tells_autograd():
    """A tensor Simulate rounds in place (the binding writes its memory, behind torch's back)
    gets a new version, as torch's own in-place operations give it: autograd then refuses a
    backward pass through a saved value that changed, rather than use the rounded one."""
    model = small_mlp()
    with Simulate(model, "fp16-master", optimizer=torch.optim.SGD(model.parameters(), lr=0.1)) as sim:
        x = torch.full((3,), 0.1, requires_grad=True)
        y = x.exp()  # saves its result for the backward pass
        version = y._version
        with torch.no_grad():
            sim._round_(y, "activation", "0")
        assert y._version > version
        assert torch.equal(y.detach(), quantize(x.detach().exp(), "fp16"))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_parameters_without_storage_of_their_own_are_refused():
    """A parameter that is a wrapper subclass (as FSDP2's DTensor shards; test_distributed
    tries the real one) is refused in one line naming it, whatever its storage offset (its
    data_ptr is then that offset's address, which holds nothing of it)."""
    from test_torch_round import Wrapper

    for offset in (0, 4):
        model = small_mlp()
        model[2].weight = torch.nn.Parameter(Wrapper((4, 32), offset))
        with pytest.raises(TypeError, match=r"^model: parameter '2.weight' is a Wrapper without values"):
            Simulate(model, "fp16-master")


def test_hooks_leave_the_model_as_it_was():
    model = small_mlp()
    keys = list(model.state_dict())
    cls = type(model[0])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with Simulate(model, "fp16-master", optimizer=opt):
        assert list(model.state_dict()) == keys
        assert all(p.dtype == torch.float32 for p in model.parameters())
        w = model[0].weight  # the rounded copy the forward reads
        np.testing.assert_array_equal(w.detach().numpy(), quantize(model[0]._parameters["weight"], "fp16").numpy())
    assert type(model[0]) is cls and isinstance(model[0].weight, torch.nn.Parameter)
    assert not model[0]._forward_hooks and not model._forward_pre_hooks


def test_gemm_operands_are_cast_as_the_training_core_casts_them():
    lin = torch.nn.Linear(64, 16)
    model = torch.nn.Sequential(lin)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.from_numpy(values(64 * 64).reshape(64, 64) * np.float32(2.0**-20)).nan_to_num(0.0, 0.0, 0.0)
    # Per block along the summed axis (MXFP8): the product of the cast operands.
    with Simulate(model, "mxfp8", optimizer=opt):
        y = model(x)
    want = quantize(x, "mxfp8-e4m3") @ quantize(lin.weight.detach(), "mxfp8-e4m3").t() + lin.bias
    np.testing.assert_array_equal(y.detach().numpy(), want.detach().numpy())
    # Per tensor with delayed scaling (fp8-hybrid): step 1 casts with scale 1, step 2 with
    # 448 / (step 1's amax).
    sim = Simulate(model, "fp8-hybrid", optimizer=opt)
    c = torch.from_numpy(values(64 * 16, seed=3).reshape(64, 16)).nan_to_num(0.0, 0.0, 0.0) * 1e-30
    with sim:
        for step in (1, 2):
            opt.zero_grad()
            y = model(x)
            sim.backward((y * c).sum())
            sim.step()
    s = torch.tensor(448.0, dtype=torch.float32) / x.abs().max()
    sw = torch.tensor(448.0, dtype=torch.float32) / lin.weight.detach().abs().max()
    cast = lambda t, s: quantize(t * s, "fp8-e4m3", overflow="saturate") * (1 / s)  # noqa: E731
    want = cast(x, s) @ cast(lin.weight.detach(), sw).t() + lin.bias
    np.testing.assert_array_equal(y.detach().numpy(), want.detach().numpy())
    # The bias gradient sums the uncast output gradient; the weight gradient is the product of
    # the cast ones.
    np.testing.assert_array_equal(lin.bias.grad.numpy(), c.sum(0).numpy())
    sg = torch.tensor(57344.0, dtype=torch.float32) / c.abs().max()
    dyq = quantize(c * sg, "fp8-e5m2", overflow="saturate") * (1 / sg)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), (dyq.t() @ cast(x, s)).numpy())


def test_bad_arguments_are_refused_with_the_command_lines_words():
    model = small_mlp()
    with pytest.raises(ValueError, match="recipe"):
        Simulate(model, "fp17-master")
    with pytest.raises(ValueError, match="optimizer"):
        Simulate(model, "fp16-pure")
    with pytest.raises(ValueError, match="accumulation"):
        recipe = json.loads(_mixprec.recipe_json("fp16-master"))
        Simulate(model, dict(recipe, accumulation="storage"))
    with pytest.raises(ValueError, match="scaler"):
        Simulate(model, "fp16-master", scaler="static:-3")
    with pytest.raises(TypeError, match="float32"):
        Simulate(small_mlp().half(), "fp16-master")


def test_wrong_kinds_of_model_and_scaler_are_named():
    """A model that is not a Module, or a scaler of no accepted kind, is a TypeError naming the
    argument; a number is a static loss scale (as "static:S"), refused unless positive and
    finite (ValueError); the Recorder takes only a GradScaler."""
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module, got str"):
        Simulate("abc", "fp16-master", optimizer=opt)
    with pytest.raises(TypeError, match="recipe: expected a preset name.*got int"):
        Simulate(model, 16)
    for bad in (float("nan"), float("inf"), 0.0, -1024.0, np.float32("nan")):
        with pytest.raises(ValueError, match="scaler: a static loss scale must be a positive finite"):
            Simulate(model, "fp16-master", optimizer=opt, scaler=bad)
    with pytest.raises(ValueError, match=r"scaler=1e\+300: .*out of f32's range"):
        Simulate(model, "fp16-master", optimizer=opt, scaler=1e300)
    for bad in (True, [1024.0], object()):
        with pytest.raises(TypeError, match="scaler: expected None .* got"):
            Simulate(model, "fp16-master", optimizer=opt, scaler=bad)
    for scale in (1024.0, 1024, np.float64(1024.0)):
        sim = Simulate(model, "fp16-master", optimizer=opt, scaler=scale)
        assert sim.recipe["loss_scaling"] == {"kind": "static", "scale": 1024.0}
        assert sim.recipe == Simulate(model, "fp16-master", optimizer=opt, scaler="static:1024").recipe
    with pytest.raises(TypeError, match="model: expected a torch.nn.Module, got str"):
        Recorder("abc", out="unused")
    with pytest.raises(TypeError, match="scaler: expected the loop's torch.amp.GradScaler"):
        Recorder(model, out="unused", scaler=1024.0)
    assert not pathlib.Path("unused").exists()


def test_a_gradscaler_drives_the_simulated_loop():
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40, growth_interval=2)
    sim = Simulate(model, "fp16-master", optimizer=opt, scaler=scaler)
    assert sim.recipe["loss_scaling"]["kind"] == "dynamic"
    x, y = data()
    skipped = []
    with sim:
        for _ in range(3):
            opt.zero_grad()
            sim.backward(torch.nn.functional.cross_entropy(model(x), y))
            skipped.append(sim.step())
    # 2^40 overflows fp16: the first steps are skipped and the scale backs off.
    assert skipped[0] and sim.last["overflow"] == skipped[-1]
    assert float(scaler.get_scale()) < 2.0**40


def built_in(recipe, steps):
    cfg = {"model": "mlp", "dataset": "digits", "recipe": recipe, "steps": steps, "batch": 128,
           "seed": 0, "optimizer": {"kind": "adam", "lr": 0.001},
           "loss_multiplier": 2.0**-16, "capture_every": 1}
    return cfg


def train_like_the_core(cfg, out):
    """examples/simulate_crosscheck.py's PyTorch side (the training core's MLP from its own
    start, under Simulate and the Recorder); returns the test accuracy."""
    path = ROOT / "examples" / "simulate_crosscheck.py"
    spec = importlib.util.spec_from_file_location("simulate_crosscheck", path)
    crosscheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crosscheck)
    return crosscheck.train_torch(cfg, out)


@pytest.mark.parametrize("recipe", ["fp16-master", "fp16-static"])
def test_the_built_in_mlp_loses_what_mixprec_train_loses(cli, tmp_path, recipe):
    cfg = built_in(recipe, 3)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    assert cli("train", "--config", str(path), "--out", str(tmp_path / "train")).returncode == 0
    train_like_the_core(cfg, tmp_path / "torch")
    rows = [
        [json.loads(line) for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
        for d in ("train", "torch")
    ]
    a, b = rows[0][0], rows[1][0]
    # Step 1 starts from the same weights and batch: the same values are stored and (up to what
    # PyTorch's own GEMM order changes in FP32) the same ones underflow.
    for cls in ("weight", "activation", "activation_grad", "weight_grad"):
        ca, cb = a["counts"][cls], b["counts"][cls]
        assert ca["stored"] == cb["stored"], cls
        assert abs(ca["underflow"] - cb["underflow"]) <= max(2, ca["underflow"] // 100), (cls, ca, cb)
    assert a["loss_scale"] == b["loss_scale"]
    assert abs(a["loss"] - b["loss"]) < 1e-5
    # The recorded simulated run renders in report, with its recipe.
    r = cli("report", str(tmp_path / "train"), str(tmp_path / "torch"), "--out", str(tmp_path / "rep"))
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert recipe in json.dumps(report)
    config = json.loads((tmp_path / "torch" / "config.json").read_text())
    assert config["recipe"]["weights"] == "fp16" and config["source"] == "pytorch"
    # And replays: its own policy gives back the scales it recorded (3 steps, none skipped).
    r = cli("replay", str(tmp_path / "torch"), "--policy", "run", "static:2^10")
    assert r.returncode == 0, r.stderr
    assert "run (" in r.stdout and "static:2^10" in r.stdout
    captures = (tmp_path / "torch" / "captures.jsonl").read_text().splitlines()
    sites = {(s["layer"], s["tensor"]) for s in json.loads(captures[0])["sites"]}
    assert ("input", "activation") in sites and ("0.linear", "weight_grad") in sites


def test_loss_scaling_rescues_the_built_in_mlp(tmp_path):
    # 60 steps: without scaling, fp16 loses the gradients and the MLP barely learns; a static
    # 2^16 trains it as FP32 does.
    acc = {r: train_like_the_core(dict(built_in(r, 60), capture_every=0), tmp_path / r)
           for r in ("fp32", "fp16-master", "fp16-static")}
    assert acc["fp16-static"] > acc["fp16-master"] + 0.3
    assert abs(acc["fp16-static"] - acc["fp32"]) < 0.05


def test_the_recorder_needs_a_step_of_the_simulate(tmp_path):
    model = small_mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sim = Simulate(model, "fp16-master", optimizer=opt)
    with sim, Recorder(model, tmp_path / "run", every=0, simulate=sim) as rec:
        x, y = data()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        sim.backward(loss)
        with pytest.raises(RuntimeError, match="sim.step"):
            rec.step(loss)
        sim.step()
        rec.step(loss)
    with pytest.raises(ValueError, match="scaler"):
        Recorder(model, tmp_path / "other", simulate=sim, scaler=torch.amp.GradScaler("cpu"))
