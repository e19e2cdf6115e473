"""mixprec.torch.Recorder on the model zoo (python/tests/zoo.py): Hugging Face GPT-2 and BERT,
torchvision ResNet-18 and ViT, under autocast in float16 and bfloat16 with a GradScaler.

``grad_amax`` is the largest magnitude of the narrow gradients of the step's backward pass,
unscaled: what autograd's nodes pass on and what tensors receive, proportional to the loss (and
so to the loss scale). The tests: halving the loss halves it; it equals a reference read by
hooks of the test's own on every node of the loss's graph; a model compiled by torch.compile is
refused; a loop that fails before its first step leaves no run directory.
"""

import json
import pathlib

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")
pytest.importorskip("transformers", reason="the zoo needs transformers")
pytest.importorskip("torchvision", reason="the zoo needs torchvision")

from mixprec.torch import Recorder  # noqa: E402
from zoo import NAMES, ZOO, devices  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
DEVICES = [
    pytest.param(d, marks=pytest.mark.skipif(d not in devices(), reason=f"no {d} here"))
    for d in ("cpu", "cuda")
]
SCALE = 2.0**-2


def grads_of_backward(loss, dtype):
    """Hooks on every autograd node of ``loss``'s graph; returns the list they fill, during its
    backward pass, with the largest magnitude of each ``dtype`` gradient that a node passes on
    to another (for a cast into ``dtype``, of the values cast, which the node received) or that
    a node other than the first receives. The slow reference: every gradient read twice, once
    passed on and once received."""
    amax = []

    def grab(node, root):
        def hook(grad_inputs, grad_outputs):
            cast = type(node).__name__ in ("ToCopyBackward0", "CopyBackwards")
            for g, (f, _) in zip(grad_inputs, node.next_functions):
                if f is not None and isinstance(g, torch.Tensor) and g.dtype == dtype:
                    src = grad_outputs[0] if cast and grad_outputs[0].shape == g.shape else g
                    amax.append(float(src.abs().max()))
            for g in grad_outputs if not root else ():
                if isinstance(g, torch.Tensor) and g.dtype == dtype:
                    amax.append(float(g.abs().max()))

        return hook

    nodes, stack = set(), [loss.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in nodes:
            continue
        nodes.add(n)
        n.register_hook(grab(n, n is loss.grad_fn))
        stack.extend(f for f, _ in n.next_functions)
    return amax


def record(name, out, dtype, device, divide=1.0, spy=None):
    """Runs the zoo's ``name`` (weights from seed 0) two steps, on two batches, under autocast
    in ``dtype`` with a GradScaler at 2^-2 that never grows, the loss divided by ``divide``; SGD
    at learning rate 0 keeps the weights, so that both values of divide see the same weights at
    each step (the gradients' subnormals, halved, lose bits: an update would differ in its last
    bits). ``spy(loss)`` is called on each scaled loss before its backward pass. Returns the
    recorded steps."""
    zoo = ZOO[name]
    model = zoo.model(0).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler(device, init_scale=SCALE, growth_interval=10**6)
    with Recorder(model, out=out, format=dtype, every=0, optimizer=opt, scaler=scaler) as rec:
        for batch in zoo.batches(2):
            opt.zero_grad()
            with torch.autocast(device, dtype=DTYPES[dtype]):
                loss = zoo.loss(model, zoo.to(batch, device)) / divide
            scaled = scaler.scale(loss)
            if spy is not None:
                spy(scaled)
            scaled.backward()
            scaler.step(opt)
            rec.step(loss)
            scaler.update()
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", NAMES)
def test_grad_amax_is_the_narrow_gradients_and_halves_with_the_loss(tmp_path, name, dtype,
                                                                    device):
    """Two steps of the loss L, read by the reference hooks: the recorded grad_amax is the
    largest magnitude they read, divided by the scale, to the last bit. The same two steps
    (the same weights and batches) with the loss L/2: every gradient of the backward pass
    halves, and so does grad_amax: exactly in bf16, within 4 units in the last place (2^-8 of
    the value) in fp16. The scale, 2^-2, keeps the gradients below the values inside a node's
    formula (gelu_new's 3x^2 of the saved activation in GPT-2, up to 2.86 at scale 1, the former
    dispatch mode's largest value), which do not halve and would break the ratio. Not exactly in
    fp16: a multiplication by 2^-1 commutes with rounding only outside the subnormals, and at
    2^-2 many of fp16's gradients are subnormal (bf16 has FP32's range): halved, they lose bits,
    and the sums they enter round to a neighbouring value (2 ulps off in GPT-2's first step,
    1 in ResNet's; 0 in every other model and step here)."""
    seen = []
    full = record(name, tmp_path / "L", dtype, device,
                  spy=lambda loss: seen.append(grads_of_backward(loss, DTYPES[dtype])))
    half = record(name, tmp_path / "L2", dtype, device, divide=2.0)
    assert [s["grad_amax"] for s in full] == [max(a) / SCALE for a in seen]
    for f, h in zip(full, half):
        assert not f["overflow"] and not h["overflow"]
        assert not f.get("grad_amax_bounded", False)
        assert f["loss"] == 2 * h["loss"]
        tolerance = {"fp16": 2.0**-8, "bf16": 0.0}[dtype]
        assert abs(h["grad_amax"] / f["grad_amax"] / 0.5 - 1) <= tolerance, (f, h)


def gpt2_loop(out, scale, shift):
    """One step of the zoo's GPT-2 under CPU autocast in float16 with a GradScaler at
    ``scale``, the first MLP's pre-activation of unit 0 raised by ``shift`` (its bias), recorded
    into ``out`` (or not, when None). Returns whether the scaler found an inf or NaN and the
    recorded step (or None)."""
    zoo = ZOO["gpt2"]
    model = zoo.model(0)
    with torch.no_grad():
        model.transformer.h[0].mlp.c_fc.bias[0] += shift
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=10**6)
    rec = Recorder(model, out=out, format="fp16", every=0, optimizer=opt, scaler=scaler) \
        if out is not None else None
    with torch.autocast("cpu", dtype=torch.float16):
        loss = zoo.loss(model, zoo.batches(1)[0])
    scaler.scale(loss).backward()
    scaler.step(opt)
    found = scaler._found_inf_per_device(opt)
    found = any(float(v) > 0 for v in found.values())
    step = None
    if rec is not None:
        rec.step(loss)
        rec.close()
        step = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    scaler.update()
    return found, step


def test_an_overflow_inside_a_nodes_formula_is_told_from_one_of_the_scale(tmp_path, cli):
    """GPT-2's gelu_new in float16 with a pre-activation of 300: the backward of x^3 forms
    3x^2 = 270000, above float16's 65504, whatever the gradient it multiplies; the step
    overflows at every scale (the truth: reruns at 2^-2 and 2^-24 both find an inf or NaN), and
    the recorder names the node (PowBackward0) under ``intermediate_overflow`` and does not
    call grad_amax a bound. A step that overflows because of its scale (2^20, no shift: the
    gradients of addmm, 0.12 unscaled, pass 65504 inside the nodes that form them; a rerun at
    2^-2 finds none) names no node and is bounded. The report says no scale avoids the
    first."""
    found, step = gpt2_loop(tmp_path / "inside", 2.0**-2, 300.0)
    assert found and step["overflow"] and step["skipped"]
    assert step["intermediate_overflow"] == ["PowBackward0"]
    assert not step.get("grad_amax_bounded", False)
    assert gpt2_loop(None, 2.0**-24, 300.0)[0]  # no scale avoids it
    found, step = gpt2_loop(tmp_path / "scale", 2.0**20, 0.0)
    assert found and step["overflow"] and step["grad_amax_bounded"]
    assert "intermediate_overflow" not in step
    assert not gpt2_loop(None, 2.0**-2, 0.0)[0]  # a smaller scale avoids it
    page = tmp_path / "page"
    r = cli("report", str(tmp_path / "inside"), "--out", str(page))
    assert r.returncode == 0, r.stderr
    html = (page / "index.html").read_text()
    assert "the backward formula of PowBackward0 formed an inf or NaN from finite gradients" \
        in html


def test_where_a_steps_first_inf_formed_is_named_forward_or_backward(tmp_path, cli):
    """GPT-2 in float16 with a GradScaler: with the second block's MLP output projection 10^6
    times too large, the forward pass overflows there (the truth: the test's own hook finds its
    output non-finite and every earlier module's finite) on four steps running, the scaler
    halving its scale each time; then, the weights restored, a scale of 2^30 overflows in the
    backward pass. Each step names where its first inf or NaN formed: the first overflowing
    step the model's output (the leaf modules are hooked only while steps overflow), the next
    ones the module; the report says the forward overflow is beyond any loss scale's reach and
    names the scaler's spiral."""
    zoo = ZOO["gpt2"]
    model = zoo.model(0)
    proj = model.transformer.h[1].mlp.c_proj
    order, first_bad = [], []

    def spy(module, args, output):
        order.append(module)
        if not first_bad and not bool(torch.isfinite(output).all()):
            first_bad.append(module)

    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    spies = [m.register_forward_hook(spy) for m in leaves]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1000)
    with Recorder(model, tmp_path / "run", "fp16", every=0, optimizer=opt, scaler=scaler) as rec:
        for step, batch in enumerate(zoo.batches(6), start=1):
            with torch.no_grad():
                if step == 2:
                    proj.weight.mul_(1e6)
                if step == 6:
                    proj.weight.div_(1e6)
                    scaler.update(2.0**30)
            first_bad.clear()
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.float16):
                loss = zoo.loss(model, batch)
            scaler.scale(loss).backward()
            scaler.step(opt)
            rec.step(loss)
            scaler.update()
            if 2 <= step <= 5:
                assert first_bad == [proj]  # the truth the recorder must name
    for h in spies:
        h.remove()
    steps = [json.loads(line) for line in
             (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "first_nonfinite" not in steps[0]
    name = "transformer.h.1.mlp.c_proj"
    assert all(s["overflow"] and s["skipped"] for s in steps[1:5])
    assert steps[1]["first_nonfinite"] == \
        {"layer": "model", "tensor": "activation", "op": "GPT2LMHeadModel"}
    for s in steps[2:5]:
        assert s["first_nonfinite"] == {"layer": name, "tensor": "activation", "op": "Conv1D"}
    assert [s["loss_scale"] for s in steps[1:5]] == [2.0**10, 2.0**9, 2.0**8, 2.0**7]
    last = steps[5]
    assert last["overflow"] and last["loss_scale"] == 2.0**30
    assert last["first_nonfinite"]["tensor"] == "activation_grad"
    assert last["first_nonfinite"]["op"].endswith("Backward0")
    page = tmp_path / "page"
    r = cli("report", str(tmp_path / "run"), "--out", str(page))
    assert r.returncode == 0, r.stderr
    text = (page / "index.html").read_text()
    assert (f"on 3 steps (the first 3) the forward pass formed an inf or NaN in {name} "
            "(Conv1D), beyond any loss scale's reach") in text
    assert "halving its scale each time (2^9 to 2^6)" in text


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_a_compiled_model_is_refused(tmp_path):
    """A model compiled by torch.compile (wrapped, or in place by ``.compile()``, or a module
    in it) is refused when the recorder is made, writing nothing; one compiled afterwards, or
    trained through a compiled wrapper the recorder was not given, at its first forward pass,
    which leaves no run directory behind (no step was recorded). Each time with one line
    naming what the recorder cannot see."""
    said = "Recorder: the model is compiled by torch.compile, whose graph runs without the node hooks"
    torch.manual_seed(0)
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))

    def train(model, called, out, autocast=True):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Recorder(model, out=out, every=0, optimizer=opt):
            with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
                loss = torch.nn.functional.cross_entropy(called(x), y)
            loss.backward()

    model = Mlp()
    with pytest.raises(ValueError, match=said) as e:
        Recorder(torch.compile(model, backend="aot_eager"), out=tmp_path / "wrapped")
    assert "\n" not in str(e.value)
    inner = Mlp()
    inner.head.compile(backend="aot_eager")
    with pytest.raises(ValueError, match=said):
        Recorder(inner, out=tmp_path / "in-place")
    assert list(tmp_path.iterdir()) == []
    for autocast in (True, False):  # the node hooks on, and off (an FP32 loop)
        with pytest.raises(RuntimeError, match=said):
            train(model, torch.compile(model, backend="aot_eager"), tmp_path / "called",
                  autocast)
        assert list(tmp_path.iterdir()) == []
    later = Mlp()
    rec_model = later
    opt = torch.optim.SGD(later.parameters(), lr=0.1)
    rec = Recorder(rec_model, out=tmp_path / "later", every=0, optimizer=opt)
    later.body.compile(backend="aot_eager")  # a module inside, after the recorder was made
    with pytest.raises(RuntimeError, match=said):
        with rec:
            with torch.autocast("cpu", dtype=torch.float16):
                later(x)
    assert list(tmp_path.iterdir()) == []


def test_a_loop_that_fails_before_its_first_step_leaves_nothing(tmp_path):
    """A loop that raises before it records a step: the run directory it made goes, with the
    parents it made; one that existed (empty) stays, empty. A loop that recorded a step keeps
    its unfinished run (INCOMPLETE)."""
    zoo = ZOO["vit"]
    model = zoo.model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = zoo.batches(1)[0]

    def loop(out, steps_before_failing):
        with pytest.raises(RuntimeError):
            with Recorder(model, out=out, format="bf16", every=1, optimizer=opt) as rec:
                for _ in range(steps_before_failing):
                    opt.zero_grad()
                    with torch.autocast("cpu", dtype=torch.bfloat16):
                        loss = zoo.loss(model, (x, y))
                    loss.backward()
                    opt.step()
                    rec.step(loss)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    model(x[:, :2])  # two channels: the first convolution raises

    loop(tmp_path / "made" / "deep" / "run", 0)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    loop(tmp_path / "empty", 0)
    assert list(tmp_path.iterdir()) == [tmp_path / "empty"]
    assert list((tmp_path / "empty").iterdir()) == []
    loop(tmp_path / "stepped", 1)
    assert (tmp_path / "stepped" / "INCOMPLETE").exists()
    lines = (tmp_path / "stepped" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1]
    assert pathlib.Path(tmp_path / "stepped" / "captures.jsonl").read_text()
