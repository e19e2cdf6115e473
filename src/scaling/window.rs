//! The loss-scale window of a step's gradients: the scales that neither overflow its largest
//! gradient nor let too many of its values underflow, as `analyze` computes it
//! ([`crate::stats::recommend()`]), from what a run directory records.
//!
//! ```text
//! high edge:  from the step's grad_amax (every step): the largest 2^k with grad_amax * 2^k
//!             finite in the format ([`overflows`] for any scale)
//! low edge:   from a capture step's gradient histogram: the smallest 2^k at which at most
//!             MAX_UNDERFLOW of the finite nonzero values underflow
//! ```

use crate::format::{Event, FloatFormat, RoundOptions, Rounder};
use crate::stats::recommend::{StepRule, predicted_min_log2_scale};
use crate::stats::{Histogram, Recommendation, recommend, sweep_from_histogram};

/// The loss scales (log2, of the unscaled gradients) over which windows are searched.
pub const WINDOW_SCALES: std::ops::RangeInclusive<i32> = -24..=48;
/// The largest share of gradient values allowed to underflow at a window's low edge (as
/// `analyze`'s default `--max-underflow`).
pub const MAX_UNDERFLOW: f64 = 0.001;

/// The window of the gradients summarised by `h`, captured scaled by `loss_scale`: the sweep of
/// the captured values over scales `2^(k - log2 S)` is the sweep of the unscaled values over
/// `2^k` (exact when `S` is a power of two, as every scaler's scales are).
#[must_use]
pub fn unscaled_window(h: &Histogram, loss_scale: f64, format: FloatFormat) -> Recommendation {
    let shift = loss_scale.log2().round() as i32;
    let (lo, hi) = (*WINDOW_SCALES.start(), *WINDOW_SCALES.end());
    let (sweep, _) = sweep_from_histogram(h, format, (lo - shift)..=(hi - shift));
    let r = recommend(&sweep, 0, MAX_UNDERFLOW);
    let back = |k: Option<i32>| k.map(|k| k + shift);
    Recommendation {
        log2_scale: back(r.log2_scale),
        min_log2_scale: back(r.min_log2_scale),
        max_log2_scale: back(r.max_log2_scale),
    }
}

/// The predicted lower edge ([`crate::stats::recommend::predicted_min_log2_scale`]) of the
/// weight gradients summarised by `h`, captured scaled by `loss_scale`, under an optimizer that
/// steps by `rule`, in log2 of the scale of the unscaled gradients (searched over
/// [`WINDOW_SCALES`]).
#[must_use]
pub fn unscaled_predicted(
    h: &Histogram,
    loss_scale: f64,
    format: FloatFormat,
    rule: StepRule,
) -> Option<i32> {
    let shift = loss_scale.log2().round() as i32;
    let (lo, hi) = (*WINDOW_SCALES.start(), *WINDOW_SCALES.end());
    let (sweep, _) = sweep_from_histogram(h, format, (lo - shift)..=(hi - shift));
    predicted_min_log2_scale(&sweep, rule).map(|k| k + shift)
}

/// The step rule of the optimizer a run's `config.json` names: `"optimizer": {"kind": "sgd"}`
/// (`mixprec train`) or `"optimizer": "SGD"` (the PyTorch recorder) is [`StepRule::Sgd`];
/// anything else (Adam, AdamW, RMSprop, none named) is [`StepRule::Adaptive`], whose
/// prediction is the more demanding.
#[must_use]
pub fn step_rule(config: &serde_json::Value) -> StepRule {
    let optimizer = &config["optimizer"];
    let kind = optimizer["kind"].as_str().or_else(|| optimizer.as_str());
    if kind.is_some_and(|k| k.eq_ignore_ascii_case("sgd")) {
        StepRule::Sgd
    } else {
        StepRule::Adaptive
    }
}

/// The share of the finite nonzero values summarised by `h` (captured scaled by `loss_scale`)
/// that underflow to zero in `format` when the unscaled values are scaled by `scale` instead.
/// A scale that is not a power of two is taken at the power of two below it (an upper bound:
/// captured histograms have one bin per power of two). `None` when `h` has no finite nonzero
/// value.
#[must_use]
pub fn underflow_share(
    h: &Histogram,
    loss_scale: f64,
    format: FloatFormat,
    scale: f64,
) -> Option<f64> {
    let k = scale.log2().floor() as i32 - loss_scale.log2().round() as i32;
    let (sweep, _) = sweep_from_histogram(h, format, k..=k);
    let n = sweep.finite_nonzero();
    (n > 0).then(|| sweep.row(k).map_or(0, |r| r.underflow) as f64 / n as f64)
}

/// Whether a gradient of magnitude `grad_amax` (unscaled), scaled by `scale` in f32 as training
/// does, rounds (nearest-even) past the largest finite value of `format`.
///
/// ```
/// use mixprec::format::FP16;
/// use mixprec::scaling::window::overflows;
///
/// // 65504 is fp16's max; 65520 is the tie that rounds to infinity.
/// assert!(!overflows(FP16, 65504.0 / 1024.0, 1024.0));
/// assert!(overflows(FP16, 65520.0 / 1024.0, 1024.0));
/// ```
#[must_use]
pub fn overflows(format: FloatFormat, grad_amax: f64, scale: f64) -> bool {
    let stored = (grad_amax * scale) as f32;
    if !stored.is_finite() {
        return true;
    }
    let event = Rounder::new(format, RoundOptions::default())
        .round_at(f64::from(stored), 0)
        .1;
    matches!(event, Event::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FP16, FP32};

    #[test]
    fn overflow_edges() {
        // fp16: values up to 65504 + 15.99 round to 65504.
        assert!(!overflows(FP16, 65519.0, 1.0));
        assert!(overflows(FP16, 65520.0, 1.0));
        assert!(overflows(FP16, 1.0, 65536.0 * 2.0));
        assert!(!overflows(FP32, 1.0, 2f64.powi(127)));
        assert!(overflows(FP32, 2.0, 2f64.powi(127)));
    }

    /// Unscaled values 2^-31 and 1, captured at scale 2^4: in fp16 (underflow below 2^-25) the
    /// first underflows at scales up to 2^5 and is kept from 2^7 on.
    #[test]
    fn underflow_share_at_a_scale() {
        let mut h = Histogram::new(0);
        h.add_f32(&[2f32.powi(-27), 16.0]);
        assert_eq!(underflow_share(&h, 16.0, FP16, 1.0), Some(0.5));
        assert_eq!(underflow_share(&h, 16.0, FP16, 128.0), Some(0.0));
        // 48 is taken as 32: 2^-31 * 2^5 = 2^-26 underflows.
        assert_eq!(underflow_share(&h, 16.0, FP16, 48.0), Some(0.5));
        assert_eq!(underflow_share(&Histogram::new(0), 1.0, FP16, 1.0), None);
    }
}
