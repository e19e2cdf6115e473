//! One tensor's delayed scaling state for 8-bit formats: Transformer Engine's `amax_history`
//! row and `scale` ([`Fp8Scaling`]). The training core keeps one per tensor it casts, and so
//! does the PyTorch simulator (through the Python binding): one definition of the rule.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Per-tensor delayed scaling for 8-bit formats: Transformer Engine's `DelayedScaling` recipe
/// (`transformer_engine/common/recipe/__init__.py`), with its defaults.
///
/// Before a tensor is rounded into a format of at most 8 bits it is multiplied by its scale,
/// rounded, and divided by the scale again (the dequantised value is what later operations see):
/// ```text
/// scale = fp8_max * 2^-margin / amax       amax = max (or most recent) of the tensor's amax
///                                          history: one entry per step, the largest |x| of
///                                          all its casts in that step
/// ```
/// The scale is computed when a step ends, from that step and the `amax_history_len - 1`
/// before it, and used by the next step: a tensor's first step uses scale 1. A step whose amax is
/// 0 changes nothing; a non-finite amax keeps the previous scale; an amax so small that the
/// scale would be infinite in f32 gives `f32::MAX` (TE's `delayed_scaling.cu`; the details are
/// in [`DelayedScale::end_step`]). Each tensor (each parameter, each operand of each layer)
/// has its own scale and history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Fp8Scaling {
    /// Steps of amax history (TE's `amax_history_len`, 1024; `history` is accepted too).
    #[serde(alias = "history")]
    pub amax_history_len: usize,
    /// Headroom in powers of two (TE's `margin`, 0).
    pub margin: i32,
    /// Which amax of the history sets the scale (TE's `amax_compute_algo`, `max`).
    pub amax_compute_algo: AmaxComputeAlgo,
}

impl Default for Fp8Scaling {
    fn default() -> Self {
        Fp8Scaling {
            amax_history_len: 1024,
            margin: 0,
            amax_compute_algo: AmaxComputeAlgo::Max,
        }
    }
}

/// Which amax of a tensor's history sets its fp8 scale (TE's `amax_compute_algo`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AmaxComputeAlgo {
    /// The largest amax in the history window.
    #[default]
    Max,
    /// The amax of the step that just ended.
    MostRecent,
}

/// A tensor's fp8 scale, the history it is computed from, and the largest `|x|` seen this step.
#[derive(Clone, Debug, PartialEq)]
pub struct DelayedScale {
    fp8_max: f32,
    scale: f32,
    history: VecDeque<f32>,
    /// The largest |x| cast this step (0 before the first cast).
    step_amax: f32,
}

impl DelayedScale {
    /// The state of a tensor cast into a format whose largest value is `fp8_max`: scale 1 and
    /// no history, as Transformer Engine starts.
    #[must_use]
    pub fn new(fp8_max: f32) -> Self {
        DelayedScale {
            fp8_max,
            scale: 1.0,
            history: VecDeque::new(),
            step_amax: 0.0,
        }
    }

    /// The scale this step's casts multiply by (`round(x * scale) / scale`).
    #[must_use]
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The step amaxes the scale was computed from, oldest first.
    pub fn history(&self) -> impl Iterator<Item = f32> + '_ {
        self.history.iter().copied()
    }

    /// A cast of this step saw values up to `amax` in magnitude (NaN ignored, as CUDA's
    /// `fmaxf`).
    pub fn observe(&mut self, amax: f32) {
        self.step_amax = self.step_amax.max(amax);
    }

    /// Ends a step: the step's amax (the largest over its casts) enters the history and the
    /// scale is recomputed, as Transformer Engine's `amax_and_scale_update` does after each
    /// step (`kernel_bulk` in `transformer_engine/common/recipe/delayed_scaling.cu`, which
    /// PyTorch's `fused_amax_and_scale_update_after_reduction` runs):
    /// ```text
    /// a = the step's amax
    /// if a == 0: nothing changes (no roll, the scale stays)
    /// else:      history = last amax_history_len step amaxes, a included
    ///            amax = max(history) (NaN ignored) | a  (max | most_recent)
    ///            scale = fp8_max * 2^-margin / amax  if amax is finite and > 0
    ///                    the previous scale          otherwise (inf: the scale stays)
    ///            scale = f32::MAX                    if that is infinite (amax < ~1e-36)
    /// ```
    pub fn end_step(&mut self, scaling: &Fp8Scaling) {
        let last = std::mem::take(&mut self.step_amax);
        if last == 0.0 {
            return;
        }
        self.history.push_back(last);
        while self.history.len() > scaling.amax_history_len.max(1) {
            self.history.pop_front();
        }
        let amax = match scaling.amax_compute_algo {
            AmaxComputeAlgo::Max => self.history.iter().fold(0.0f32, |m, &a| m.max(a)),
            AmaxComputeAlgo::MostRecent => last,
        };
        let scaled_max = self.fp8_max * 2f32.powi(-scaling.margin);
        if amax.is_finite() && amax > 0.0 {
            self.scale = scaled_max / amax;
        }
        if self.scale.is_infinite() {
            self.scale = f32::MAX;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scaling(len: usize, algo: AmaxComputeAlgo) -> Fp8Scaling {
        Fp8Scaling {
            amax_history_len: len,
            margin: 0,
            amax_compute_algo: algo,
        }
    }

    #[test]
    fn follows_transformer_engines_update() {
        let s = scaling(2, AmaxComputeAlgo::Max);
        let mut d = DelayedScale::new(448.0);
        assert_eq!(d.scale(), 1.0);
        d.end_step(&s); // nothing seen: nothing changes
        assert_eq!((d.scale(), d.history().count()), (1.0, 0));
        d.observe(2.0);
        d.observe(f32::NAN);
        d.observe(4.0);
        d.end_step(&s);
        assert_eq!(d.scale(), 112.0);
        d.observe(1.0);
        d.end_step(&s); // max of [4, 1]
        assert_eq!(d.scale(), 112.0);
        d.observe(1.0);
        d.end_step(&s); // max of [1, 1]: the 4 left the window
        assert_eq!(d.scale(), 448.0);
        assert_eq!(d.history().collect::<Vec<_>>(), [1.0, 1.0]);
        d.observe(f32::INFINITY);
        d.end_step(&s); // an infinite amax keeps the scale
        assert_eq!(d.scale(), 448.0);
        let mut tiny = DelayedScale::new(448.0);
        tiny.observe(1e-40);
        tiny.end_step(&scaling(1, AmaxComputeAlgo::MostRecent));
        assert_eq!(tiny.scale(), f32::MAX);
        let mut margin = DelayedScale::new(448.0);
        margin.observe(7.0);
        margin.end_step(&Fp8Scaling { margin: 1, ..s });
        assert_eq!(margin.scale(), 32.0);
    }
}
