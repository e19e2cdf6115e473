"""The Recorder inside the trainers people use: ``mixprec.torch.HFCallback`` in the Hugging Face
``Trainer`` and ``mixprec.torch.LightningCallback`` in Lightning's, on the zoo's GPT-2, on the
CPU.

The truth each run is checked against: the loss the framework itself reports, the scale and
skips of the framework's own GradScaler (read by a callback of the test's), and the
``grad_amax`` a plain loop records for the same first batch from the same weights. The
frameworks' ways that broke the bare Recorder are each exercised: accelerate's wrapped optimizer
and FP32-cast outputs, ``on_step_end`` after ``zero_grad``, Lightning's ``scaler.step`` and
``scaler.update`` back to back, a ``training_step`` that calls a submodule rather than the
module, and ``16-mixed`` on the CPU running in bfloat16.
"""

import json
import os
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")
pytest.importorskip("transformers", reason="the HF callback needs transformers")

from mixprec.torch import Recorder  # noqa: E402
from conftest import ROOT  # noqa: E402
from zoo import ZOO  # noqa: E402

GPT2 = ZOO["gpt2"]
STEPS = 6


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def ours(caught):
    """The warnings mixprec gave."""
    return [str(w.message) for w in caught
            if str(w.message).startswith(("Recorder", "HFCallback", "LightningCallback"))]


def plain_step_amax(tmp_path, dtype, forward):
    """``grad_amax`` of one step recorded from a plain loop: the zoo's GPT-2 with seed 0's
    weights, ``forward(model)`` its loss under CPU autocast in ``dtype``."""
    model = GPT2.model(0)
    with Recorder(model, tmp_path / "plain", {torch.bfloat16: "bf16"}[dtype], every=0) as rec:
        with torch.autocast("cpu", dtype=dtype):
            loss = forward(model)
        loss.backward()
        rec.step(loss)
    return read_jsonl(tmp_path / "plain" / "metrics.jsonl")[0]["grad_amax"]


# -- Hugging Face ---------------------------------------------------------------------------


class Rows(torch.utils.data.Dataset):
    """The zoo's GPT-2 batches as rows of token ids, labels the ids (the model shifts them)."""

    def __init__(self, n):
        self.rows = [x for x, _ in GPT2.batches(n) for x in x]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def hf_train(tmp_path, every=3, **precision):
    from transformers import Trainer, TrainingArguments

    from mixprec.torch import HFCallback

    model = GPT2.model(0)
    first = []
    hook = model.register_forward_pre_hook(
        lambda m, args, kwargs: first.append(dict(kwargs)) if not first else None,
        with_kwargs=True,
    )
    args = TrainingArguments(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=4, max_steps=STEPS,
        use_cpu=True, report_to=[], logging_steps=1, save_strategy="no", learning_rate=1e-3,
        disable_tqdm=True, seed=0, **precision,
    )
    trainer = Trainer(model=model, args=args, train_dataset=Rows(STEPS),
                      callbacks=[HFCallback(tmp_path / "run", every=every)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    hook.remove()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, first[0], caught


def test_hf_trainer_in_bf16_records_its_steps(tmp_path, cli):
    """bf16 on the CPU (accelerate's autocast inside a wrapped forward, outputs cast back to
    FP32, its optimizer wrapped, the gradients zeroed before on_step_end): a step per optimizer
    step, the Trainer's own losses, grad_amax at every step (the first equal to a plain loop's
    on the Trainer's first batch), captures, no warning; the report renders."""
    losses, first, caught = hf_train(tmp_path, bf16=True)
    run = tmp_path / "run"
    steps = read_jsonl(run / "metrics.jsonl")
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert [s["loss"] for s in steps] == pytest.approx(losses, rel=1e-6)
    assert all(s["grad_amax"] is not None and s["grad_amax"] > 0 for s in steps)
    assert steps[0]["grad_amax"] == plain_step_amax(
        tmp_path, torch.bfloat16, lambda model: model(**first).loss)
    config = json.loads((run / "config.json").read_text())
    assert (config["format"], config["optimizer"]) == ("bf16", "AdamW")
    assert [json.loads(c)["step"] for c in (run / "captures.jsonl").read_text().splitlines()] \
        == [1, 3, 6]
    assert ours(caught) == []
    assert not (run / "INCOMPLETE").exists()
    r = cli("report", str(run), "--out", str(tmp_path / "page"))
    assert r.returncode == 0, r.stderr


def test_hf_trainer_in_fp16_on_the_cpu_is_said_to_train_in_fp32(tmp_path):
    """accelerate autocasts on the CPU in bfloat16 only: ``fp16=True`` there trains in FP32,
    which the recorder says rather than record FP32 as fp16."""
    _, _, caught = hf_train(tmp_path, every=0, fp16=True)
    said = ours(caught)
    assert len(said) == 1 and "no tensor narrower than FP32" in said[0], said
    assert json.loads((tmp_path / "run" / "config.json").read_text())["format"] == "fp16"


# -- Lightning ------------------------------------------------------------------------------


def lightning_train(tmp_path, *, through_self, **precision):
    L = pytest.importorskip("lightning.pytorch", reason="the Lightning callback needs lightning")

    from mixprec.torch import LightningCallback

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = GPT2.model(0)
            self.losses = []

        def forward(self, batch):
            return GPT2.loss(self.net, batch)

        def training_step(self, batch, i):
            # Through the module's own forward, or straight to the submodule, as people write.
            loss = self(batch) if through_self else GPT2.loss(self.net, batch)
            self.losses.append(float(loss.detach()))
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class Scales(L.Callback):
        """The scale each step's backward uses, from the framework's own scaler."""

        def __init__(self):
            self.scales = []

        def on_train_batch_start(self, trainer, module, batch, i):
            scaler = getattr(trainer.precision_plugin, "scaler", None)
            self.scales.append(None if scaler is None else scaler.get_scale())

    module, scales = Module(), Scales()
    batches = GPT2.batches(STEPS)
    trainer = L.Trainer(
        accelerator="cpu", max_steps=STEPS, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
        callbacks=[LightningCallback(tmp_path / "run", every=3), scales], **precision,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, torch.utils.data.DataLoader(batches, batch_size=None))
    return module.losses, scales.scales, batches[0], caught


@pytest.mark.parametrize("through_self", [True, False], ids=["self", "submodule"])
def test_lightning_16_mixed_on_the_cpu_is_recorded_as_the_bf16_it_runs(tmp_path, through_self):
    """Lightning turns ``16-mixed`` on the CPU into ``bf16-mixed``: the run is bf16, raises
    no warning of mixprec's, has training_step's losses and grad_amax at every step (the first
    equal to a plain loop's), whether training_step calls the module or its submodule."""
    losses, _, first, caught = lightning_train(tmp_path, through_self=through_self,
                                               precision="16-mixed")
    run = tmp_path / "run"
    steps = read_jsonl(run / "metrics.jsonl")
    assert json.loads((run / "config.json").read_text())["format"] == "bf16"
    assert [s["loss"] for s in steps] == pytest.approx(losses, rel=1e-6)
    assert all(s["grad_amax"] is not None and s["grad_amax"] > 0 for s in steps)
    assert steps[0]["grad_amax"] == plain_step_amax(
        tmp_path, torch.bfloat16, lambda model: GPT2.loss(model, first))
    assert ours(caught) == []
    assert not (run / "INCOMPLETE").exists()


def test_lightning_fp16_with_a_cpu_grad_scaler_records_its_scales_and_skips(tmp_path, cli):
    """fp16 with the plugin's GradScaler on the CPU, which Lightning steps and updates back to
    back before the callback hears of the batch: the recorded scale of every step is the one
    its backward used, a skip is recorded exactly where the scaler backed off, and replaying
    the scaler's own policy over the run gives the same scales."""
    from lightning.pytorch.plugins import MixedPrecision

    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**20, growth_interval=2)
    _, scales, _, caught = lightning_train(
        tmp_path, through_self=True, plugins=[MixedPrecision("16-mixed", "cpu", scaler)])
    run = tmp_path / "run"
    steps = read_jsonl(run / "metrics.jsonl")
    assert json.loads((run / "config.json").read_text())["format"] == "fp16"
    assert [s["loss_scale"] for s in steps] == scales
    after = scales[1:] + [scaler.get_scale()]
    skipped = [b < a for a, b in zip(scales, after)]
    assert any(skipped) and not all(skipped)  # 2^20 overflows fp16 at first
    assert [s["skipped"] for s in steps] == skipped
    assert ours(caught) == []
    assert "update" not in vars(scaler)  # the wrap is gone with the run
    r = cli("replay", str(run), "--policy", "run", "--json")
    assert r.returncode == 0, r.stderr
    own = json.loads(r.stdout)["policies"][0]
    assert [[s for at, s in own["scale_changes"] if at <= t][-1]
            for t in range(1, STEPS + 1)] == scales


def book_scripts():
    """The Python blocks of the book's chapter on the trainers."""
    text = (ROOT / "docs" / "src" / "pytorch-trainers.md").read_text()
    return [block.split("```", 1)[0] for block in text.split("```python\n")[1:]]


def test_the_books_trainer_scripts_run_as_printed_and_their_runs_render(tmp_path, cli):
    """The book's HF Trainer and Lightning scripts (docs/src/pytorch-trainers.md), run as
    printed (in a fresh directory, with nothing else), each record a finished run of 100 steps
    that ``report`` renders."""
    pytest.importorskip("lightning.pytorch", reason="the Lightning callback needs lightning")
    scripts = book_scripts()
    assert len(scripts) == 2 and all(s.count("\n") <= 30 for s in scripts)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    for script, run in zip(scripts, ("runs/hf-gpt2", "runs/lightning")):
        r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=False, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "Recorder:" not in r.stderr, r.stderr[-3000:]
        run = tmp_path / run
        assert not (run / "INCOMPLETE").exists()
        assert len(read_jsonl(run / "metrics.jsonl")) == 100
        page = cli("report", str(run), "--out", str(run / "page"))
        assert page.returncode == 0, page.stderr
        assert (run / "page" / "index.html").is_file()
