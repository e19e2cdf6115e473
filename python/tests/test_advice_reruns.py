"""analyze's advice from one gradient dump, checked by closed-loop reruns on the zoo.

The book's recipe (docs/src/analyze.md): one step in FP32 from the initial weights, its weight
gradients dumped and given to ``mixprec.analyze``. The advised ``init_scale`` is then used, as a user would, for a
run of the zoo model in fp16 (CPU autocast, torch's GradScaler, AdamW): it must skip no step in
the first 100. One step's weight gradients bound the scale from above only: over 300 steps of
GPT-2, BERT and ViT (3 seeds, learning rates 3e-4 to 3e-3) the run's largest backward gradient
lay up to 2.5 binades above the dump's (``benches/dump_margin.py``), so the window's top itself
skips steps in a rerun (GPT-2 at 2^19 here): the test checks that too. A margin of 2 would still
pass here (from 2 binades below the top no rerun skipped); a margin of 0 fails.

ResNet-18's fp16 convolutions take seconds a step on the CPU; it reruns where CUDA is
(``scripts/gpu-check``; not yet run: no session has had a GPU since).
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")
pytest.importorskip("transformers", reason="the zoo needs transformers")
pytest.importorskip("torchvision", reason="the zoo needs torchvision")

import json  # noqa: E402
import os  # noqa: E402

import mixprec  # noqa: E402
from mixprec.torch import Recorder  # noqa: E402
from zoo import ZOO  # noqa: E402

#: The models and devices: ResNet-18's fp16 convolutions take 3 s a step on the CPU (bf16 and
#: FP32 0.2 s: PyTorch has no fast fp16 convolution there), so its CPU rerun, about 5 minutes,
#: runs only when MIXPREC_SLOW_TESTS=1 (CI's budget has no room for it); on CUDA it runs in
#: scripts/gpu-check (the ids naming cuda).
CASES = [("gpt2", "cpu"), ("bert", "cpu"), ("vit", "cpu"),
         pytest.param("resnet", "cpu", marks=pytest.mark.skipif(
             os.environ.get("MIXPREC_SLOW_TESTS") != "1",
             reason="5 minutes of fp16 convolutions on the CPU: MIXPREC_SLOW_TESTS=1 runs it")),
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


REPLAY_STEPS = 40


def zoo_loop(zoo, scale, out=None):
    """``REPLAY_STEPS`` steps of the zoo model (seed 0, AdamW, fp16 autocast) at a static loss
    scale, skipping a step whose weight gradients hold an inf or NaN (GradScaler's own check);
    recorded into ``out`` when given. Returns the skipped steps."""
    model = ZOO[zoo].model(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rec = None if out is None else Recorder(model, out, "fp16", every=10, optimizer=opt)
    skipped = []
    for step, batch in enumerate(ZOO[zoo].batches(REPLAY_STEPS, seed=1), start=1):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = ZOO[zoo].loss(model, batch)
        (loss * scale).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        found = torch.zeros(())
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.full((), 1 / scale))
        if rec is not None:
            rec.step(loss)  # unscaled by hand: the recorder divides by no scaler's scale
        if bool(found > 0):
            skipped.append(step)
        else:
            opt.step()
    if rec is not None:
        rec.close()
    return skipped


@pytest.mark.parametrize("name", ["gpt2", "bert", "vit"])
def test_replays_skips_and_the_reports_top_agree_with_reruns(name, tmp_path, cli):
    """Recorded at 2^0 (no step overflows), a zoo model's run is replayed (open loop) at static
    scales around the report's window top, and each is rerun closed loop: up to its first
    skipped step a rerun trains the recorded trajectory, so replay's first skipped step must be
    the rerun's (after it the rerun, its update skipped, trains elsewhere); at the report's
    top neither skips."""
    run = tmp_path / "run"
    assert zoo_loop(name, 1.0, out=run) == []
    page = tmp_path / "page"
    done = cli("report", str(run), "--out", str(page))
    assert done.returncode == 0, done.stderr
    entry = json.loads((page / "report.json").read_text())["runs"][0]
    top = entry["window_top"][0]
    policies = [f"static:2^{k}" for k in (top, top + 1, top + 2)]
    done = cli("replay", str(run), "--policy", *policies, "--json")
    assert done.returncode == 0, done.stderr
    replayed = {p["policy"]: p for p in json.loads(done.stdout)["policies"]}
    for k, policy in zip((top, top + 1, top + 2), policies):
        assert replayed[policy]["undecided"]["steps"] == [], policy
        rerun = zoo_loop(name, 2.0**k)
        assert replayed[policy]["skipped"]["steps"][:1] == rerun[:1], (policy, rerun)
        assert (rerun == []) == (k == top), (policy, rerun)


def test_an_unscaled_fp16_run_that_trains_worse_is_said_to_have_failed(tmp_path, cli):
    """GPT-2 trained three times for 300 steps, the loss divided by 2^14 (a large effective
    batch): in FP32, in fp16 with a GradScaler, and in fp16 without loss scaling, whose
    gradients underflow. The runs are the closed-loop truth: the unscaled one ends far above
    the others (on random tokens FP32 learns the uniform predictor, ln 256), and the report of
    the three, which has no eval metric to go by, says that one, and only it, failed to train."""
    zoo = ZOO["gpt2"]
    ends = {}
    for kind in ("fp32", "scaled", "unscaled"):
        model = zoo.model(0)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = torch.amp.GradScaler("cpu") if kind == "scaled" else None
        fmt = "fp32" if kind == "fp32" else "fp16"
        losses = []
        with Recorder(model, tmp_path / kind, fmt, every=100, optimizer=opt, scaler=scaler,
                      name=kind) as rec:
            for batch in zoo.batches(300, seed=1):
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cpu", dtype=torch.float16, enabled=kind != "fp32"):
                    loss = zoo.loss(model, batch) / 2**14
                losses.append(float(loss.detach()) * 2**14)
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.step(opt)
                    rec.step(loss)
                    scaler.update()
                else:
                    loss.backward()
                    opt.step()
                    rec.step(loss)
        ends[kind] = sum(losses[-30:]) / 30
    assert ends["unscaled"] > 1.2 * ends["fp32"] and ends["scaled"] < 1.05 * ends["fp32"], ends
    page = tmp_path / "page"
    done = cli("report", *(str(tmp_path / k) for k in ("fp32", "scaled", "unscaled")),
               "--out", str(page))
    assert done.returncode == 0, done.stderr
    failed = [line for line in done.stdout.splitlines() if "failed to train" in line]
    assert len(failed) == 1 and failed[0].startswith("- unscaled failed to train"), done.stdout
