//! The open-loop replay of loss-scaling policies over a recorded run: each policy's scaler is
//! stepped through the run's recorded gradients, deciding at every step from the step's
//! `grad_amax` whether the gradients would have overflowed at the policy's scale.
//!
//! Open loop: the later gradients are the recorded run's, whatever the policy would have done
//! (a skipped step, or a scale under which more gradients underflow, would have changed the
//! training that followed). Where it must be exact it is: replaying the policy the run used gives
//! the run's scales and skipped steps, step for step ([`PolicyReplay::matches_run`]).
//!
//! One departure from the recorded trajectory is known exactly: a policy that has skipped every
//! step so far still holds the initial weights. Once the recorded run has taken a step, its
//! gradients are no longer those of the initial weights, so such a policy is judged instead by
//! the recorded steps taken at the initial weights (every step up to and including the run's
//! first update: the same weights, other batches). A static scale that overflows from the start
//! never trains, and its reruns skip every step even where the trained run's gradients would
//! have fitted.
//!
//! ```text
//! overflow at scale S  =  grad_amax * S rounds past the format's max          (overflows)
//!                         or the run recorded inf/NaN that grad_amax does not explain (a NaN
//!                         from the forward pass, a product that overflowed f32): at every scale
//! a bounded step       =  grad_amax is a lower bound (grad_amax_bounded: an inf or NaN hid
//!                         values): overflow where grad_amax * S overflows, or S >= the recorded
//!                         scale that overflowed (same format); fits at the recorded scale when
//!                         it did not overflow; anywhere else undecided: counted, and stepped as
//!                         if it fit (what the values known say)
//! initial weights      =  a policy whose every step so far was skipped, after the run's first
//!                         update: the verdict of the run's steps at the initial weights where
//!                         those that decide agree, else undecided; a policy that went on past an
//!                         undecided step holds either: undecided where the two verdicts differ
//! skipped              =  overflow, under any loss scaling (the scaler's own rule)
//! above the window     =  grad_amax * S overflows
//! below the window     =  S < 2^k_min, k_min the low edge from the last capture step's
//!                         gradients (window::unscaled_window)
//! underflow at S       =  at capture steps, the share of the gradient values that underflow
//!                         at S (window::underflow_share)
//! ```

use serde::Serialize;

use super::scaler::{LossScaler, LossScaling};
use super::window::{overflows, underflow_share, unscaled_window};
use crate::format::FloatFormat;
use crate::stats::Histogram;
use crate::stats::recommend::overflow_log2_scale;

/// What replay says of itself, in every output.
pub const OPEN_LOOP: &str = "Open-loop replay: every policy sees the recorded run's gradients at every step, as if its own skipped steps and scales had not changed the training that followed (but a policy that has skipped every step so far, whose weights are still the initial ones, is judged by the run's steps at the initial weights); only the policy the run used is exact.";

/// Steps listed per kind of event; the counts are always whole.
pub const MAX_EVENTS: usize = 2000;

/// How gradients overflow in a format: by magnitude, or (saturating stores, fp8 with
/// per-tensor scaling) never by the loss scale.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct OverflowModel {
    /// The gradients' format.
    pub format: FloatFormat,
    /// Whether `grad_amax * S` past the format's max is an overflow (false when stores
    /// saturate, or per-tensor scaling keeps every tensor in range).
    pub by_magnitude: bool,
}

impl OverflowModel {
    fn overflows(&self, grad_amax: Option<f64>, scale: f64) -> bool {
        self.by_magnitude && grad_amax.is_some_and(|a| overflows(self.format, a, scale))
    }
}

/// One step of the recorded run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RecordedStep {
    /// The step.
    pub step: u64,
    /// The scale its backward pass used.
    pub loss_scale: f64,
    /// Whether a gradient held inf or NaN.
    pub overflow: bool,
    /// Whether its update was skipped.
    pub skipped: bool,
    /// Its largest finite gradient magnitude, unscaled.
    pub grad_amax: Option<f64>,
    /// Whether `grad_amax` is only a lower bound (an inf or NaN hid later values).
    pub grad_amax_bounded: bool,
}

/// What a recorded step says of overflow at another scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It overflows.
    Overflow,
    /// It does not.
    Fits,
    /// A bounded step at a scale its bound does not decide.
    Undecided,
}

/// What step `r`, recorded with gradients that overflow as `run` says, says of overflow at
/// `scale` in `judged`; and whether that is an inf or NaN that its largest gradient does not
/// explain (an overflow at every scale).
#[must_use]
pub fn verdict(
    run: OverflowModel,
    judged: OverflowModel,
    r: &RecordedStep,
    scale: f64,
) -> (Verdict, bool) {
    if !r.grad_amax_bounded && r.overflow && !run.overflows(r.grad_amax, r.loss_scale) {
        return (Verdict::Overflow, true);
    }
    if judged.overflows(r.grad_amax, scale) {
        return (Verdict::Overflow, false);
    }
    if !r.grad_amax_bounded {
        return (Verdict::Fits, false);
    }
    // The recorded outcome says something of the run's own format only.
    let verdict = match (judged == run, r.overflow) {
        (true, true) if scale >= r.loss_scale => Verdict::Overflow,
        (true, false) if scale == r.loss_scale => Verdict::Fits,
        _ => Verdict::Undecided,
    };
    (verdict, false)
}

/// What the recorded steps `initial`, all taken at the initial weights, say of overflow at
/// `scale` for weights that are still the initial ones: the [`verdict`] of those that decide,
/// where they agree (an overflow at every scale only where each is), else undecided.
#[must_use]
pub fn initial_verdict(
    run: OverflowModel,
    judged: OverflowModel,
    initial: &[RecordedStep],
    scale: f64,
) -> (Verdict, bool) {
    let mut decided = initial
        .iter()
        .map(|r| verdict(run, judged, r, scale))
        .filter(|(v, _)| *v != Verdict::Undecided);
    let Some(first) = decided.next() else {
        return (Verdict::Undecided, false);
    };
    decided
        .try_fold(first, |(v, every), (w, e)| {
            (v == w).then_some((v, every && e))
        })
        .unwrap_or((Verdict::Undecided, false))
}

/// What a policy knows of its weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Weights {
    /// Still the initial ones: every step so far was skipped.
    Initial,
    /// Updated.
    Moved,
    /// Either: it went on past an undecided step while it held the initial weights.
    Unknown,
}

/// The largest log2 scale known not to overflow a step whose largest gradient is `grad_amax`
/// in `format` (from its first scale that overflows, [`overflow_log2_scale`]), below
/// `overflowed_at` when the step is bounded and overflowed there: for a bounded step an upper
/// bound of its window's high edge. `None` when neither says anything.
#[must_use]
pub fn high_edge(
    format: FloatFormat,
    grad_amax: Option<f64>,
    overflowed_at: Option<f64>,
) -> Option<i32> {
    let from_amax = grad_amax.and_then(|a| overflow_log2_scale(format, a).map(|k| k - 1));
    // The largest power of two below the scale that overflowed.
    let from_scale = overflowed_at
        .filter(|s| *s > 0.0 && s.is_finite())
        .map(|s| s.log2().ceil() as i32 - 1);
    match (from_amax, from_scale) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Steps on which something happened: all counted, the first [`MAX_EVENTS`] listed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Events {
    /// How many.
    pub count: u64,
    /// The first steps.
    pub steps: Vec<u64>,
}

impl Events {
    /// Counts `step`, and lists it while fewer than [`MAX_EVENTS`] are.
    pub fn add(&mut self, step: u64) {
        self.count += 1;
        if self.steps.len() < MAX_EVENTS {
            self.steps.push(step);
        }
    }
}

/// The window at one capture step, in log2 of the unscaled scale.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CaptureWindow {
    /// The step.
    pub step: u64,
    /// The smallest `k` at which at most [`super::window::MAX_UNDERFLOW`] of the gradient values
    /// underflow.
    pub min_log2_scale: Option<i32>,
    /// The largest `k` that keeps the step's largest gradient finite (from `grad_amax`).
    pub max_log2_scale: Option<i32>,
}

/// A policy's share of underflowing gradient values at one capture step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Underflow {
    /// The capture step.
    pub step: u64,
    /// The policy's scale there.
    pub scale: f64,
    /// The share of the finite nonzero gradient values that underflow at that scale.
    pub share: f64,
}

/// One policy, replayed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyReplay {
    /// Its name ([`LossScaling`]'s `Display`; `run (...)` for the run's own).
    pub policy: String,
    /// The scale trajectory: `(step, scale)` where the scale the step used differs from the
    /// step before's (the first step always), so the scale of step `t` is that of the last entry
    /// at or before `t`.
    pub scale_changes: Vec<(u64, f64)>,
    /// Steps whose gradients overflow at its scale.
    pub overflow: Events,
    /// Steps it skips.
    pub skipped: Events,
    /// Steps whose scale overflows the step's largest gradient.
    pub above_window: Events,
    /// Steps whose scale is below the window's low edge (from the last capture step).
    pub below_window: Events,
    /// Steps whose overflow at its scale the record does not decide (stepped as if they fit): a
    /// bounded step's bound, or, for a policy that may still hold the initial weights, the run's
    /// steps at the initial weights and the step's own record disagree.
    pub undecided: Events,
    /// At each capture step, the share of gradient values that underflow at its scale.
    pub underflow: Vec<Underflow>,
    /// The step where it stopped the run (an overflow at the minimum scale, DeepSpeed), if it did.
    pub stopped_at: Option<u64>,
    /// Whether its scale and skip decision equal the recorded run's at every step.
    pub matches_run: bool,
}

impl PolicyReplay {
    /// The scale step `step` used (`None` before the first step or after a stop).
    #[must_use]
    pub fn scale_at(&self, step: u64) -> Option<f64> {
        if self.stopped_at.is_some_and(|s| step > s) {
            return None;
        }
        self.scale_changes
            .iter()
            .take_while(|(s, _)| *s <= step)
            .last()
            .map(|&(_, scale)| scale)
    }

    /// The mean share of underflowing gradient values over the capture steps (`None` without
    /// captures).
    #[must_use]
    pub fn mean_underflow(&self) -> Option<f64> {
        let n = self.underflow.len();
        (n > 0).then(|| self.underflow.iter().map(|u| u.share).sum::<f64>() / n as f64)
    }
}

/// The replay of several policies over one run.
#[derive(Clone, Debug, Serialize)]
pub struct Replay {
    /// [`OPEN_LOOP`].
    pub open_loop: &'static str,
    /// The format gradients are judged against.
    pub judged: OverflowModel,
    /// Steps replayed.
    pub steps: u64,
    /// Recorded overflow steps that `grad_amax` does not explain in the run's own format: an
    /// overflow at every scale.
    pub unexplained_overflows: u64,
    /// Steps whose `grad_amax` is only a lower bound ([`RecordedStep::grad_amax_bounded`]).
    pub bounded_steps: u64,
    /// The window at each capture step.
    pub captures: Vec<CaptureWindow>,
    /// The policies, in the order given.
    pub policies: Vec<PolicyReplay>,
    /// Per step, the window `(step, low edge, high edge)` in log2 of the scale (for figures).
    #[serde(skip)]
    pub window: Vec<(u64, Option<i32>, Option<i32>)>,
}

/// Replays policies step by step: [`Replayer::capture`] each capture step's gradients before
/// the step itself, then [`Replayer::step`] every step in order, then [`Replayer::finish`].
pub struct Replayer {
    run: OverflowModel,
    replay: Replay,
    scalers: Vec<Option<LossScaler>>,
    /// Per policy, what it knows of its weights.
    weights: Vec<Weights>,
    /// The recorded steps taken at the initial weights (up to and including the run's first
    /// update).
    initial: Vec<RecordedStep>,
    /// Whether the recorded run has updated its weights (at an earlier step).
    run_moved: bool,
    /// The last capture: (step, its loss scale, pooled gradients, low edge).
    capture: Option<(u64, f64, Histogram, Option<i32>)>,
}

impl Replayer {
    /// Replays `policies` (each with its name) over a run whose gradients overflowed as `run`
    /// says, judging them against `judged`.
    #[must_use]
    pub fn new(
        policies: &[(String, LossScaling)],
        run: OverflowModel,
        judged: OverflowModel,
    ) -> Replayer {
        Replayer {
            run,
            replay: Replay {
                open_loop: OPEN_LOOP,
                judged,
                steps: 0,
                unexplained_overflows: 0,
                bounded_steps: 0,
                captures: Vec::new(),
                policies: policies
                    .iter()
                    .map(|(name, _)| PolicyReplay {
                        policy: name.clone(),
                        scale_changes: Vec::new(),
                        overflow: Events::default(),
                        skipped: Events::default(),
                        above_window: Events::default(),
                        below_window: Events::default(),
                        undecided: Events::default(),
                        underflow: Vec::new(),
                        stopped_at: None,
                        matches_run: true,
                    })
                    .collect(),
                window: Vec::new(),
            },
            scalers: policies
                .iter()
                .map(|(_, p)| Some(LossScaler::new(*p)))
                .collect(),
            weights: vec![Weights::Initial; policies.len()],
            initial: Vec::new(),
            run_moved: false,
            capture: None,
        }
    }

    /// The gradients (pooled, as stored) of capture step `step`, taken at `loss_scale`.
    pub fn capture(&mut self, step: u64, loss_scale: f64, gradients: Histogram) {
        let low = unscaled_window(&gradients, loss_scale, self.replay.judged.format).min_log2_scale;
        self.capture = Some((step, loss_scale, gradients, low));
    }

    /// The next recorded step.
    pub fn step(&mut self, r: &RecordedStep) {
        let judged = self.replay.judged;
        self.replay.steps += 1;
        let run = self.run;
        let (_, unexplained) = verdict(run, judged, r, r.loss_scale);
        self.replay.unexplained_overflows += u64::from(unexplained);
        self.replay.bounded_steps += u64::from(r.grad_amax_bounded);
        let captured = self.capture.as_ref().filter(|c| c.0 == r.step);
        let low = self.capture.as_ref().and_then(|c| c.3);
        let overflowed_at =
            (r.grad_amax_bounded && r.overflow && judged == run).then_some(r.loss_scale);
        let high = if judged.by_magnitude {
            high_edge(judged.format, r.grad_amax, overflowed_at)
        } else {
            None
        };
        self.replay.window.push((r.step, low, high));
        if let Some(c) = captured {
            self.replay.captures.push(CaptureWindow {
                step: r.step,
                min_log2_scale: c.3,
                max_log2_scale: high,
            });
        }
        if !self.run_moved {
            self.initial.push(*r);
        }
        let policies = self.replay.policies.iter_mut().zip(&mut self.scalers);
        for ((p, scaler), weights) in policies.zip(&mut self.weights) {
            let Some(s) = scaler else { continue };
            let scale = f64::from(s.scale());
            if p.scale_changes
                .last()
                .is_none_or(|&(_, last)| last != scale)
            {
                p.scale_changes.push((r.step, scale));
            }
            let own = verdict(run, judged, r, scale);
            // While the run holds its initial weights, its record is exact for a policy that
            // does too; after its first update, not for one that still holds them.
            let (v, every_scale) = match (*weights, self.run_moved) {
                (Weights::Moved, _) | (_, false) => own,
                (Weights::Initial, true) => initial_verdict(run, judged, &self.initial, scale),
                (Weights::Unknown, true) => {
                    let held = initial_verdict(run, judged, &self.initial, scale);
                    if held.0 == own.0 {
                        own
                    } else {
                        (Verdict::Undecided, false)
                    }
                }
            };
            let overflow = v == Verdict::Overflow;
            if overflow && !every_scale {
                p.above_window.add(r.step);
            }
            if v == Verdict::Undecided {
                p.undecided.add(r.step);
            }
            if low.is_some_and(|k| scale.log2() < f64::from(k)) {
                p.below_window.add(r.step);
            }
            if overflow {
                p.overflow.add(r.step);
            }
            if let Some((_, at, h, _)) = captured
                && let Some(share) = underflow_share(h, *at, judged.format, scale)
            {
                p.underflow.push(Underflow {
                    step: r.step,
                    scale,
                    share,
                });
            }
            match s.update(overflow) {
                Ok(skipped) => {
                    if skipped {
                        p.skipped.add(r.step);
                    } else if v == Verdict::Undecided && *weights == Weights::Initial {
                        *weights = Weights::Unknown;
                    } else if v != Verdict::Undecided {
                        *weights = Weights::Moved;
                    }
                    p.matches_run &= scale == r.loss_scale && skipped == r.skipped;
                }
                Err(_) => {
                    p.stopped_at = Some(r.step);
                    p.matches_run = false;
                    *scaler = None;
                }
            }
        }
        self.run_moved |= !r.skipped;
    }

    /// The replay.
    #[must_use]
    pub fn finish(self) -> Replay {
        self.replay
    }
}

#[cfg(test)]
mod tests;
