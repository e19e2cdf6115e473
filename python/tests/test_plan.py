"""Per-layer precision in PyTorch: Simulate's ``keep`` (layers that keep another recipe), the
per-layer sensitivity, the greedy plan and its validation by re-training, each checked against
the truth: plain FP32 PyTorch, the same layer cast alone, a layer built to underflow."""

import json
import math
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch.nn.functional as F  # noqa: E402

from mixprec.torch import Recorder, Simulate, plan, sensitivity, validate  # noqa: E402
from test_zoo_simulate import Einsum  # noqa: E402  (a product Simulate cannot cast)
from zoo import ZOO  # noqa: E402


def grads(model, loss_fn, batch, **simulate):
    """The weight gradients of one backward pass, bare or under ``Simulate(**simulate)``."""
    model.zero_grad(set_to_none=True)
    if simulate:
        with Simulate(model, **simulate) as sim:
            sim.backward(loss_fn(model, batch))
    else:
        loss_fn(model, batch).backward()
    out = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return out


@pytest.mark.parametrize("recipe", ["nvfp4", "mxfp8"])
@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_keeping_every_layer_in_fp32_is_plain_fp32_bit_for_bit(name, recipe):
    """keep={"*": "fp32"} runs every product as PyTorch does (F.linear, addmm, the attention's
    projections), so the gradients are plain FP32's, bit for bit; without keep they are not."""
    z = ZOO[name]
    model, batch = z.model(), z.batches(1)[0]
    want = grads(model, z.loss, batch)
    got = grads(model, z.loss, batch, recipe=recipe, keep={"*": "fp32"})
    assert got.keys() == want.keys()
    assert all(torch.equal(got[n], want[n]) for n in want)
    cast = grads(model, z.loss, batch, recipe=recipe)
    assert not all(torch.equal(cast[n], want[n]) for n in want)


def mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 4),
    )


def outputs(model, x, **simulate):
    """Each Linear's input and output in one forward pass under ``Simulate(**simulate)``, and
    the Simulate."""
    seen = {}

    def hook(name):
        return lambda m, i, o: seen.__setitem__(name, (i[0].detach(), o.detach()))

    hooks = [
        m.register_forward_hook(hook(n or "model"))
        for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    ]
    with Simulate(model, **simulate) as sim:
        model(x)
    for h in hooks:
        h.remove()
    return seen, sim


def test_a_kept_layer_runs_uncast_and_every_other_is_cast_as_without_keep():
    """Under nvfp4 with module 2 kept in FP32 (and, first match winning, module 4 in mxfp8 by
    a later pattern than the one sending 2 to fp32): module 2's output is PyTorch's F.linear
    of its input, and modules 0 and 4 give, on the inputs they saw, the output of the same
    module cast alone in their recipe (no keep) - bit for bit."""
    model = mlp()
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(1))
    keep = {"2": "fp32", "[24]": "mxfp8"}
    seen, sim = outputs(model, x, recipe="nvfp4", keep=keep)
    lin = model[2]
    assert torch.equal(seen["2"][1], F.linear(seen["2"][0], lin.weight, lin.bias))
    for name, recipe in (("0", "nvfp4"), ("4", "mxfp8")):
        alone, _ = outputs(model[int(name)], seen[name][0], recipe=recipe)
        assert torch.equal(seen[name][1], alone["model"][1]), name
        lin = model[int(name)]
        assert not torch.equal(seen[name][1], F.linear(seen[name][0], lin.weight, lin.bias))
    cov = sim.coverage
    assert cov["kept"] == ["2.weight"] and cov["uncast"] == []
    assert cov["cast"] == ["0.weight", "4.weight"]
    assert cov["product_weights"] == 32 * 32 * 2 + 32 * 4
    assert cov["cast_weights"] == 32 * 32 + 32 * 4
    assert sim.recipe["keep"] == keep


def test_keep_in_the_recipe_is_keep_as_an_argument():
    """A recipe dict or JSON text carrying "keep" means Simulate(..., keep=...)."""
    model = mlp()
    x = torch.randn(16, 32)
    base = Simulate(model, "nvfp4").recipe
    want, _ = outputs(model, x, recipe="nvfp4", keep={"2": "fp32"})
    for recipe in (dict(base, keep={"2": "fp32"}), json.dumps(dict(base, keep={"2": "fp32"}))):
        got, sim = outputs(model, x, recipe=recipe)
        assert all(torch.equal(got[n][1], want[n][1]) for n in want)
        assert sim.recipe["keep"] == {"2": "fp32"}
    assert "keep" not in Simulate(model, "nvfp4", keep={}).recipe  # old recipes stay as they were


def test_bad_keeps_are_refused_naming_the_problem():
    model = mlp()
    match = r"pattern '\*\.attn' matches no layer of the model \(model, 0, 1"
    with pytest.raises(ValueError, match=match):
        Simulate(model, "nvfp4", keep={"*.attn": "fp32"})
    base = Simulate(model, "nvfp4").recipe
    with pytest.raises(ValueError, match="given both as keep="):
        Simulate(model, dict(base, keep={"0": "fp32"}), keep={"2": "fp32"})
    with pytest.raises(ValueError, match=r"keep\['0'\]: a kept recipe cannot have a keep"):
        Simulate(model, "nvfp4", keep={"0": dict(base, keep={"2": "fp32"})})
    with pytest.raises(ValueError, match=r"keep\['0'\]: .*fp99"):
        Simulate(model, "nvfp4", keep={"0": "fp99"})


def test_a_kept_layer_is_not_warned_of_as_uncast():
    """The einsum's weight warns as uncast under mxfp8; kept in FP32 it is counted as kept."""
    m = Einsum()
    with pytest.warns(UserWarning, match="uncast"):
        with Simulate(m, "mxfp8") as sim:
            m(torch.randn(2, 4))
    assert sim.coverage["uncast"] == ["w"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with Simulate(m, "mxfp8", keep={"model": "fp32"}) as sim:
            m(torch.randn(2, 4))
    assert sim.coverage["uncast"] == [] and sim.coverage["kept"] == ["w"]
    assert sim.coverage["cast"] == ["lin.weight"]


def test_a_recorded_run_carries_the_keep(tmp_path, cli):
    """The run's config records the recipe with its keep, which reports read."""
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sim = Simulate(model, "nvfp4", optimizer=opt, keep={"4": "bf16-master"})
    with sim, Recorder(model, tmp_path / "run", every=1, simulate=sim) as rec:
        for _ in range(2):
            opt.zero_grad()
            loss = model(torch.randn(8, 32)).pow(2).mean()
            sim.backward(loss)
            sim.step()
            rec.step(loss)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["recipe"]["keep"] == {"4": "bf16-master"}
    r = cli("report", str(tmp_path / "run"), "--out", str(tmp_path / "page"))
    assert r.returncode == 0, r.stderr
    # bf16-master stores module 4's activations (and only its) in bf16.
    assert sim.rounds("activation", "4") and not sim.rounds("activation", "2")


class Spiky(torch.nn.Module):
    """An MLP (with a batch norm, whose running statistics every forward pass in training mode
    moves) whose third linear layer reads inputs that underflow in NVFP4 by construction: in
    every block of 16 along its inputs, one value 2^10 times the others, which fall below half
    the smallest subnormal of the block's scale and round to zero."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(32, 64)
        self.norm = torch.nn.BatchNorm1d(64)
        self.b = torch.nn.Linear(64, 64)
        self.c = torch.nn.Linear(64, 64)
        self.d = torch.nn.Linear(64, 4)
        spikes = torch.ones(64)
        spikes[::16] = 2.0**10
        self.register_buffer("spikes", spikes)

    def forward(self, x):
        h = torch.relu(self.b(self.norm(torch.relu(self.a(x)))))
        return self.d(torch.relu(self.c((h.abs() + 0.5) * self.spikes)))


def spiky_batches(n=2):
    g = torch.Generator().manual_seed(3)
    return [
        (torch.randn(32, 32, generator=g), torch.randint(0, 4, (32,), generator=g))
        for _ in range(n)
    ]


def spiky_loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def test_sensitivity_ranks_the_layer_whose_inputs_underflow_worst():
    """Layer c's inputs underflow by construction: it ranks first, its underflow share the
    15 of 16 values each block loses; the table's FLOPs are each layer's products' (4MNK for
    the first, whose input needs no gradient, 6MNK after)."""
    model = Spiky()
    sens = sensitivity(model, spiky_batches(), spiky_loss, "nvfp4", name="spiky")
    rows = {r["layer"]: r for r in sens.layers}
    assert sens.layers[0]["layer"] == "c"
    assert rows["c"]["underflow"] > 0.2 and all(rows[n]["underflow"] < 0.05 for n in "abd")
    assert rows["c"]["grad_rel_err"] > 2 * max(rows[n]["grad_rel_err"] for n in "abd")
    assert rows["a"]["flops"] == 4 * 32 * 64 * 32 and rows["c"]["flops"] == 6 * 32 * 64 * 64
    assert rows["d"]["flops"] == 6 * 32 * 4 * 64
    errors = [r["grad_rel_err"] for r in sens.layers]
    assert errors == sorted(errors, reverse=True)
    assert sens.all["grad_rel_err"] >= rows["c"]["grad_rel_err"] * 0.5
    assert "c " in str(sens).splitlines()[2]


def test_fp8_delayed_scales_come_from_an_amax_seen():
    """Under fp8-hybrid (per-tensor delayed scaling) each cast tensor is scaled from the amax
    of a first, unmeasured pass: on the same batch twice, nothing a layer casts alone
    saturates (with the initial scale of 1, layer c's inputs, up to ~2^10, exceed E4M3's
    448)."""
    b = spiky_batches(1)[0]
    sens = sensitivity(Spiky(), [b, b], spiky_loss, "fp8-hybrid")
    assert all(r["saturate"] == 0 for r in sens.layers)


def test_sensitivity_is_reproducible_and_leaves_the_model_as_it_was(tmp_path):
    """The same seed gives the same numbers (stochastic rounding: another seed does not); the
    weights, buffers and gradients are as they were; sensitivity.json is the table."""
    model = Spiky()
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.25)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    recipe = dict(Simulate(model, "nvfp4").recipe, rounding="stochastic")
    one = sensitivity(model, spiky_batches(), spiky_loss, recipe, seed=5)
    two = sensitivity(model, spiky_batches(), spiky_loss, recipe, seed=5)
    other = sensitivity(model, spiky_batches(), spiky_loss, recipe, seed=6)
    assert one.to_dict() == two.to_dict()
    assert one.to_dict()["layers"] != other.to_dict()["layers"]
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(torch.equal(p.grad, torch.full_like(p, 0.25)) for p in model.parameters())
    path = one.save(tmp_path / "plan")
    doc = json.loads(path.read_text())
    assert doc["schema"] == "mixprec-sensitivity/1" and doc["model"] == "Spiky"
    assert doc["batches"] == 2 and doc["seed"] == 5 and doc["recipe"] == "nvfp4"
    assert doc["layers"] == one.layers
    assert set(doc["all"]) == set(one.layers[0]) - {"layer", "flops"}


def test_the_plan_keeps_the_harmful_layer_and_its_recipe_trains(tmp_path):
    """With a gradient budget between the harmless layers' joint error and the underflowing
    layer's, the plan casts a, b, d (least harm first, each step measured jointly) and keeps c;
    its recipe keeps c uncast in Simulate; validation trains the three arms into run
    directories."""
    model = Spiky()
    sens = sensitivity(model, spiky_batches(), spiky_loss, "nvfp4")
    rows = {r["layer"]: r for r in sens.layers}
    budget = (rows["c"]["grad_rel_err"] + max(rows[n]["grad_rel_err"] for n in "abd")) / 2
    p = plan(sens, max_grad_error=budget)
    assert p.keep == ["c"] and sorted(p.cast) == ["a", "b", "d"]
    assert p.cast == [r["layer"] for r in sorted(sens.layers, key=lambda r: r["grad_rel_err"])][:3]
    assert [s["layer"] for s in p.steps] == p.cast and p.grad_rel_err == p.steps[-1]["grad_rel_err"]
    assert p.grad_rel_err <= budget
    total = sum(r["flops"] for r in sens.layers)
    assert p.flops_share == pytest.approx(1 - rows["c"]["flops"] / total)
    p.save(tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert doc["keep"] == ["c"] and doc["budget"] == {"max_grad_error": budget}
    assert doc["high"] == "fp32"
    recipe = json.loads((tmp_path / "plan-recipe.json").read_text())
    assert recipe["keep"] == {"c": "fp32"} and recipe["name"] == "nvfp4-plan"
    _, sim = outputs(model, spiky_batches(1)[0][0], recipe=recipe)
    assert sim.coverage["kept"] == ["c.weight"]
    shares = plan(sens, flops_share=0.5)
    assert shares.flops_share >= 0.5 and shares.steps[-2]["flops_share"] < 0.5

    batches = spiky_batches(4)
    v = validate(
        tmp_path, lambda k: Spiky(), lambda m: torch.optim.SGD(m.parameters(), lr=0.05),
        batches, spiky_loss, seeds=2, last_steps=2,
    )
    doc = json.loads((tmp_path / "validation.json").read_text())
    assert doc["schema"] == "mixprec-validation/1" and doc["last_steps"] == 2
    assert [(r["arm"], r["seed"]) for r in doc["runs"]] == [
        (a, k) for a in ("fp32", "all", "plan") for k in (0, 1)
    ]
    config = json.loads((tmp_path / "runs" / "plan-seed1" / "config.json").read_text())
    assert config["recipe"]["keep"] == {"c": "fp32"}
    names = {a: json.loads((tmp_path / "runs" / f"{a}-seed0" / "config.json").read_text())
             ["recipe"]["name"] for a in ("fp32", "all", "plan")}
    assert names == {"fp32": "fp32", "all": "nvfp4", "plan": "nvfp4-plan"}  # as the CLI names them
    assert len(v.losses["all"][1]) == 4 and all(math.isfinite(x) for x in v.final["plan"])


def test_bad_budgets_are_refused():
    sens = sensitivity(mlp(), [torch.randn(4, 32)], lambda m, x: m(x).pow(2).mean(), "nvfp4")
    for kwargs in ({}, {"max_grad_error": 0.1, "flops_share": 0.5}, {"flops_share": 1.5},
                   {"max_grad_error": -1.0}, {"max_grad_error": float("nan")}):
        with pytest.raises(ValueError, match="budget|max_grad_error|flops_share"):
            plan(sens, **kwargs)
    with pytest.raises(ValueError, match="high"):
        plan(sens, max_grad_error=0.1, high="fp99")
    with pytest.raises(ValueError, match="casts no operands"):
        sensitivity(mlp(), [torch.randn(4, 32)], lambda m, x: m(x).sum(), "bf16-master")


def test_a_budget_nothing_fits_keeps_every_layer_high():
    """A gradient budget below every layer's error casts nothing: every layer keeps ``high``
    (bf16-master here), and the plan's error is that recipe's, measured (bf16 stores, not 0)."""
    sens = sensitivity(Spiky(), spiky_batches(), spiky_loss, "nvfp4")
    p = plan(sens, max_grad_error=1e-9, high="bf16-master")
    assert p.cast == [] and p.steps == [] and p.flops_share == 0
    assert p.keep == ["a", "b", "c", "d"]
    assert p.recipe["keep"] == {n: "bf16-master" for n in "abcd"}
    assert 0 < p.grad_rel_err < 0.05
