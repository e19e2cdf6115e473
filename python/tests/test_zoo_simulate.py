"""Simulate on the model zoo (python/tests/zoo.py: HF GPT-2 and BERT, torchvision ResNet-18 and
ViT), each check against the truth: PyTorch's own arithmetic on operands rounded by PyTorch or
by mixprec's exact rounding, and an aten-level record of which weights form products."""

import copy
import json
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")

import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers.pytorch_utils import Conv1D  # noqa: E402

from mixprec.torch import Recorder, Simulate, quantize  # noqa: E402
from zoo import DEVICES, NAMES, ZOO  # noqa: E402

RECIPES = ["fp16-master", "fp16-dynamic", "bf16-master", "fp8-hybrid", "mxfp8", "nvfp4"]
#: The aten operations that multiply their operands, and the positions of the factors (addmm's
#: first argument is added).
_ATEN_PRODUCTS = {"mm": (0, 1), "bmm": (0, 1), "addmm": (1, 2), "baddbmm": (1, 2), "convolution": (0, 1)}


def recipe(**classes):
    """fp8-hybrid's recipe with every class and operand in FP32 but ``classes``, no fp8
    scaling and no loss scaling."""
    base = dict(Simulate(torch.nn.Linear(1, 1), "fp8-hybrid").recipe)
    operands = {k: classes.pop(k, "fp32") for k in ("input", "weight", "grad_output")}
    return dict(base, name="test", fp8_scaling=None, gemm_operands=operands, **classes)


class AtenProducts(TorchDispatchMode):
    """Records the parameters (by storage) whose values enter an aten product."""

    def __init__(self, model):
        super().__init__()
        self.storages = {}
        for name, p in model.named_parameters():
            self.storages.setdefault(p.untyped_storage().data_ptr(), name)
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for i in _ATEN_PRODUCTS.get(func.overloadpacket.__name__, ()):
            a = args[i]
            if isinstance(a, torch.Tensor):
                if True:
                    name = self.storages.get(a.untyped_storage().data_ptr())
                    if name is not None:
                        self.seen.add(name)
        return func(*args, **(kwargs or {}))


def product_weights(z, model, batch):
    """The parameters whose values PyTorch multiplies in a forward and backward pass of the
    bare model (aten's view: whatever module or function formed the product)."""
    mode = AtenProducts(model)
    with mode:
        z.loss(model, batch).backward()
    model.zero_grad()
    return mode.seen


@pytest.mark.parametrize("recipe_name", RECIPES)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("device", DEVICES)
def test_simulate_trains_every_zoo_model_casting_every_product(device, name, recipe_name):
    """Three steps of AdamW under the recipe: finite losses, the FP32 master weights moved,
    and, for recipes that cast operands, every weight that aten multiplies cast (coverage
    100%, no warning), each step's ``gemm_weight`` count the cast weights' reads."""
    z = ZOO[name]
    model = z.model().to(device)
    batches = [z.to(b, device) for b in z.batches(3)]
    products = product_weights(z, model, batches[0])
    before = copy.deepcopy(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Simulate")  # an uncast weight fails the test
        with Simulate(model, recipe_name, optimizer=opt) as sim:
            losses = []
            for b in batches:
                opt.zero_grad()
                loss = z.loss(model, b)
                sim.backward(loss)
                sim.step()
                losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    moved = [k for k, v in model.state_dict().items() if v.is_floating_point() and not torch.equal(v, before[k])]
    assert moved
    cov = sim.coverage
    if recipe_name in ("fp8-hybrid", "mxfp8", "nvfp4"):
        assert set(cov["cast"]) == products and cov["uncast"] == []
        sizes = {n: p.numel() for n, p in model.named_parameters()}
        assert cov["cast_weights"] == cov["product_weights"] == sum(sizes[n] for n in products)
        assert sim.last["counts"]["gemm_weight"]["stored"] >= cov["cast_weights"]
    else:
        assert cov is None and "gemm_weight" not in sim.last["counts"]


class StraightThrough(torch.autograd.Function):
    """bf16 rounding by PyTorch's own cast in the forward, the gradient passed unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        return g


def round_outputs(model):
    """Hooks that store every leaf module's floating output (and the network's floating
    inputs) in bf16, rounded by PyTorch."""
    def out(module, inputs, output):
        if isinstance(output, torch.Tensor) and output.is_floating_point():
            return StraightThrough.apply(output)
        return output

    for m in model.modules():
        if not any(True for _ in m.children()):
            m.register_forward_hook(out)
    model.register_forward_pre_hook(
        lambda m, args: tuple(
            StraightThrough.apply(a) if isinstance(a, torch.Tensor) and a.is_floating_point() else a
            for a in args
        )
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("device", DEVICES)
def test_stored_activations_are_pytorchs_bf16_with_in_place_ops_views_and_ties(device, name):
    """Activations stored in bf16 (nothing else): the loss and every weight gradient are
    those of the same model with PyTorch's own bf16 cast on every leaf module's output: the
    stores keep in-place operations (ResNet's ReLUs, ``out += identity``), views, tied weights
    (GPT-2's head) and buffers (batch norm's running statistics) as the model meant them."""
    z = ZOO[name]
    model = z.model().to(device)
    ref = copy.deepcopy(model)
    round_outputs(ref)
    batch = z.to(z.batches(1)[0], device)
    want = z.loss(ref, batch)
    want.backward()
    with Simulate(model, recipe(activations="bf16")) as sim:
        got = z.loss(model, batch)
        sim.backward(got)
    assert float(got.detach()) == float(want.detach())
    grads = dict(ref.named_parameters())
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n].grad, rtol=1e-6, atol=1e-9, msg=n)
    for (n, b), (_, rb) in zip(model.named_buffers(), ref.named_buffers()):
        assert torch.equal(b, rb), n


class MatmulModule(torch.nn.Module):
    """``x @ Wᵀ``, and the same weight used twice (a module called twice)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(12, 12) * 0.3)

    def forward(self, x):
        return torch.tanh(x @ self.w.t()) @ self.w.t()


def _ops():
    torch.manual_seed(0)
    return {
        "linear": (torch.nn.Linear(24, 16), (5, 24)),
        "conv1d": (torch.nn.Conv1d(6, 8, 3, stride=2, padding=1), (3, 6, 11)),
        "conv2d-same-dilated": (torch.nn.Conv2d(6, 8, 3, padding="same", dilation=2), (2, 6, 9, 7)),
        "conv2d-groups": (torch.nn.Conv2d(6, 8, 3, stride=2, groups=2, bias=False), (2, 6, 9, 9)),
        "conv2d-unbatched": (torch.nn.Conv2d(3, 4, 2), (3, 5, 5)),
        "conv3d": (torch.nn.Conv3d(4, 6, (3, 1, 2), padding=(1, 0, 1)), (2, 4, 5, 3, 4)),
        "hf-conv1d": (Conv1D(16, 24), (2, 5, 24)),
        "matmul-twice": (MatmulModule(), (4, 12)),
    }


OPS = list(_ops())


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


@pytest.mark.parametrize("op", OPS)
def test_each_product_is_pytorchs_on_the_cast_operands(op):
    """Operands cast to bf16 per tensor: the output and the input's and weights' gradients
    are PyTorch's own operation on PyTorch's bf16 casts of the input and weights and of the
    output's gradient (up to the order of FP32 sums: a convolution is formed as the product of
    its patches)."""
    module, shape = _ops()[op]
    ref = copy.deepcopy(module)
    x = torch.randn(*shape)
    dy_seed = 7
    with Simulate(module, recipe(input="bf16", weight="bf16", grad_output="bf16")) as sim:
        xs = x.clone().requires_grad_()
        y = module(xs)
        dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(dy_seed))
        y.backward(dy)
        cov = sim.coverage
    assert cov["uncast"] == [] and set(cov["cast"]) == {n for n, p in module.named_parameters() if p.dim() >= 2}
    with torch.no_grad():
        for p in ref.parameters():
            if p.dim() >= 2:
                p.copy_(bf16(p))
    xr = bf16(x).requires_grad_()
    if op == "matmul-twice":  # the second product's input is the first's output, cast
        h = torch.tanh(xr @ ref.w.t())
        yr = bf16(h) @ ref.w.t()
        # The backward products take the output gradient cast; here its path is long: check
        # the forward only, and the gradients' agreement loosely.
        torch.testing.assert_close(y, yr, rtol=1e-5, atol=1e-6)
        return
    yr = ref(xr)
    torch.testing.assert_close(y, yr, rtol=1e-5, atol=1e-6)
    # The backward products take the output gradient cast; the bias gradient sums it uncast.
    params = [p for p in ref.parameters() if p.dim() >= 2]
    want = torch.autograd.grad(yr, [xr, *params], bf16(dy), retain_graph=True)
    got = [xs.grad, *(p.grad for p in module.parameters() if p.dim() >= 2)]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    biases = [p for p in ref.parameters() if p.dim() < 2]
    if biases:
        (want,) = torch.autograd.grad(yr, biases, dy)
        torch.testing.assert_close(module.bias.grad, want, rtol=1e-5, atol=1e-5)


def test_multihead_attentions_projections_are_cast():
    """nn.MultiheadAttention forms its projections by F.linear on bare parameters: weights
    cast to bf16 give the attention of the bf16 weights, PyTorch's own."""
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True)
    ref = copy.deepcopy(mha)
    with torch.no_grad():
        ref.in_proj_weight.copy_(bf16(ref.in_proj_weight))
        ref.out_proj.weight.copy_(bf16(ref.out_proj.weight))
    x = torch.randn(2, 5, 16, requires_grad=True)
    with Simulate(mha, recipe(weight="bf16")) as sim:
        y, _ = mha(x, x, x, need_weights=False)
    yr, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(y, yr, rtol=1e-6, atol=1e-7)
    assert sim.coverage["cast"] == ["in_proj_weight", "out_proj.weight"]
    assert not torch.equal(y, mha(x, x, x, need_weights=False)[0])  # the cast changed it


def blocks(t, fmt="mxfp8-e4m3"):
    """``t`` (2-D) rounded per block along its last axis by mixprec."""
    return quantize(t.detach().contiguous(), fmt)


def test_a_convolution_in_mxfp8_is_the_product_of_its_patches_cast_per_block():
    """MXFP8 blocks run along the axis each product sums: the forward product over each
    patch's C_in x kernel values (torch's own F.unfold forms the patches), the weight
    gradient's over the batch and positions."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(8, 6, 3, stride=2, padding=1, dilation=1)
    x = torch.randn(2, 8, 9, 9)
    with Simulate(conv, "mxfp8"):
        y = conv(x)
        dy = torch.randn(y.shape)
        y.backward(dy)
    n, o, h, w = y.shape
    cols = F.unfold(x, 3, padding=1, stride=2).transpose(1, 2).reshape(n * h * w, -1)
    rows = conv.weight.detach().reshape(o, -1)
    want = (blocks(cols) @ blocks(rows).t()).reshape(n, h * w, o).transpose(1, 2).reshape(y.shape)
    want = want + conv.bias.detach().reshape(1, -1, 1, 1)
    torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)
    dy2 = dy.permute(0, 2, 3, 1).reshape(-1, o)
    dw = blocks(dy2.t(), "mxfp8-e5m2") @ blocks(cols.t()).t()
    torch.testing.assert_close(conv.weight.grad, dw.reshape(conv.weight.shape), rtol=1e-6, atol=1e-6)


class Einsum(torch.nn.Module):
    """A product Simulate does not cast (an einsum of a weight), and one it does."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(torch.einsum("bi,oi->bo", x, self.w))


def test_frozen_parameters_stay_put_and_a_uncast_weight_is_named():
    """BERT with its embeddings frozen trains under MXFP8, the frozen weights unchanged and
    without gradients; a weight whose product Simulate cannot cast (an einsum) is named in a
    warning and counted as uncast."""
    z = ZOO["bert"]
    model = z.model()
    for p in model.bert.embeddings.parameters():
        p.requires_grad_(False)
    frozen = {n: p.clone() for n, p in model.bert.embeddings.named_parameters()}
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    with Simulate(model, "mxfp8", optimizer=opt) as sim:
        for b in z.batches(2):
            opt.zero_grad()
            sim.backward(z.loss(model, b))
            sim.step()
    for n, p in model.bert.embeddings.named_parameters():
        assert torch.equal(p, frozen[n]) and p.grad is None

    m = Einsum()
    with pytest.warns(UserWarning, match=r"uncast, in FP32: w \(einsum\)"):
        with Simulate(m, "mxfp8") as sim:
            m(torch.randn(2, 4))
    assert sim.coverage["uncast"] == ["w"] and sim.coverage["cast"] == ["lin.weight"]
    assert sim.coverage["product_weights"] == 32 and sim.coverage["cast_weights"] == 16


def test_torch_compile_is_refused_in_one_line():
    """A compiled model, given or compiled later (torch.compile(model) or model.compile()), is
    refused with one line naming what Simulate cannot see."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="compiled by torch.compile"):
        Simulate(torch.compile(model), "fp16-master")
    for compile_it in (lambda m: torch.compile(m), lambda m: (m.compile(), m)[1]):
        m = torch.nn.Sequential(torch.nn.Linear(4, 4))
        with Simulate(m, "fp16-master"):
            with pytest.raises(RuntimeError, match="compiled by torch.compile") as e:
                compile_it(m)(torch.randn(2, 4))
        assert "\n" not in str(e.value)


def test_the_run_records_the_coverage_and_its_report_names_the_uncast_weights(tmp_path, cli):
    """A recorded Simulate writes its coverage into summary.json; the report's findings name
    the weights whose products ran in FP32."""
    torch.manual_seed(0)
    m = Einsum()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    sim = Simulate(m, "mxfp8", optimizer=opt)
    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="uncast"):
        with sim, Recorder(m, run, every=1, simulate=sim) as rec:
            for _ in range(3):
                opt.zero_grad()
                loss = m(torch.randn(8, 4)).pow(2).mean()
                sim.backward(loss)
                sim.step()
                rec.step(loss)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["coverage"] == sim.coverage
    assert summary["coverage"]["uncast"] == ["w"]
    page = tmp_path / "page"
    r = cli("report", str(run), "--out", str(page))
    assert r.returncode == 0, r.stderr
    html = (page / "index.html").read_text()
    assert "the products of w ran uncast, in FP32" in html
    assert "50.0% of the scalars of the weights that formed products were cast (16 of 32)" in html


def test_pytorchs_optimizer_state_maps_onto_the_librarys_parts():
    """Adam's and SGD's state, as PyTorch names it, is captured under the library's part names."""
    from mixprec import _names
    from mixprec._simulate import _PARTS

    parts = {p["name"] for p in _names()["optimizer_parts"]}
    assert set(_PARTS.values()) <= parts
    for opt in (torch.optim.Adam, lambda ps, lr: torch.optim.SGD(ps, lr=lr, momentum=0.9)):
        p = torch.nn.Parameter(torch.ones(2))
        o = opt([p], lr=0.1)
        p.grad = torch.ones(2)
        o.step()
        assert {k for k, v in o.state[p].items() if v.dim() > 0} <= set(_PARTS)
