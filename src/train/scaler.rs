//! Loss scaling: the loss is multiplied by a scale `S` before backward so that small gradients stay
//! above the storage format's underflow threshold; gradients are checked for inf/NaN and divided by
//! `S` in FP32 before the optimizer; a step whose gradients overflowed is skipped.
//!
//! The dynamic scaler follows PyTorch's `GradScaler` (`_amp_update_scale_`) and adds the options of
//! Megatron-LM and DeepSpeed:
//! ```text
//! on inf/NaN:  growth_tracker = 0
//!              hysteresis_left -= 1
//!              if hysteresis_left <= 0:  scale = max(scale * backoff_factor, min_scale)
//!              (the step is skipped)
//! otherwise:   growth_tracker += 1
//!              if consecutive_hysteresis: hysteresis_left = hysteresis
//!              if growth_tracker == growth_interval:
//!                  growth_tracker = 0; hysteresis_left = hysteresis
//!                  scale = min(scale * growth_factor, max_scale)   (no ceiling when unset)
//! ```
//! With `hysteresis = 1`, `min_scale = 0` and no `max_scale` (the defaults) this is exactly
//! GradScaler.

use serde::{Deserialize, Serialize};

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
            LossScaling::Static { scale } => {
                if scale.is_finite() && scale > 0.0 {
                    Ok(())
                } else {
                    bad("loss scale", scale, "a positive finite number")
                }
            }
            LossScaling::Dynamic(d) => {
                if !(d.init_scale.is_finite() && d.init_scale > 0.0) {
                    return bad("init_scale", d.init_scale, "a positive finite number");
                }
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
/// use mixprec::train::scaler::{DynamicScaling, LossScaler, LossScaling};
///
/// let mut s = LossScaler::new(LossScaling::Dynamic(DynamicScaling { growth_interval: 2, ..Default::default() }));
/// assert!(s.update(true)); // overflow: skip the step, back off
/// assert_eq!(s.scale(), 32768.0);
/// assert!(!s.update(false));
/// assert!(!s.update(false)); // two clean steps: grow
/// assert_eq!(s.scale(), 65536.0);
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

    /// Clean steps since the last growth or overflow.
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
    pub fn update(&mut self, found_inf: bool) -> bool {
        match self.scaling {
            LossScaling::None => false,
            LossScaling::Static { .. } => found_inf,
            LossScaling::Dynamic(d) => {
                if found_inf {
                    self.growth_tracker = 0;
                    self.hysteresis_left = self.hysteresis_left.saturating_sub(1);
                    if self.hysteresis_left == 0 {
                        self.scale = (self.scale * d.backoff_factor).max(d.min_scale);
                    }
                } else {
                    self.growth_tracker += 1;
                    if d.consecutive_hysteresis {
                        self.hysteresis_left = d.hysteresis;
                    }
                    if self.growth_tracker == d.growth_interval {
                        self.growth_tracker = 0;
                        self.hysteresis_left = d.hysteresis;
                        self.scale = (self.scale * d.growth_factor)
                            .min(d.max_scale.unwrap_or(f32::INFINITY));
                    }
                }
                found_inf
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scaling: LossScaling, overflows: &[u32], steps: u32) -> (Vec<f32>, Vec<u32>) {
        let mut s = LossScaler::new(scaling);
        let mut scales = Vec::new();
        let mut skipped = Vec::new();
        for step in 1..=steps {
            if s.update(overflows.contains(&step)) {
                skipped.push(step);
            }
            scales.push(s.scale());
        }
        (scales, skipped)
    }

    /// The issue's trace, measured with PyTorch 2.15's GradScaler.
    #[test]
    fn gradscaler_trace() {
        let scaling = LossScaling::Dynamic(DynamicScaling {
            growth_interval: 5,
            ..DynamicScaling::default()
        });
        let (scales, skipped) = run(scaling, &[3, 4, 17], 30);
        let mut expected = vec![65536.0, 65536.0, 32768.0];
        for (scale, n) in [
            (16384.0, 5),
            (32768.0, 5),
            (65536.0, 3),
            (32768.0, 5),
            (65536.0, 5),
        ] {
            expected.extend(std::iter::repeat_n(scale, n));
        }
        expected.extend(std::iter::repeat_n(131072.0, 4));
        assert_eq!(scales, expected);
        assert_eq!(skipped, vec![3, 4, 17]);
    }

    #[test]
    fn hysteresis_backs_off_only_after_that_many_overflows() {
        let scaling = LossScaling::Dynamic(DynamicScaling {
            hysteresis: 2,
            growth_interval: 100,
            ..DynamicScaling::default()
        });
        // Megatron semantics: the budget is not restored by clean steps, only by growth.
        let (scales, skipped) = run(scaling, &[2, 5, 6], 6);
        assert_eq!(
            scales,
            vec![65536.0, 65536.0, 65536.0, 65536.0, 32768.0, 16384.0]
        );
        assert_eq!(skipped, vec![2, 5, 6]);
        let consecutive = LossScaling::Dynamic(DynamicScaling {
            hysteresis: 2,
            consecutive_hysteresis: true,
            growth_interval: 100,
            ..DynamicScaling::default()
        });
        let (scales, _) = run(consecutive, &[2, 5, 6], 6);
        assert_eq!(
            scales,
            vec![65536.0, 65536.0, 65536.0, 65536.0, 65536.0, 32768.0]
        );
    }

    #[test]
    fn min_and_max_scale_clamp() {
        let scaling = LossScaling::Dynamic(DynamicScaling {
            init_scale: 4.0,
            growth_interval: 1,
            min_scale: 2.0,
            max_scale: Some(16.0),
            ..DynamicScaling::default()
        });
        let (scales, _) = run(scaling, &[1, 2, 3], 8);
        assert_eq!(scales, vec![2.0, 2.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0]);
    }

    #[test]
    fn static_and_none() {
        let (scales, skipped) = run(LossScaling::Static { scale: 128.0 }, &[2], 3);
        assert_eq!(scales, vec![128.0; 3]);
        assert_eq!(skipped, vec![2]);
        let (scales, skipped) = run(LossScaling::None, &[2], 3);
        assert_eq!(scales, vec![1.0; 3]);
        assert!(skipped.is_empty());
    }

    #[test]
    fn validation_names_the_bad_parameter() {
        assert!(LossScaling::Static { scale: 0.0 }.validate().is_err());
        let bad = LossScaling::Dynamic(DynamicScaling {
            backoff_factor: 2.0,
            ..DynamicScaling::default()
        });
        let msg = bad.validate().unwrap_err().to_string();
        assert!(msg.contains("backoff_factor"), "{msg}");
        assert!(
            LossScaling::Dynamic(DynamicScaling::default())
                .validate()
                .is_ok()
        );
        let json = serde_json::to_string(&LossScaling::Dynamic(DynamicScaling::default())).unwrap();
        assert!(json.contains("\"kind\":\"dynamic\""), "{json}");
        let back: LossScaling = serde_json::from_str(&json).unwrap();
        assert_eq!(back, LossScaling::Dynamic(DynamicScaling::default()));
        let partial: LossScaling =
            serde_json::from_str(r#"{"kind":"dynamic","growth_interval":5}"#).unwrap();
        assert!(matches!(partial, LossScaling::Dynamic(d) if d.growth_interval == 5));
    }
}
