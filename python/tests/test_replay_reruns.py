"""Replay against real reruns: the examples' transformer (examples/pytorch_recorder.py) trained
on the CPU with autocast in float16, recorded under one loss-scaling policy and replayed (open
loop) under others, each of which is also rerun from the same seed (closed loop).

What the recorder writes per step (the unscaled amax of the values the backward pass formed in
float16, exact or a bound) must make replay's skipped steps those of the reruns, and the report's
top for a rerun (the window's top from every step, less the margin the run's own step-to-step
spread of amax asks for) a scale that does not overflow when rerun, where the recorded top can.
Run as a script, it prints the table the book quotes (docs/src/replay.md).
"""

import importlib.util
import json
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/python-test installs it)")

from mixprec.torch import Recorder  # noqa: E402

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pytorch_recorder.py"
STEPS = 40
BATCH = 8
#: The policies rerun, by replay's name: a static scale, or GradScaler's arguments.
POLICIES = {
    "static:2^16": 2.0**16,
    "static:2^17": 2.0**17,
    "static:2^21": 2.0**21,
    "static:2^22": 2.0**22,
    "gradscaler": {},
}


def transformer():
    spec = importlib.util.spec_from_file_location("pytorch_recorder", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TinyTransformer


def loop(policy, out=None, steps=STEPS, batch=BATCH, seed=0):
    """The example's loop (by default smaller batches, fewer steps; model seed ``seed``, data
    seed ``seed + 1``) under ``policy``: a GradScaler with the given arguments (recorded into
    ``out`` when given), or a static scale with the GradScaler's own check
    (``torch._amp_foreach_non_finite_check_and_unscale_`` on the weights' gradients) and skip.
    Returns the skipped steps."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the same sums on every machine's thread count
    try:
        torch.manual_seed(seed)
        model = transformer()()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(seed + 1)
        scaler = torch.amp.GradScaler("cpu", **policy) if isinstance(policy, dict) else None
        rec = None
        if out is not None:
            rec = Recorder(model, out=out, format="fp16", every=10, optimizer=opt, scaler=scaler)
        skipped = []
        for step in range(1, steps + 1):
            x = torch.randint(0, 64, (batch, 16), generator=g)
            y = (x.float().mean(dim=1) > 31.5).long()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                states = scaler._per_optimizer_states.values()
                found = any(float(v) > 0 for s in states for v in s["found_inf_per_device"].values())
                if rec is not None:
                    rec.step(loss)
                scaler.update()
            else:
                (loss * policy).backward()
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                found_inf = torch.zeros(())
                torch._amp_foreach_non_finite_check_and_unscale_(
                    grads, found_inf, torch.full((), 1.0 / policy)
                )
                found = bool(found_inf > 0)
                if not found:
                    opt.step()
            if found:
                skipped.append(step)
        if rec is not None:
            rec.close()
        return skipped
    finally:
        torch.set_num_threads(threads)


def replay(cli, run, policies):
    done = cli("replay", str(run), "--policy", *policies, "--json")
    assert done.returncode == 0, done.stderr
    whole = json.loads(done.stdout)
    return {p["policy"]: p for p in whole["policies"]}, whole


def reported(cli, run, page):
    """The run's entry in the report.json of its report, written to ``page``."""
    done = cli("report", str(run), "--out", str(page))
    assert done.returncode == 0, done.stderr
    return json.loads((page / "report.json").read_text())["runs"][0]


def window_top(cli, run, page):
    return reported(cli, run, page)["window_top"]


@pytest.fixture(scope="module")
def reruns():
    return {name: loop(policy) for name, policy in POLICIES.items()}


def rows(cli, tmp, recorded_policy, reruns):
    run = tmp / "run"
    recorded = loop(recorded_policy, out=run)
    replayed, whole = replay(cli, run, list(POLICIES))
    table = [
        (name, replayed[name]["skipped"]["steps"], replayed[name]["undecided"]["steps"], reruns[name])
        for name in POLICIES
    ]
    return recorded, whole, table, run


def test_replay_of_the_default_gradscalers_run_equals_the_reruns(tmp_path, cli, reruns):
    """Recorded under GradScaler's defaults (2^16, no overflow): every step exact, and every
    policy's replayed skips those of its rerun, at 2^17 the two steps that overflow there."""
    recorded, whole, table, run = rows(cli, tmp_path, {}, reruns)
    assert recorded == [] and whole["bounded_steps"] == 0
    assert reruns["static:2^17"] == [22, 36]
    for name, skipped, undecided, rerun in table:
        assert (skipped, undecided) == (rerun, []), name
    # The window's top, from every step's amax (not only the capture steps'), holds in a rerun
    # at that scale; the capture steps alone put it higher, where a rerun overflows.
    top, at = window_top(cli, run, tmp_path / "page")
    assert (top, at) == (16, 22)
    assert loop(2.0**top) == reruns["static:2^16"] == []
    report = json.loads((tmp_path / "page" / "report.json").read_text())["runs"][0]
    captures_top = min(c["window"]["max_log2_scale"] for c in report["captures"])
    assert captures_top == 17 and reruns["static:2^17"] != []
    # The window figure marks the step that sets the top, which no capture step's band shows.
    svg = (tmp_path / "page" / "figures" / "window.svg").read_text()
    assert "window top from every step, 2^16 at step 22" in svg


def test_replay_of_a_run_that_backed_off_bounds_its_overflow_steps(tmp_path, cli, reruns):
    """Recorded from 2^24 (the example's start), backing off: its overflow steps carry only a
    bound. Where the bound decides (at and above the scale that overflowed, or where the values
    known overflow) replay's skips are the reruns'; the rest are counted as undecided."""
    recorded, whole, table, _ = rows(cli, tmp_path, {"init_scale": 2.0**24}, reruns)
    assert whole["bounded_steps"] == len(recorded) > 0
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if s.get("grad_amax_bounded")] == recorded
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["bounded_steps"] == len(recorded)
    for name, skipped, undecided, rerun in table:
        assert set(undecided) <= set(recorded), name
        assert skipped == rerun, name
    # Far above every bound: decided; at 2^16 nothing decides the backing-off steps.
    decided = {name: undecided for name, _, undecided, _ in table}
    assert decided["static:2^22"] == [] and decided["static:2^16"] == recorded


def test_the_window_top_for_a_rerun_holds_where_the_recorded_top_overflows(tmp_path, cli):
    """The recorded top is the recorded trajectory's: seed 2, recorded from 2^24, tops out at
    2^17 with its largest gradient 0.05 bits below fp16's max there, and a rerun at static 2^17
    (no back-off, so another trajectory) overflows at step 23. The top for a rerun, a binade
    lower from the run's own step-to-step spread, holds; replay (open loop) cannot see step 23."""
    run = tmp_path / "run"
    loop({"init_scale": 2.0**24}, out=run, seed=2)
    entry = reported(cli, run, tmp_path / "page")
    top, _ = entry["window_top"]
    rerun_top = entry["window_rerun_top"]
    assert top == 17 and rerun_top["headroom"] < 0.1 < rerun_top["excess"]
    assert (rerun_top["log2_scale"], rerun_top["margin"]) == (16, 1)
    # The spread is of the exact steps only: a bounded step's amax is a bound, not a draw.
    assert entry["bounded_steps"] > 0 and rerun_top["steps"] == STEPS - entry["bounded_steps"]
    assert loop(2.0**top, seed=2) == [23]
    assert loop(2.0 ** rerun_top["log2_scale"], seed=2) == []
    replayed, _ = replay(cli, run, ["static:2^17"])
    assert replayed["static:2^17"]["skipped"]["steps"] == []
    page = (tmp_path / "page" / "index.html").read_text()
    assert ("so the top for a rerun is 2^16. Start with GradScaler(init_scale=2.0**16): the top for "
            "a rerun." in page)
    # The window figure draws it as a level; section 7 says the recorder counts no swamping
    # (and draws no empty chart).
    svg = (tmp_path / "page" / "figures" / "window.svg").read_text()
    assert "top for a rerun, 2^16" in svg
    assert "No run in this report recorded updates lost to swamping" in page
    assert not (tmp_path / "page" / "figures" / "updates-lost.svg").exists()


if __name__ == "__main__":
    import tempfile

    binary = sys.argv[1] if len(sys.argv) > 1 else "target/release/mixprec"

    def cli(*args):
        return subprocess.run([binary, *args], capture_output=True, text=True, check=False)

    reruns_ = {name: loop(policy) for name, policy in POLICIES.items()}
    for label, policy in (("gradscaler (2^16)", {}), ("gradscaler from 2^24", {"init_scale": 2.0**24})):
        with tempfile.TemporaryDirectory() as tmp:
            recorded, whole, table, run = rows(cli, pathlib.Path(tmp), policy, reruns_)
            entry = reported(cli, run, pathlib.Path(tmp) / "page")
            top, rerun_top = entry["window_top"], entry["window_rerun_top"]
            print(f"recorded under {label}: skipped {recorded}, bounded steps "
                  f"{whole['bounded_steps']}, window top 2^{top[0]} (step {top[1]}), "
                  f"for a rerun 2^{rerun_top['log2_scale']}")
            def steps(xs):
                return f"{len(xs)} {xs}" if len(xs) <= 10 else f"{len(xs)} (steps {xs[0]}-{xs[-1]})"

            for name, skipped, undecided, rerun in table:
                print(f"  {name:12} replay skips {steps(skipped)}, undecided {steps(undecided)}; "
                      f"rerun skips {steps(rerun)}")
