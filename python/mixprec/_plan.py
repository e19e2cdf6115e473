"""A precision plan per layer for a PyTorch model: :func:`sensitivity` (what casting each layer
alone does to the gradients), :func:`plan` (which layers to cast, least harm first, within a
budget) and :func:`validate` (the plan re-trained against FP32 and every layer cast, over
seeds). Imported as ``mixprec.torch.sensitivity``, ``plan`` and ``validate``.

They write the plan directory that ``mixprec report DIR`` renders::

    DIR/sensitivity.json     every product-forming layer, sorted by harm
    DIR/plan.json            the greedy path, the layers cast and those kept
    DIR/plan-recipe.json     the plan as a recipe: the cast recipe and its ``keep``
    DIR/validation.json      the runs of the three arms
    DIR/runs/<arm>-seed<k>/  run directories, as the Recorder writes them

A layer is a module (its qualified name in ``model.named_modules()``) owning a weight whose
products :class:`~mixprec.torch.Simulate` casts. "Casting it alone" is the cast recipe with a
``keep`` that sends every other module to FP32, on the same weights and batches as the FP32
reference, forward and backward, no optimizer step.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pathlib
import tempfile
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from . import _mixprec
from ._products import _layer_of
from ._recorder import Recorder
from ._simulate import Simulate

#: The metrics of a measurement, as ``sensitivity.json`` names them.
METRICS = ("grad_rel_err", "grad_cosine", "loss_change", "underflow", "saturate")
#: The arms :func:`validate` trains.
ARMS = ("fp32", "all", "plan")


def _literal(name: str) -> str:
    """The glob pattern that matches ``name`` alone."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _finite_or_none(x: float) -> Optional[float]:
    return x if math.isfinite(x) else None


def _harm(row: Dict[str, Any]) -> float:
    """A row's gradient error, a non-finite one (None) the largest."""
    e = row["grad_rel_err"]
    return math.inf if e is None else e


def _write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes ``text`` to ``path`` whole or not at all (a temporary file in the same folder,
    renamed over it)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, allow_nan=False) + "\n"


class _Bench:
    """A model's weights and buffers as they were, its batches and loss, and the FP32
    reference of each batch (loss, every weight gradient): measures a recipe against it."""

    def __init__(self, model: torch.nn.Module, batches: List[Any], loss_fn, seed: int) -> None:
        self.model, self.batches, self.loss_fn, self.seed = model, batches, loss_fn, seed
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        with self.session():
            self.reference = [self._pass(None, b) for b in batches]

    @contextlib.contextmanager
    def session(self):
        """The model's weights, buffers and gradients put back as they were on leaving."""
        state = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        grads = [None if p.grad is None else p.grad.detach().clone() for p in self.params]
        try:
            yield
        finally:
            self.model.load_state_dict(state)
            for p, g in zip(self.params, grads):
                p.grad = g

    def _pass(self, sim: Optional[Simulate], batch: Any) -> Tuple[float, torch.Tensor]:
        """One forward and backward pass: the loss and every weight gradient, flat (unscaled
        where ``sim`` scales the loss)."""
        self.model.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model, batch)
        if sim is None:
            loss.backward()
            scale = 1.0
        else:
            sim.backward(loss)
            scale = sim._scale_used
        grads = [
            (torch.zeros_like(p) if p.grad is None else p.grad).detach().reshape(-1).cpu()
            for p in self.params
        ]
        flat = torch.cat(grads)
        return float(loss.detach()), (flat if scale == 1.0 else flat.double() / scale)

    def measure(self, recipe: Any) -> Tuple[Dict[str, Optional[float]], Simulate]:
        """``recipe``'s metrics against the FP32 reference, each batch's pass on the same
        weights: the relative error and the cosine of the weight gradients (all of them as one
        vector), the loss's relative change, each a mean over the batches; the shares of the
        cast operands' values that underflowed and saturated (all batches'). And the
        :class:`Simulate` that ran (its products: which were cast, their FLOPs).

        With fp8 delayed scaling, a first pass over the first batch, not measured, gives every
        cast tensor its scale from an amax seen (instead of the initial 1), and each pass ends
        a step of the scales, as training would."""
        errors, cosines, changes = [], [], []
        with self.session():
            self.model.load_state_dict(self.state)
            sim = Simulate(self.model, recipe, seed=self.seed)
            with sim:
                if any(p.delayed is not None for p in sim._precisions):
                    self._pass(sim, self.batches[0])
                    sim._end_delayed()
                    sim._operand_counts.clear()
                    sim._products.flops.clear()
                for batch, (ref_loss, ref) in zip(self.batches, self.reference):
                    loss, g = self._pass(sim, batch)
                    sim._end_delayed()
                    ref, g = ref.double(), g.double()
                    ref_norm = float(torch.linalg.vector_norm(ref))
                    norm = float(torch.linalg.vector_norm(g))
                    errors.append(float(torch.linalg.vector_norm(g - ref)) / ref_norm)
                    cosines.append(float(torch.dot(g, ref)) / (norm * ref_norm))
                    changes.append(abs(loss - ref_loss) / abs(ref_loss))
        stored, under, over = (sum(c[i] for c in sim._operand_counts.values()) for i in range(3))
        metrics = {
            "grad_rel_err": sum(errors) / len(errors),
            "grad_cosine": sum(cosines) / len(cosines),
            "loss_change": sum(changes) / len(changes),
            "underflow": under / stored if stored else 0.0,
            "saturate": over / stored if stored else 0.0,
        }
        return {k: _finite_or_none(v) for k, v in metrics.items()}, sim


class Sensitivity:
    """What casting each product-forming layer alone does (:func:`sensitivity`'s result).

    Attributes:
        model: the model's short name.
        recipe: the cast recipe (the library's full recipe, as a dict).
        batches: the number of batches measured; ``seed``: stochastic rounding's seed.
        layers: per layer a dict (``layer``, ``flops``, and :data:`METRICS`), sorted by harm:
            ``grad_rel_err`` descending (a non-finite error, None, first).
        all: the metrics with every layer cast at once.
    """

    def __init__(self, bench: _Bench, model: str, recipe: Dict[str, Any], layers, all_) -> None:
        self._bench = bench
        #: The layers in the order the forward pass first casts them.
        self._order = [r["layer"] for r in layers]
        self.model = model
        self.recipe = recipe
        self.batches = len(bench.batches)
        self.seed = bench.seed
        self.layers: List[Dict[str, Any]] = sorted(layers, key=_harm, reverse=True)
        self.all: Dict[str, Optional[float]] = all_

    def to_dict(self) -> Dict[str, Any]:
        """The contents of ``sensitivity.json``."""
        return {
            "schema": "mixprec-sensitivity/1",
            "model": self.model,
            "recipe": self.recipe["name"],
            "reference": "fp32",
            "batches": self.batches,
            "seed": self.seed,
            "layers": self.layers,
            "all": self.all,
        }

    def save(self, out: "str | os.PathLike[str]") -> pathlib.Path:
        """Writes ``out/sensitivity.json`` (atomically; ``out`` created if need be)."""
        path = pathlib.Path(out)
        path.mkdir(parents=True, exist_ok=True)
        _write_atomic(path / "sensitivity.json", _json(self.to_dict()))
        return path / "sensitivity.json"

    def __str__(self) -> str:
        total = sum(r["flops"] for r in self.layers)
        head = (
            f"sensitivity of {self.model} to {self.recipe['name']}, each layer cast alone "
            f"(vs fp32, {self.batches} batches, seed {self.seed})"
        )
        rows = [(r["layer"], r["flops"] / total, r) for r in self.layers]
        rows.append(("all", 1.0, self.all))
        return head + "\n" + _table(rows)


def _table(rows: Sequence[Tuple[str, float, Dict[str, Any]]]) -> str:
    width = max(len("layer"), *(len(name) for name, _, _ in rows))
    lines = [
        f"{'layer':<{width}}  {'FLOPs':>6}  {'grad err':>9}  {'cosine':>9}  {'loss chg':>9}  "
        f"{'underflow':>9}  {'saturate':>9}"
    ]

    def num(x: Optional[float], fmt: str) -> str:
        return f"{'-':>9}" if x is None else f"{x:{fmt}}"

    for name, share, m in rows:
        lines.append(
            f"{name:<{width}}  {share:>6.1%}  {num(m['grad_rel_err'], '9.2e')}  "
            f"{num(m['grad_cosine'], '9.6f')}  {num(m['loss_change'], '9.2e')}  "
            f"{num(m['underflow'], '9.2%')}  {num(m['saturate'], '9.2%')}"
        )
    return "\n".join(lines)


def _base_recipe(model: torch.nn.Module, recipe: Any) -> Dict[str, Any]:
    """``recipe`` as the library resolves it, checked to cast the operands of products and to
    keep no layer."""
    sim = Simulate(model, recipe)
    if "keep" in sim.recipe:
        raise ValueError(
            "recipe: the recipe to measure casts every layer; it cannot keep any (drop its "
            "\"keep\")"
        )
    if not sim._casts_operands():
        raise ValueError(
            f"recipe: {sim.recipe['name']!r} casts no operands of products (gemm_operands all "
            "fp32): a layer's sensitivity is that of its products' casts (try fp8-hybrid, "
            "mxfp8 or nvfp4)"
        )
    return sim.recipe


def sensitivity(
    model: torch.nn.Module,
    batches: Iterable[Any],
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    recipe: Any = "nvfp4",
    *,
    seed: int = 0,
    name: Optional[str] = None,
) -> Sensitivity:
    """Measures, for every layer whose products ``recipe`` casts, what casting that layer
    alone does against FP32 on the same weights and ``batches``: the relative error and cosine
    of the weight gradients (all the model's, as one vector), the loss's relative change, and
    the shares of the layer's cast operand values that underflowed and saturated; and the
    same with every layer cast (``all``). Forward and backward only: no optimizer step; the
    model's weights, buffers and gradients are put back as they were.

    ::

        loss_fn = lambda m, b: F.cross_entropy(m(b[0]), b[1])
        sens = mixprec.torch.sensitivity(model, batches, loss_fn, "nvfp4")
        print(sens)                     # the table, the most harmed layer first
        sens.save("plan")               # plan/sensitivity.json

    Args:
        model: the ``torch.nn.Module`` (float32 parameters), in the mode it trains in.
        batches: the batches measured (a few: each layer costs one pass over them).
        loss_fn: ``loss_fn(model, batch)``, the batch's loss (a scalar tensor).
        recipe: the cast recipe, as :class:`~mixprec.torch.Simulate` takes it (a preset name
            such as ``nvfp4``, ``mxfp8``, ``fp8-hybrid``, or a recipe dict), casting the
            operands of products, without ``keep``.
        seed: the seed of stochastic rounding, where the recipe rounds stochastically.
        name: the model's name in the outputs (default: its class name).

    Raises:
        ValueError: no batches, a recipe that casts no products or keeps layers, a model
            whose products are none of the forms Simulate casts.
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn: expected loss_fn(model, batch), got {type(loss_fn).__name__}")
    batches = list(batches)
    if not batches:
        raise ValueError("batches: none given; sensitivity measures over at least one batch")
    base = _base_recipe(model, recipe)
    bench = _Bench(model, batches, loss_fn, int(seed))
    all_, sim = bench.measure(base)
    layers = list(dict.fromkeys(_layer_of(n) for n in sim._products.cast))
    if not layers:
        raise ValueError(
            f"model: {base['name']!r} cast no product of its weights (coverage: "
            f"{sim.coverage}); nothing to measure"
        )
    rows = []
    for layer in layers:
        alone = dict(base, keep={_literal(layer): base, "*": "fp32"})
        metrics, _ = bench.measure(alone)
        flops = round(sim._products.flops[layer] / len(batches))
        rows.append({"layer": layer, "flops": flops, **metrics})
    return Sensitivity(bench, name or type(model).__name__, base, rows, all_)


class Plan:
    """Which layers to cast (:func:`plan`'s result).

    Attributes:
        recipe: the plan as a recipe dict: the cast recipe, its ``keep`` sending every layer
            not cast to ``high`` (no ``keep`` where every layer is cast).
        cast: the layers cast, in the order they were added (least harm first); ``keep``:
            the others, in the model's order.
        flops_share: the share of the product FLOPs cast; ``grad_rel_err``: the gradients'
            error with the plan's recipe, all its layers cast at once.
        steps: the greedy path: per layer added, the FLOPs share and the joint error.
    """

    def __init__(self, sens: Sensitivity, high: Any, budget, cast, keep, recipe, error, steps):
        self.base = sens.recipe["name"]
        self.high = high
        self.budget = budget
        self.cast: List[str] = cast
        self.keep: List[str] = keep
        self.recipe: Dict[str, Any] = recipe
        flops = {r["layer"]: r["flops"] for r in sens.layers}
        self.flops_share = sum(flops[l] for l in cast) / sum(flops.values())
        self.grad_rel_err: Optional[float] = error
        self.steps: List[Dict[str, Any]] = steps

    def to_dict(self) -> Dict[str, Any]:
        """The contents of ``plan.json``."""
        return {
            "schema": "mixprec-plan/1",
            "recipe": self.base,
            "high": self.high if isinstance(self.high, str) else self.high["name"],
            "budget": self.budget,
            "cast": self.cast,
            "keep": self.keep,
            "flops_share": self.flops_share,
            "grad_rel_err": self.grad_rel_err,
            "steps": self.steps,
        }

    def save(self, out: "str | os.PathLike[str]") -> pathlib.Path:
        """Writes ``out/plan.json`` and ``out/plan-recipe.json`` (each atomically; ``out``
        created if need be); returns the recipe's path."""
        path = pathlib.Path(out)
        path.mkdir(parents=True, exist_ok=True)
        _write_atomic(path / "plan.json", _json(self.to_dict()))
        _write_atomic(path / "plan-recipe.json", _json(self.recipe))
        return path / "plan-recipe.json"

    def __str__(self) -> str:
        high = self.high if isinstance(self.high, str) else self.high["name"]
        err = "-" if self.grad_rel_err is None else f"{self.grad_rel_err:.2e}"
        lines = [
            f"plan: {self.base} on {len(self.cast)} layers ({self.flops_share:.1%} of the "
            f"product FLOPs), {high} on {len(self.keep)}; gradient error {err} (budget "
            f"{', '.join(f'{k} {v}' for k, v in self.budget.items())})",
        ]
        lines += [f"  keep {high}: {name}" for name in self.keep]
        return "\n".join(lines)


def _plan_recipe(base: Dict[str, Any], kept: Sequence[str], high: Any) -> Dict[str, Any]:
    """``base`` with every layer of ``kept`` sent to ``high``, named ``<base>-plan`` (as
    ``mixprec plan`` names it) when it keeps any."""
    if not kept:
        return dict(base)
    return dict(base, name=f"{base['name']}-plan", keep={_literal(l): high for l in kept})


def _cast_recipe(plan_recipe: Dict[str, Any]) -> Dict[str, Any]:
    """The recipe a plan's recipe casts every layer to: itself without ``keep``, and without
    the ``-plan`` that :func:`_plan_recipe` adds to the name."""
    base = {k: v for k, v in plan_recipe.items() if k != "keep"}
    if "keep" in plan_recipe and base["name"].endswith("-plan"):
        base["name"] = base["name"][: -len("-plan")]
    return base


def plan(
    sens: Sensitivity,
    *,
    max_grad_error: Optional[float] = None,
    flops_share: Optional[float] = None,
    high: Any = "fp32",
) -> Plan:
    """Casts layers in order of least harm (``sens``'s ``grad_rel_err``, ascending) until the
    budget: after each layer added, the gradients' error with all the added layers cast at
    once is measured again (on ``sens``'s model, weights and batches); the plan stops before
    that error exceeds ``max_grad_error``, or once the layers cast hold ``flops_share`` of the
    product FLOPs. The layers not cast keep ``high``.

    ::

        p = mixprec.torch.plan(sens, max_grad_error=0.05)
        p.save("plan")                  # plan/plan.json, plan/plan-recipe.json
        Simulate(model, p.recipe)       # train with it

    Args:
        sens: :func:`sensitivity`'s result.
        max_grad_error: the budget as the largest joint gradient error (``grad_rel_err``).
        flops_share: the budget as the share (0 to 1] of the product FLOPs to cast.
        high: what the layers kept keep: a preset name (``fp32``, ``bf16-master``) or a
            recipe dict.

    Raises:
        ValueError: no budget or both, a budget that is not a positive number (a share above
            1), an unknown ``high``.
    """
    if not isinstance(sens, Sensitivity):
        raise TypeError(
            f"sens: expected mixprec.torch.sensitivity(...)'s result, got {type(sens).__name__}"
        )
    if (max_grad_error is None) == (flops_share is None):
        raise ValueError("budget: give one of max_grad_error=... and flops_share=...")
    if max_grad_error is not None:
        key, value = "max_grad_error", max_grad_error
    else:
        key, value = "flops_share", flops_share
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
        math.isfinite(value) and value > 0
    ) or (key == "flops_share" and value > 1):
        raise ValueError(f"{key}: expected a positive number (a share at most 1), got {value!r}")
    if isinstance(high, dict) and "keep" in high:
        raise ValueError("high: a kept recipe cannot have a keep of its own")
    try:
        _mixprec.recipe_json(high if isinstance(high, str) else json.dumps(high))
    except (ValueError, TypeError) as e:
        raise ValueError(f"high: {e}") from None
    bench, base = sens._bench, sens.recipe
    flops = {r["layer"]: r["flops"] for r in sens.layers}
    order = [r["layer"] for r in sorted(sens.layers, key=_harm)]
    in_model = sens._order
    cast: List[str] = []
    steps: List[Dict[str, Any]] = []
    for layer in order:
        trial = cast + [layer]
        share = sum(flops[l] for l in trial) / sum(flops.values())
        kept = [l for l in in_model if l not in trial]
        metrics, _ = bench.measure(_plan_recipe(base, kept, high))
        error = metrics["grad_rel_err"]
        if max_grad_error is not None and (error is None or error > max_grad_error):
            break
        cast = trial
        steps.append({"layer": layer, "flops_share": share, "grad_rel_err": error})
        if flops_share is not None and share >= flops_share:
            break
    kept = [l for l in in_model if l not in cast]
    recipe = _plan_recipe(base, kept, high)
    error = steps[-1]["grad_rel_err"] if steps else bench.measure(recipe)[0]["grad_rel_err"]
    return Plan(sens, high, {key: value}, cast, kept, recipe, error, steps)


class Validation:
    """The three arms re-trained (:func:`validate`'s result): per arm and seed the losses of
    every step, and per arm the mean of the last ``last_steps`` steps' losses over the seeds,
    against FP32's by Welch's test (the library's)."""

    def __init__(self, losses: Dict[str, List[List[float]]], last_steps: int) -> None:
        self.losses = losses
        self.last_steps = last_steps
        #: Per arm, per seed: the mean loss over the run's last ``last_steps`` steps.
        self.final = {
            arm: [sum(run[-last_steps:]) / last_steps for run in runs]
            for arm, runs in losses.items()
        }

    def welch(self, arm: str) -> Optional[Dict[str, float]]:
        """``arm``'s final loss against FP32's: ``difference`` (arm - fp32), its 95% interval
        (``low``, ``high``), ``t``, ``df`` and ``p_value``; None where undefined (fewer than
        two seeds, no spread)."""
        out = _mixprec.welch_json(self.final[arm], self.final["fp32"])
        return None if out is None else json.loads(out)

    def __str__(self) -> str:
        lines = [f"final loss (mean of the last {self.last_steps} steps), over seeds:"]
        for arm in ARMS:
            values = self.final[arm]
            mean = sum(values) / len(values)
            line = f"  {arm:<5} {mean:.4f}  (n={len(values)})"
            w = None if arm == "fp32" else self.welch(arm)
            if w is not None:
                noise = w["p_value"] >= 0.05
                verdict = "within seed noise of fp32" if noise else "differs from fp32"
                line += (
                    f"  vs fp32 {w['difference']:+.4f} [{w['low']:+.4f}, {w['high']:+.4f}] "
                    f"p={w['p_value']:.3g}: {verdict}"
                )
            lines.append(line)
        return "\n".join(lines)


def validate(
    out: "str | os.PathLike[str]",
    make_model: Callable[[int], torch.nn.Module],
    make_optimizer: Callable[[torch.nn.Module], torch.optim.Optimizer],
    batches: "Sequence[Any] | Callable[[int], Iterable[Any]]",
    loss_fn: Callable[[torch.nn.Module, Any], torch.Tensor],
    *,
    seeds: int = 5,
    last_steps: Optional[int] = None,
) -> Validation:
    """Re-trains three arms over ``seeds`` seeds, each run under :class:`Simulate` and
    recorded by the :class:`Recorder` into ``out/runs/<arm>-seed<k>/``: ``fp32``, ``all``
    (the plan's cast recipe on every layer) and ``plan`` (``out/plan-recipe.json``); writes
    ``out/validation.json`` (the metric: the loss, the mean over each run's last
    ``last_steps`` steps).

    Args:
        out: the plan directory (:meth:`Plan.save`'s).
        make_model: ``make_model(seed)``, a new model, its weights drawn from ``seed``.
        make_optimizer: ``make_optimizer(model)``, its optimizer.
        batches: the training batches, one per step: a sequence (the same for every seed) or
            ``batches(seed)``, an iterable.
        loss_fn: ``loss_fn(model, batch)``, the batch's loss.
        seeds: the seeds 0 .. seeds-1 (at least 2 for a test).
        last_steps: the steps the final loss is the mean over (default: the last fifth).
    """
    path = pathlib.Path(out)
    try:
        recipe = json.loads((path / "plan-recipe.json").read_text())
    except (OSError, ValueError) as e:
        raise ValueError(
            f"{path / 'plan-recipe.json'}: {e} (write it with plan(...).save)"
        ) from None
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds: expected a whole number >= 1, got {seeds!r}")
    if last_steps is not None and (
        isinstance(last_steps, bool) or not isinstance(last_steps, int) or last_steps < 1
    ):
        raise ValueError(f"last_steps: expected a whole number >= 1, got {last_steps!r}")
    arms = {"fp32": "fp32", "all": _cast_recipe(recipe), "plan": recipe}
    losses: Dict[str, List[List[float]]] = {arm: [] for arm in ARMS}
    runs = []
    for arm in ARMS:
        for k in range(seeds):
            run = f"runs/{arm}-seed{k}"
            model = make_model(k)
            opt = make_optimizer(model)
            sim = Simulate(model, arms[arm], optimizer=opt, seed=k)
            trace = []
            name = arms[arm] if isinstance(arms[arm], str) else arms[arm]["name"]
            rec = Recorder(model, path / run, every=0, simulate=sim, name=name)
            with sim, rec:
                for batch in batches(k) if callable(batches) else batches:
                    opt.zero_grad()
                    loss = loss_fn(model, batch)
                    sim.backward(loss)
                    sim.step()
                    rec.step(loss)
                    trace.append(float(loss.detach()))
            losses[arm].append(trace)
            runs.append({"arm": arm, "seed": k, "run": run})
    steps = min(len(t) for traces in losses.values() for t in traces)
    if steps == 0:
        raise ValueError("batches: none given; validation trains one step per batch")
    if last_steps is None:
        last_steps = max(1, steps // 5)
    if last_steps > steps:
        raise ValueError(f"last_steps: {last_steps} is more than the runs' {steps} steps")
    doc = {
        "schema": "mixprec-validation/1", "metric": "loss", "last_steps": last_steps, "runs": runs
    }
    _write_atomic(path / "validation.json", _json(doc))
    return Validation(losses, last_steps)
