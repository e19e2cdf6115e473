"""The recorder across the ranks of ``torch.distributed``: ``Recorder(..., ranks="merge")``.

Every rank captures what it holds, and rank 0 writes one run whose captures are the exact merge
of every rank's (``mixprec::run::CaptureBuilder::merge``: per site, histogram counts, zeros,
NaN, infinities, negatives and rounding counts add, amax is the largest, the smallest nonzero
magnitude the smallest; the sums of magnitudes and squares add in f64, in rank order). What a
rank holds:

- Under FSDP2 (``fully_shard``) the parameters are DTensors: a rank captures its own shard of
  the weights, the weights' gradients and the optimizer's state (``to_local()``), so the merge
  is the histogram of the whole parameter.
- Under DDP the parameters are plain tensors, identical on every rank: they count once, from
  rank 0 (the other ranks send only the classes computed from the batch).
- Activations and their gradients are each rank's own batch's: the merge is their union.
- A weight's gradient is captured once the backward pass is over, after DDP's all-reduce or
  FSDP's reduce-scatter (a callback queued behind the engine's own final callbacks): the
  gradient of the whole batch the optimizer steps with (FSDP's shard of it), still scaled by the
  loss scale, as the backward pass held it.

Each rank's backward pass is of its own loss, usually a mean over its own batch: its activation
gradients are ``world_size`` times those of one process training on the whole batch with the
mean over it (whose weight gradients DDP's and FSDP's averages equal), and so is ``grad_amax``
where it comes from them (a loop that stores narrow gradients).

Every rank must call ``rec.step`` at every step, and ``rec.close`` (or leave the ``with`` block).
Rank 0 merges the steps: the loss is the mean over the ranks' losses (of equal batches: the whole
batch's mean), ``grad_amax`` the largest, an overflow, a skipped step or a bounded ``grad_amax``
on any rank is one for the run, the per-class counts add, the nodes that overflowed inside are
every rank's. A step costs one ``all_gather`` of seven float64 per rank (0.2 ms on gloo, two
processes on a 2-core CPU under a load of 9); a capture step (or one with counts or an
intermediate overflow: a ``Simulate``'s steps) one ``gather_object`` more, of the record and the
rank's sites as JSON (25 KB for a two-layer transformer's 60 sites; 0.85 to 1.5 ms). Each
collective also waits for the slowest rank. Closing takes an ``all_reduce`` (whether every
weight is finite).
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, List, Optional

import torch

from . import _mixprec

try:
    from torch.distributed.tensor import DTensor, Replicate, Shard
except ImportError:  # torch without torch.distributed
    DTensor = Replicate = Shard = None


def _is_dtensor(t: Any) -> bool:
    return DTensor is not None and isinstance(t, DTensor)


def local(t: torch.Tensor, merge: bool = False) -> Optional[torch.Tensor]:
    """The values of ``t`` this rank holds: a DTensor's local shard, a plain tensor itself. With
    ``merge``, a DTensor replicated along a mesh dimension counts on the first rank of that
    dimension only (None elsewhere), so that merging the ranks' values counts each once."""
    if not _is_dtensor(t):
        return t
    if merge:
        coordinate = t.device_mesh.get_coordinate() or []
        for dim, placement in enumerate(t.placements):
            if isinstance(placement, Replicate) and coordinate[dim] != 0:
                return None
            if not isinstance(placement, (Shard, Replicate)):
                raise ValueError(
                    f"Recorder(ranks='merge'): a DTensor placed {placement} has no values of "
                    f"its own to count"
                )
    return t.to_local()


class EndOfBackward:
    """Runs functions at the end of the backward pass they were deferred in, after the autograd
    engine's final callbacks queued during it: DDP's (which waits for the gradients' all-reduce
    and writes the averages) and FSDP's. A callback queued behind them from a callback of our
    own, queued at the first deferral of the pass, runs after them."""

    def __init__(self) -> None:
        self.pending: List[Any] = []
        self.task: Optional[int] = None

    def defer(self, fn) -> None:
        """Runs ``fn()`` at the end of the backward pass running (call it from a hook)."""
        task = torch._C._current_graph_task_id()
        if task != self.task:
            self.task = task
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(lambda: engine.queue_callback(self._run))
        self.pending.append(fn)

    def _run(self) -> None:
        pending, self.pending, self.task = self.pending, [], None
        for fn in pending:
            fn()


#: The numbers of a step record every rank sends at every step (``_numbers``), then whether the
#: step also has what only an object carries (a capture, counts, intermediate overflows).
_NUMBERS = ("step", "loss", "grad_amax", "overflow", "skipped", "grad_amax_bounded")


def _numbers(record: Dict[str, Any], captured: bool) -> torch.Tensor:
    """The record's numbers (None as NaN) and whether it needs :func:`gather_object`."""
    extra = captured or bool(record["counts"]) or bool(record.get("intermediate_overflow"))
    values = [record.get(k) for k in _NUMBERS] + [extra]
    return torch.tensor([float("nan") if v is None else float(v) for v in values],
                        dtype=torch.float64)


def _record(row: torch.Tensor, like: Dict[str, Any]) -> Dict[str, Any]:
    """A rank's record from its numbers, its other fields ``like``'s (rank 0's)."""
    values = [None if math.isnan(v) else v for v in row.tolist()]
    record = dict(like, counts={})
    record.pop("intermediate_overflow", None)
    for key, v in zip(_NUMBERS, values):
        record[key] = bool(v) if key in ("overflow", "skipped", "grad_amax_bounded") else v
    record["step"] = int(values[0])
    return record


def _merge_records(records: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One step's record from the ranks' (rank 0's first): see the module's docstring."""
    merged = dict(records[0])
    steps = {r["step"] for r in records}
    if len(steps) != 1:
        raise RuntimeError(
            f"Recorder(ranks='merge'): the ranks are at different steps {sorted(steps)}; every "
            f"rank must call rec.step once per step"
        )
    losses = [r["loss"] for r in records]
    merged["loss"] = None if None in losses else sum(losses) / len(losses)
    for key in ("overflow", "skipped", "grad_amax_bounded"):
        merged[key] = any(r[key] for r in records)
    amaxes = [r["grad_amax"] for r in records if r["grad_amax"] is not None]
    merged["grad_amax"] = max(amaxes) if amaxes else None
    inside = list(dict.fromkeys(n for r in records for n in r.get("intermediate_overflow", [])))
    if inside:
        merged["intermediate_overflow"] = inside
    counts: Dict[str, Dict[str, int]] = {}
    for r in records:
        for cls, c in r["counts"].items():
            into = counts.setdefault(cls, {})
            for k, v in c.items():
                into[k] = into.get(k, 0) + v
    merged["counts"] = counts
    return merged


class MergedWriter:
    """The run writer of ``ranks="merge"``, with the interface of ``_mixprec.RunWriter``: rank
    0's writes the run (its config says ``"ranks": "merge"``), and every rank's :meth:`step` sends
    its record and capture there (one ``gather_object``); the other ranks write nothing.

    Args:
        params: the recorded model's parameters: all DTensors (FSDP2: shards, every rank sends
            every site) or all plain tensors (DDP: copies, the other ranks send only the classes
            computed from the batch).
    """

    def __init__(self, path: str, config_json: str, flush_every: float, params: List[Any]):
        dist = torch.distributed
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        sharded = [_is_dtensor(p) for p in params]
        if any(sharded) and not all(sharded):
            raise ValueError(
                "Recorder(ranks='merge'): the model has both DTensor (sharded) and plain "
                "parameters; merge the ranks' runs of a model fully_shard'ed throughout, or "
                "wrapped in DistributedDataParallel"
            )
        self.replicated = not any(sharded)
        self.writer = None
        self._open = True
        if self.rank == 0:
            config = dict(json.loads(config_json), ranks="merge")
            self.writer = _mixprec.RunWriter(path, json.dumps(config), flush_every)

    @property
    def open(self) -> bool:
        return self.writer.open if self.writer is not None else self._open

    def step(self, record_json: str, capture: Optional[Any] = None) -> None:
        """Gathers the ranks' records (and captures) of the step onto rank 0, which writes their
        merge: the numbers of every step in one ``all_gather``, whatever else in a
        ``gather_object`` where a rank has more."""
        dist = torch.distributed
        record = json.loads(record_json)
        mine = _numbers(record, capture is not None)
        rows = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(rows, mine)
        records = [_record(row, record) for row in rows]
        if any(bool(row[-1]) for row in rows):
            sites = None
            if capture is not None and self.rank != 0:
                sites = capture.sites_json(batch_only=self.replicated)
            gathered = [None] * self.world if self.rank == 0 else None
            dist.gather_object((record, sites), gathered, dst=0)
            if self.writer is None:
                return
            records = [r for r, _ in gathered]
            if capture is not None:
                for _, theirs in gathered[1:]:
                    if theirs is not None:
                        capture.merge_json(theirs)
        if self.writer is None:
            return
        self.writer.step(json.dumps(_merge_records(records), allow_nan=False), capture)

    def finish(self, recipe: str, parameters: int, weights_finite: bool, *rest) -> Optional[str]:
        """Finishes the run on rank 0, every weight finite where every rank's shard is."""
        finite = torch.tensor([int(weights_finite)])
        torch.distributed.all_reduce(finite, op=torch.distributed.ReduceOp.MIN)
        self._open = False
        if self.writer is None:
            return None
        return self.writer.finish(recipe, parameters, bool(finite.item()), *rest)

    def create(self) -> None:
        if self.writer is not None:
            self.writer.create()

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def discard(self) -> None:
        self._open = False
        if self.writer is not None:
            self.writer.discard()
