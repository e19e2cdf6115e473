//! Loss scaling: the loss is multiplied by a scale `S` before backward so that small gradients stay
//! above the storage format's underflow threshold; gradients are checked for inf/NaN and divided by
//! `S` in FP32 before the optimizer; a step whose gradients overflowed is skipped.
//!
//! The dynamic scaler follows PyTorch's `GradScaler` (`_amp_update_scale_cpu_kernel` in
//! `aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp`, the CUDA kernel in `AmpKernels.cu` is the
//! same) and adds the options of Megatron-LM (`DynamicGradScaler.update` in
//! `megatron/core/optimizer/grad_scaler.py`) and DeepSpeed (`DynamicLossScaler.update_scale` in
//! `deepspeed/runtime/fp16/loss_scaler.py`):
//! ```text
//! on inf/NaN:  growth_tracker = 0
//!              hysteresis_left -= 1
//!              if hysteresis_left <= 0:
//!                  if stop_at_min_scale and scale == min_scale: stop the run (DeepSpeed)
//!                  scale = max(scale * backoff_factor, min_scale)
//!              (the step is skipped)
//! otherwise:   growth_tracker += 1
//!              if consecutive_hysteresis: hysteresis_left = hysteresis
//!              if it is time to grow (growth_rule):
//!                  hysteresis_left = hysteresis
//!                  grown = min(scale * growth_factor, max_scale)   (no ceiling when unset)
//!                  if grown is finite: scale = grown             (PyTorch: never grow to inf)
//! time to grow, `tracker` (GradScaler, Megatron):  growth_tracker == growth_interval, and the
//!              tracker restarts from 0
//! time to grow, `since-overflow` (DeepSpeed):  growth_tracker - 1 is a positive multiple of
//!              growth_interval; the tracker counts on (DeepSpeed's `stable_interval`), so the
//!              first growth after an overflow comes at clean step growth_interval + 1
//! ```
//! With `hysteresis = 1`, `min_scale = 0`, no `max_scale` and the `tracker` rule (the defaults)
//! this is exactly GradScaler; [`DynamicScaling::megatron`], [`DynamicScaling::deepspeed`] and
//! [`DynamicScaling::keras`] are the other frameworks' defaults, named on the command line and in
//! configs by [`super::policy`]. The module's tests replay thousands of random overflow
//! sequences through transcriptions of the three frameworks' update functions.
//!
//! Not modelled (DeepSpeed): its `FP16_Optimizer` (no ZeRO) updates the scale *before* unscaling,
//! so on a step where the scale grows the gradients are divided by the new scale (half the
//! gradient for one step, with the default factor 2); mixprec unscales with the scale the backward
//! pass used, as GradScaler and Megatron do. That optimizer also has its own update
//! (`FP16_Optimizer._update_scale` in `deepspeed/runtime/fp16/fused_optimizer.py`) that ignores
//! `hysteresis` and never stops at the minimum: model it with `hysteresis: 1` and
//! `stop_at_min_scale: false`; [`DynamicScaling::deepspeed`] follows `DynamicLossScaler`, which
//! the ZeRO optimizers use. Megatron and
//! DeepSpeed multiply the scale without PyTorch's finite check, so a scale that grew for 128
//! doublings there would become infinite; mixprec keeps it finite for every preset.

use serde::{Deserialize, Serialize};

use crate::error::positive_finite;

/// How the loss is scaled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum LossScaling {
    /// No scaling (`S = 1`); overflowing steps are recorded but not skipped.
    #[default]
    None,
    /// A constant scale; overflowing steps are skipped.
    Static {
        /// The scale `S` (in a config file a number or a string such as `"2^16"`:
        /// [`crate::format::parse_loss_scale`]).
        #[serde(deserialize_with = "crate::format::deserialize_loss_scale")]
        scale: f32,
    },
    /// A scale that backs off on overflow and grows after clean steps.
    Dynamic(DynamicScaling),
}

/// The parameters of dynamic loss scaling (defaults: PyTorch `GradScaler`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamicScaling {
    /// The first scale (2^16; in a config file a number or a string such as `"2^16"`:
    /// [`crate::format::parse_loss_scale`]).
    #[serde(deserialize_with = "crate::format::deserialize_loss_scale")]
    pub init_scale: f32,
    /// Factor applied after `growth_interval` clean steps in a row (2).
    pub growth_factor: f32,
    /// Factor applied on overflow (0.5).
    pub backoff_factor: f32,
    /// Clean steps before growing (2000).
    pub growth_interval: u32,
    /// Overflows tolerated before backing off (1: back off on every overflow).
    pub hysteresis: u32,
    /// Whether a clean step restores the hysteresis budget (DeepSpeed's `consecutive_hysteresis`).
    pub consecutive_hysteresis: bool,
    /// The scale never goes below this (0: no floor).
    pub min_scale: f32,
    /// The scale never goes above this (`None`: no ceiling; JSON has no infinity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_scale: Option<f32>,
    /// When the scale grows (see the module docs).
    pub growth_rule: GrowthRule,
    /// Whether an overflow that would back off a scale already at `min_scale` stops the run with
    /// [`crate::Error::LossScaleAtMinimum`], as DeepSpeed's `DynamicLossScaler` does by default
    /// (`raise_error_at_min_scale`); `false` keeps going at `min_scale`, skipping such steps.
    pub stop_at_min_scale: bool,
}

/// When a dynamic loss scale grows after clean steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GrowthRule {
    /// GradScaler and Megatron-LM: a tracker of clean steps, reset by an overflow and by growth;
    /// the scale grows when it reaches `growth_interval` (at clean steps W, 2W, 3W...).
    #[default]
    Tracker,
    /// DeepSpeed's `DynamicLossScaler`: the scale grows on a clean step when the clean steps before
    /// it since the last overflow (or the start) are a positive multiple of `growth_interval`
    /// (its `scale_window`): at clean steps W + 1, 2W + 1, 3W + 1...
    SinceOverflow,
}

impl Default for DynamicScaling {
    fn default() -> Self {
        DynamicScaling {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
            hysteresis: 1,
            consecutive_hysteresis: false,
            min_scale: 0.0,
            max_scale: None,
            growth_rule: GrowthRule::Tracker,
            stop_at_min_scale: false,
        }
    }
}

impl DynamicScaling {
    /// PyTorch `GradScaler`'s defaults (`torch/amp/grad_scaler.py`): the same as
    /// [`DynamicScaling::default`].
    #[must_use]
    pub fn grad_scaler() -> Self {
        DynamicScaling::default()
    }

    /// Megatron-LM's defaults: `OptimizerConfig` (`megatron/core/optimizer/optimizer_config.py`:
    /// `initial_loss_scale` 2^32, `min_loss_scale` 1, `loss_scale_window` 1000, `hysteresis` 2)
    /// and the factors `megatron/core/optimizer/__init__.py` passes (growth 2, backoff 0.5).
    #[must_use]
    pub fn megatron() -> Self {
        DynamicScaling {
            init_scale: 2f32.powi(32),
            growth_interval: 1000,
            hysteresis: 2,
            min_scale: 1.0,
            ..DynamicScaling::default()
        }
    }

    /// Keras's `LossScaleOptimizer` defaults (`keras/src/optimizers/loss_scale_optimizer.py`:
    /// `initial_scale` 2^15, `dynamic_growth_steps` 2000; the scale doubles when the step
    /// counter reaches `dynamic_growth_steps - 1` before this clean step, i.e. on the 2000th
    /// clean step in a row, and halves on a non-finite step, with no floor): GradScaler's rule
    /// from a lower start. Keras multiplies without a finite check; as for every preset, mixprec
    /// keeps the last finite scale.
    #[must_use]
    pub fn keras() -> Self {
        DynamicScaling {
            init_scale: 32768.0,
            ..DynamicScaling::default()
        }
    }

    /// DeepSpeed's defaults (`deepspeed/runtime/constants.py`: `initial_scale_power` 16,
    /// `loss_scale_window` 1000, `hysteresis` 2, `consecutive_hysteresis` false,
    /// `min_loss_scale` 1; factor 2) with `DynamicLossScaler`'s growth rule and its stop at the
    /// minimum scale (`raise_error_at_min_scale`, true by default).
    #[must_use]
    pub fn deepspeed() -> Self {
        DynamicScaling {
            init_scale: 65536.0,
            growth_interval: 1000,
            hysteresis: 2,
            consecutive_hysteresis: false,
            min_scale: 1.0,
            growth_rule: GrowthRule::SinceOverflow,
            stop_at_min_scale: true,
            ..DynamicScaling::default()
        }
    }
}

impl LossScaling {
    /// Checks the parameters.
    ///
    /// # Errors
    /// [`crate::Error::InvalidValue`] naming the first parameter that is not positive and finite
    /// where it must be, or a growth interval or hysteresis of 0.
    pub fn validate(&self) -> crate::Result<()> {
        let bad = |what: &'static str, value: f32, expected: &'static str| {
            Err(crate::Error::InvalidValue {
                what,
                value: value.to_string(),
                expected,
            })
        };
        match *self {
            LossScaling::None => Ok(()),
            LossScaling::Static { scale } => positive_finite("loss scale", scale),
            LossScaling::Dynamic(d) => {
                positive_finite("init_scale", d.init_scale)?;
                if !(d.growth_factor.is_finite() && d.growth_factor >= 1.0) {
                    return bad("growth_factor", d.growth_factor, "a finite number >= 1");
                }
                if !(d.backoff_factor > 0.0 && d.backoff_factor <= 1.0) {
                    return bad("backoff_factor", d.backoff_factor, "a number in (0, 1]");
                }
                if d.growth_interval == 0 {
                    return bad("growth_interval", 0.0, "at least 1");
                }
                if d.hysteresis == 0 {
                    return bad("hysteresis", 0.0, "at least 1");
                }
                let max = d.max_scale.unwrap_or(f32::INFINITY);
                if max.is_nan() || max <= 0.0 {
                    return bad("max_scale", max, "a positive number");
                }
                if !(d.min_scale >= 0.0 && d.min_scale <= max) {
                    return bad("min_scale", d.min_scale, "a number in [0, max_scale]");
                }
                Ok(())
            }
        }
    }
}

/// The state of a loss scaler during a run.
///
/// ```
/// use mixprec::scaling::scaler::{DynamicScaling, LossScaler, LossScaling};
///
/// let mut s = LossScaler::new(LossScaling::Dynamic(DynamicScaling { growth_interval: 2, ..Default::default() }));
/// assert!(s.update(true)?); // overflow: skip the step, back off
/// assert_eq!(s.scale(), 32768.0);
/// assert!(!s.update(false)?);
/// assert!(!s.update(false)?); // two clean steps: grow
/// assert_eq!(s.scale(), 65536.0);
/// # Ok::<(), mixprec::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LossScaler {
    scaling: LossScaling,
    scale: f32,
    growth_tracker: u32,
    hysteresis_left: u32,
}

impl LossScaler {
    /// A scaler at its initial scale.
    #[must_use]
    pub fn new(scaling: LossScaling) -> Self {
        let (scale, hysteresis) = match scaling {
            LossScaling::None => (1.0, 1),
            LossScaling::Static { scale } => (scale, 1),
            LossScaling::Dynamic(d) => (d.init_scale, d.hysteresis),
        };
        LossScaler {
            scaling,
            scale,
            growth_tracker: 0,
            hysteresis_left: hysteresis,
        }
    }

    /// The scale the next backward pass uses.
    #[must_use]
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Clean steps since the last growth or overflow (with [`GrowthRule::SinceOverflow`]: since
    /// the last overflow).
    #[must_use]
    pub fn growth_tracker(&self) -> u32 {
        self.growth_tracker
    }

    /// Whether an overflowing step is skipped (any loss scaling; without it, non-finite
    /// gradients reach the optimizer).
    #[must_use]
    pub fn skips_on_overflow(&self) -> bool {
        self.scaling != LossScaling::None
    }

    /// Records whether this step's gradients held an inf or NaN, updates the scale, and returns
    /// whether the optimizer step must be skipped (any overflow, unless there is no scaling).
    ///
    /// # Errors
    /// [`crate::Error::LossScaleAtMinimum`] when the gradients overflow at `min_scale` and
    /// [`DynamicScaling::stop_at_min_scale`] is set (the scale is then left as it was).
    pub fn update(&mut self, found_inf: bool) -> crate::Result<bool> {
        match self.scaling {
            LossScaling::None => Ok(false),
            LossScaling::Static { .. } => Ok(found_inf),
            LossScaling::Dynamic(d) => {
                if found_inf {
                    self.growth_tracker = 0;
                    self.hysteresis_left = self.hysteresis_left.saturating_sub(1);
                    if self.hysteresis_left == 0 {
                        if d.stop_at_min_scale && self.scale == d.min_scale {
                            return Err(crate::Error::LossScaleAtMinimum { scale: self.scale });
                        }
                        self.scale = (self.scale * d.backoff_factor).max(d.min_scale);
                    }
                } else {
                    self.growth_tracker = self.growth_tracker.saturating_add(1);
                    if d.consecutive_hysteresis {
                        self.hysteresis_left = d.hysteresis;
                    }
                    let grow = match d.growth_rule {
                        GrowthRule::Tracker => self.growth_tracker == d.growth_interval,
                        GrowthRule::SinceOverflow => {
                            let stable = self.growth_tracker - 1;
                            stable > 0 && stable.is_multiple_of(d.growth_interval)
                        }
                    };
                    if grow {
                        if d.growth_rule == GrowthRule::Tracker {
                            self.growth_tracker = 0;
                        }
                        self.hysteresis_left = d.hysteresis;
                        let grown = (self.scale * d.growth_factor)
                            .min(d.max_scale.unwrap_or(f32::INFINITY));
                        if grown.is_finite() {
                            self.scale = grown;
                        }
                    }
                }
                Ok(found_inf)
            }
        }
    }
}

#[cfg(test)]
mod tests;
