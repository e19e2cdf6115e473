"""mixprec.torch.Recorder(ranks="merge") under DDP and FSDP2 (``fully_shard``): two CPU processes
(gloo) train a small MLP, and rank 0's merged run is compared with the run of the same model
trained in one process on the whole batch (both ranks' halves), whose loss is the mean over it.

Exact by construction, so that the comparison can be equality: weights and inputs are small
multiples of 1/8 and integers, the batch sizes powers of two, the loss a mean squared error
(its gradient 2 (y - t) / n), and after each SGD step the weights are put back on the 1/8 grid
(``snap``, the same elementwise rounding on a shard as on the whole). Every value the forward
and backward passes form, every gradient sum whatever the order of its terms (the batch's
halves summed apart, then averaged by DDP's all-reduce or FSDP's reduce-scatter, or the whole
batch at once) and every momentum is then exactly representable in FP32, and every sum of
their magnitudes and squares in f64: the histograms' floating-point sums compare equal too.
Checked, at every capture step:

- weights, weight gradients and the optimizer's momentum: the merged sites equal the one-process
  run's (histogram, sums, rounding counts into fp8-e4m3, which underflows some gradients);
- activations: the merged sites (the union of the ranks' batches) equal the one-process run's;
- activation gradients: each rank's backward pass is of its own mean loss over half the batch,
  so its activation gradients are twice the one-process run's: the merged histograms equal the
  one-process run's one octave up (exact), and their rounding counts (which the octave changes)
  equal the sum of the two ranks' own runs (ranks="each", the same loop);
- the steps: the loss (the mean of the ranks'), grad_amax (the largest gradient: the loop is
  FP32), overflow and skipped equal the one-process run's, and so do the per-class counts but
  for the activation gradients.

The same loop with ranks="each" writes rank0 and rank1. And Simulate refuses the FSDP2-sharded
model (its parameters are DTensors without values of their own) in one line.
"""

import json
import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from mixprec.torch import Recorder, Simulate  # noqa: E402

WORLD = 2
#: Per rank; the one-process run trains on WORLD * BATCH rows.
BATCH = 4
#: Odd widths: FSDP shards the first layer's 5 rows 3 + 2, its bias 3 + 2.
IN, HIDDEN, OUT = 8, 5, 4
#: Captures at steps 1, 2 and 4; step 3 is not a capture step.
STEPS, EVERY = 4, 2
LR, MOMENTUM = 2.0**-3, 0.5
FORMAT = "fp8-e4m3"


def make_model():
    g = torch.Generator().manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUT))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-4, 5, p.shape, generator=g) / 8)
    return model


def batch(step, rank):
    """The step's whole batch, or rank ``rank``'s half of it (as a DistributedSampler gives)."""
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randint(-1, 2, (WORLD * BATCH, IN), generator=g).float()
    t = torch.randint(-2, 3, (WORLD * BATCH, OUT), generator=g).float()
    if rank is None:
        return x, t
    rows = slice(rank * BATCH, (rank + 1) * BATCH)
    return x[rows], t[rows]


def train(model, params, out, ranks, rank):
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    with Recorder(model, out=out, format=FORMAT, every=EVERY, optimizer=opt, ranks=ranks) as rec:
        for step in range(STEPS):
            x, t = batch(step, rank)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), t)
            loss.backward()
            opt.step()
            with torch.no_grad():
                for p in params:  # elementwise: a DTensor's shard rounds as the whole does
                    p.copy_(torch.round(p * 8) / 8)
            rec.step(loss)


def _worker(rank, init, out):
    """One rank: DDP with ranks="merge", FSDP2 with "merge", DDP with "each"."""
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    warnings.simplefilter("ignore")  # an FP32 loop judged in fp8: the recorder says so
    try:
        model = make_model()
        train(torch.nn.parallel.DistributedDataParallel(model), list(model.parameters()),
              os.path.join(out, "ddp"), "merge", rank)
        model = make_model()
        fully_shard(model)
        train(model, list(model.parameters()), os.path.join(out, "fsdp"), "merge", rank)
        # Simulate refuses FSDP2's shards (DTensors, whose data_ptr is 0: rounding one through
        # it crashed the process), in one line naming the parameter.
        try:
            Simulate(model, "fp16-master")
            refusal = "none"
        except TypeError as e:
            refusal = str(e)
        if rank == 0:
            with open(os.path.join(out, "simulate-refusal.txt"), "w") as f:
                f.write(refusal)
        model = make_model()
        train(torch.nn.parallel.DistributedDataParallel(model), list(model.parameters()),
              os.path.join(out, "each"), "each", rank)
    finally:
        dist.destroy_process_group()
    # As test_torch.py's DDP worker: leave without the C++ runtime's exit handlers, which can
    # abort a rank after every file is written.
    os._exit(0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    init = f"file://{out / 'store'}"
    torch.multiprocessing.spawn(_worker, args=(init, str(out)), nprocs=WORLD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_model()
        train(model, list(model.parameters()), out / "one", "zero", None)
    return out


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def captures(run):
    """Per capture step, its sites by (layer, tensor, part)."""
    return {
        c["step"]: {(s["layer"], s["tensor"], s.get("part")): s for s in c["sites"]}
        for c in read_jsonl(run / "captures.jsonl")
    }


def octave_up(h):
    """The capture histogram of the values of ``h`` doubled: every bin one octave up (2^s
    sub-bins per octave), the magnitudes twice, the squares four times (exact in f64)."""
    up = dict(h)
    if h["bins"]:
        up["first_bin"] = h["first_bin"] + (1 << h["sub_bins_log2"])
    up["amax"] = 2 * h["amax"]
    up["min_nonzero"] = None if h["min_nonzero"] is None else 2 * h["min_nonzero"]
    up["sum_abs"], up["sum_sq"] = 2 * h["sum_abs"], 4 * h["sum_sq"]
    return up


def added(a, b):
    return {k: a[k] + b[k] for k in a}


@pytest.mark.parametrize("engine", ["ddp", "fsdp"])
def test_the_merged_run_equals_the_one_process_run(runs, engine):
    merged, one = captures(runs / engine), captures(runs / "one")
    each = [captures(runs / "each" / f"rank{r}") for r in range(WORLD)]
    assert sorted(merged) == sorted(one) == [1, 2, 4]
    for step in one:
        assert sorted(merged[step]) == sorted(one[step]), step
        classes = {key[1] for key in one[step]}
        assert classes == {"weight", "weight_grad", "optimizer_state", "activation",
                           "activation_grad"}, classes
        for key, want in one[step].items():
            got = merged[step][key]
            if key[1] != "activation_grad":
                assert got == want, (step, key)
                continue
            assert got["values"] == octave_up(want["values"]), (step, key)
            assert got["rounding"] == added(*(e[step][key]["rounding"] for e in each)), (step, key)
    # Gradients fall below fp8-e4m3's normal range: the rounding counts compared are not zeros.
    assert all(any(s["rounding"]["subnormal"] for s in merged[step].values()) for step in merged)

    steps, ref = read_jsonl(runs / engine / "metrics.jsonl"), read_jsonl(runs / "one" / "metrics.jsonl")
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    for got, want in zip(steps, ref):
        for key in ("loss", "grad_amax", "overflow", "skipped", "grad_amax_bounded", "loss_scale"):
            assert got.get(key) == want.get(key), (got["step"], key)
        assert {k: v for k, v in got["counts"].items() if k != "activation_grad"} == {
            k: v for k, v in want["counts"].items() if k != "activation_grad"}, got["step"]
    # The ranks' losses differ (their own halves): the mean, not rank 0's, matches.
    own = [read_jsonl(runs / "each" / f"rank{r}" / "metrics.jsonl") for r in range(WORLD)]
    assert own[0][0]["loss"] != own[1][0]["loss"]

    config = json.loads((runs / engine / "config.json").read_text())
    assert (config["ranks"], config["rank"], config["world_size"]) == ("merge", 0, WORLD)
    summary = json.loads((runs / engine / "summary.json").read_text())
    want = json.loads((runs / "one" / "summary.json").read_text())
    assert summary["steps"] == STEPS and not (runs / engine / "INCOMPLETE").exists()
    assert summary["parameters"] == want["parameters"] == 5 * 8 + 5 + 4 * 5 + 4
    assert not any(p.name.startswith("rank") for p in (runs / engine).iterdir())


def test_each_rank_writes_its_own_run(runs, cli):
    """ranks="each" is unchanged: rank{r} directories, each a finished run of its own loss."""
    each = runs / "each"
    assert sorted(p.name for p in each.iterdir()) == ["rank0", "rank1"]
    for r in range(WORLD):
        config = json.loads((each / f"rank{r}" / "config.json").read_text())
        assert (config["rank"], config["world_size"]) == (r, WORLD) and "ranks" not in config
        assert (each / f"rank{r}" / "summary.json").exists()
    result = cli("report", str(runs / "fsdp"), "--out", str(runs / "page"))
    assert result.returncode == 0, result.stderr


def test_simulate_refuses_fsdp2_shards(runs):
    refusal = (runs / "simulate-refusal.txt").read_text()
    assert refusal.startswith("model: parameter '0.weight' is a DTensor without values of its own")
    assert "simulate the model before sharding it" in refusal
