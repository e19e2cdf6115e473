"""analyze's advice from one gradient dump, checked by closed-loop reruns on the zoo.

The README's recipe: one step in FP32 from the initial weights, its weight gradients dumped and
given to ``mixprec.analyze``. The advised ``init_scale`` is then used, as a user would, for a
run of the zoo model in fp16 (CPU autocast, torch's GradScaler, AdamW): it must skip no step in
the first 100. One step's weight gradients bound the scale from above only: over 300 steps of
GPT-2, BERT and ViT (3 seeds, learning rates 3e-4 to 3e-3) the run's largest backward gradient
lay up to 2.5 binades above the dump's (``reports/perf``-style figures in the README's analyze
section), so the window's top itself skips steps in a rerun (GPT-2 at 2^19 here); the test
checks that too, so that a margin shrunk below what the runs need fails.

ResNet-18's fp16 convolutions take seconds a step on the CPU; it reruns where CUDA is
(``scripts/gpu-check``; not yet run: no session has had a GPU since).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")
pytest.importorskip("transformers", reason="the zoo needs transformers")
pytest.importorskip("torchvision", reason="the zoo needs torchvision")

import mixprec  # noqa: E402
from zoo import ZOO  # noqa: E402

#: The models and devices: ResNet-18's fp16 convolutions take seconds a step on the CPU, so it
#: reruns on CUDA only (scripts/gpu-check runs the ids naming cuda).
CASES = [("gpt2", "cpu"), ("bert", "cpu"), ("vit", "cpu"),
         pytest.param("resnet", "cuda", marks=pytest.mark.skipif(
             not torch.cuda.is_available(), reason="no CUDA device"))]

STEPS = 100


def dump_advice(zoo, seed):
    """analyze's advice on the FP32 weight gradients of the first step from seed's weights."""
    model = zoo.model(seed)
    zoo.loss(model, zoo.batches(1, seed=seed + 1)[0]).backward()
    grads = {n: p.grad.detach().float().contiguous().numpy()
             for n, p in model.named_parameters() if p.grad is not None}
    return mixprec.analyze(grads, format="fp16")


def skips(zoo, seed, init_scale, device="cpu"):
    """The steps a closed-loop fp16 run with ``GradScaler(init_scale)`` skips (the scaler
    backed off) in its first ``STEPS`` steps."""
    model = zoo.model(seed).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale)
    skipped = []
    for step, batch in enumerate(zoo.batches(STEPS, seed=seed + 1), start=1):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.float16):
            loss = zoo.loss(model, zoo.to(batch, device))
        scaler.scale(loss).backward()
        scaler.step(opt)
        before = scaler.get_scale()
        scaler.update()
        if scaler.get_scale() < before:
            skipped.append(step)
    return skipped


@pytest.mark.parametrize("name,device", CASES)
def test_the_advised_init_scale_skips_no_step_in_a_rerun(name, device):
    zoo = ZOO[name]
    advice = dump_advice(zoo, seed=0)
    scaler = advice["recommendation"]["grad_scaler"]
    top = advice["recommendation"]["log2_scale"]
    assert scaler["log2_init_scale"] < top  # below the dump's own bound
    assert skips(zoo, 0, scaler["init_scale"], device) == []


def test_the_dumps_own_bound_skips_steps_in_a_rerun():
    """The window's top, which the advice stays below: GPT-2's run outgrows it."""
    zoo = ZOO["gpt2"]
    top = dump_advice(zoo, seed=0)["recommendation"]["log2_scale"]
    assert skips(zoo, 0, 2.0**top) != []
