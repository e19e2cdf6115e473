//! The run layer: the run directory every writer and reader of runs shares, below the training
//! core: its schema ([`schema`]), its writer ([`RunWriter`], which also tallies the summary), its
//! reader ([`RunDir`]), the capture records ([`capture`]), the grid directory ([`grid`]) and the
//! plan files ([`plan`]). `train`, `grid`, the PyTorch recorder, `report` and `replay` all go
//! through it; the classes and recipes it records are [`crate::recipe`]'s, and
//! [`crate::export::tensorboard`] exports runs as TensorBoard event files.
//!
//! # The run directory (an interface contract, schema version 1)
//! Other commands (`report`, studies, replay) and other writers (the PyTorch recorder) use this
//! format; it changes only compatibly, with [`schema::SCHEMA`].
//! - `config.json`: `"schema": 1`, then the full resolved [`crate::train::TrainConfig`] (the recipe as an
//!   object). Written atomically before the first step; `mixprec train --config` accepts it, so a
//!   run can be repeated. A `dataset` or `labels` file path is stored as given to `train`: it is
//!   read relative to the current directory, so a repeat runs from the directory the run was
//!   trained in (or gives `--dataset`).
//!   A run recorded outside mixprec (the PyTorch recorder) has a [`RecordedConfig`] instead:
//!   `"source"`, a `recipe` object (the loop's formats and its scaler's loss scaling), `format`,
//!   `capture_every` and the recorder's description of the loop.
//! - `metrics.jsonl`: one [`StepRecord`] per line, in step order: `step`, `loss` (the batch's
//!   mean loss, unscaled; `null` when not finite), `loss_scale` (the scale this step's backward
//!   used), `overflow`, `skipped`, `updates_lost` (share of nonzero updates that changed no master
//!   weight), when some stored value was inf or NaN `first_nonfinite` (`{"layer": "4.linear",
//!   "tensor": "activation_grad"}`), for the GAN `generator_loss`, then the step's accounting:
//!   `grad_amax` (the largest finite magnitude of the gradient values the backward pass formed
//!   in the loop's precision, before rounding into their storage format, divided by the loss
//!   scale: what decides overflow at other scales; `null` when none), `grad_amax_bounded: true`
//!   on a step where an inf or NaN formed in the backward pass hid later gradient values (its
//!   `grad_amax` is then a lower bound: the step overflows at its own scale and above, and is
//!   unknown below where `grad_amax` does not overflow; absent, the common case: exact),
//!   `intermediate_overflow` (the PyTorch recorder, when some were: the autograd nodes, such as
//!   `["PowBackward0"]`, whose backward formula formed an inf or NaN from finite gradients and
//!   again from zero ones, so that the step overflows at every scale) and `counts`, per tensor
//!   class summed
//!   over layers, `{"stored", "underflow", "subnormal", "overflow", "nonfinite"}` (see
//!   [`StoreCounts`](crate::recipe::StoreCounts); classes with no store that step are absent).
//!   With `eval_every` N > 0, the lines of steps N, 2N, ... end with `eval`, the test metric
//!   after that step's update, named
//!   as in the summary: `"eval": {"name": "test_accuracy", "value": 0.93}`. Evaluation changes
//!   nothing in training (it rounds as training does but counts nothing, and leaves the
//!   stochastic-rounding stream and the GAN's noise where they were): the other keys are the same
//!   with and without it, byte for byte.
//! - `captures.jsonl`: one [`CaptureRecord`] per capture step (every `capture_every` steps, and
//!   the first): `{"step", "loss_scale", "sites": [...], "update_ratios": [...]}`. Each site is a
//!   storage point, `{"layer", "tensor", "part"?, "values", "rounding"}`: `values` is the log2
//!   histogram ([`crate::stats::Histogram`], one bin per power of two) of the FP32 values before
//!   rounding (gradients scaled by `loss_scale`), `rounding` the [`crate::format::RoundCounts`]
//!   of rounding them. Tensor classes: `weight`, `activation`, `activation_grad`, `weight_grad`,
//!   `optimizer_state` (one entry per part, named by the site's `part` key: `momentum`, or Adam's
//!   `adam_m`, `adam_v`, `adam_eps` and `adam_denominator`), `update`, `master` (only when the
//!   master format rounds, as in `fp16-pure`: FP32 master weights are exactly the values the
//!   `weight` entry shows before rounding, so they are not captured twice). Layers: `input`,
//!   `"{i}.{kind}"` (`"g.{i}.{kind}"`, `"d.{i}.{kind}"` in the GAN), `loss`. Each
//!   `update_ratios` entry is `{"layer", "ratios"}`, the histogram of `|w| / |update|` over that
//!   layer's nonzero updates.
//! - `shadow.jsonl` (only with `shadow_every` N > 0): on steps 1, N, 2N, ... one [`ShadowRecord`]:
//!   the same step run in FP32 from the same master weights and batch, compared per layer and
//!   gradient class with the run's gradients (divided by the loss scale): `relative_error`,
//!   `cosine`, `zeroed` (share of FP32's nonzero values that are zero in the run) and
//!   `norm_lost` (share of FP32's squared norm in those values). The shadow changes nothing
//!   else: the other logs and the summary are the same bytes with and without it.
//! - `summary.json`: `"schema": 1`, then [`Summary`]; written atomically at the end. Its
//!   `bounded_steps` (present when nonzero) counts the steps marked `grad_amax_bounded`.
//! - `INCOMPLETE`: present from before the first step until the end; a run directory with this
//!   file (or without `summary.json`) was killed, crashed, or is still going.
//!
//! The logs are append-only under their final names. Each line is serialised whole and the
//! lines reach the file at least every 2 seconds, at every capture step and at the end (then
//! synced, with the directory), so a killed run can be read up to its last flushed line; the
//! reader ignores a cut-off last line of an unfinished run. Training into a directory that holds
//! an unfinished run, or anything else, is refused.
//!
//! Runs are deterministic: the same config gives bit-identical `metrics.jsonl`, `captures.jsonl`,
//! `shadow.jsonl` and `summary.json` (except its `wall_seconds`) whatever the number of threads.

pub mod capture;
pub mod grid;
pub mod plan;
mod reader;
pub mod schema;
mod writer;

pub use capture::{CaptureBuilder, class_counts};
pub use reader::{Records, RunDir};
pub use schema::{
    CAPTURE_SUB_BINS_LOG2, CaptureRecord, Coverage, EvalMetric, RecordedConfig, ShadowRecord,
    ShadowSite, SiteCapture, StepRecord, Summary, UpdateRatios,
};
pub use writer::{FLUSH_EVERY, RECENT_STEPS, RunWriter, STUCK_SKIPS};

/// `config.json`.
pub const CONFIG: &str = "config.json";
/// `metrics.jsonl`.
pub const METRICS: &str = "metrics.jsonl";
/// `captures.jsonl`.
pub const CAPTURES: &str = "captures.jsonl";
/// `shadow.jsonl`.
pub const SHADOW: &str = "shadow.jsonl";
/// `summary.json`.
pub const SUMMARY: &str = "summary.json";
/// The marker of an unfinished run.
pub const INCOMPLETE: &str = "INCOMPLETE";
