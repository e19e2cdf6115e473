//! What a run records: per step the loss, loss scale, overflow and skip flags and the first
//! storage point that held an inf or NaN; on capture steps, per layer and tensor class, a summary
//! of the values before rounding and the counts of what rounding did; per layer, how many updates
//! were lost to the master weights' format (swamping).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::precision::{Class, Site};
use super::real::Real;

/// One training step, as written to `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 1-based step number.
    pub step: u64,
    /// The mean loss of the batch, unscaled.
    pub loss: f64,
    /// The loss scale this step's backward pass used.
    pub loss_scale: f64,
    /// Whether a weight gradient held an inf or NaN.
    pub overflow: bool,
    /// Whether the optimizer step was skipped (overflow under loss scaling).
    pub skipped: bool,
    /// On overflow, the first storage point where an inf or NaN was stored.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub first_nonfinite: Option<Site>,
    /// Updates that changed no master weight, over nonzero updates, this step.
    pub updates_lost: f64,
}

/// Summary of the values a storage point saw before rounding, over a capture step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TensorSummary {
    /// Values seen.
    pub count: u64,
    /// Exact zeros.
    pub zeros: u64,
    /// Infs and NaNs.
    pub nonfinite: u64,
    /// Largest finite magnitude (0 when none).
    pub max_abs: f64,
    /// Smallest nonzero finite magnitude (0 when none).
    pub min_abs: f64,
}

impl TensorSummary {
    fn add<T: Real>(&mut self, xs: &[T]) {
        self.count += xs.len() as u64;
        for &x in xs {
            let a = x.abs().to_f64();
            if a == 0.0 {
                self.zeros += 1;
            } else if !a.is_finite() {
                self.nonfinite += 1;
            } else {
                self.max_abs = self.max_abs.max(a);
                if self.min_abs == 0.0 || a < self.min_abs {
                    self.min_abs = a;
                }
            }
        }
    }
}

/// Sees every stored tensor before rounding on capture steps (installed in
/// [`super::precision::Precision`] for those steps only).
#[derive(Clone, Debug, Default)]
pub struct Observer {
    /// Per (layer index, class).
    pub summaries: BTreeMap<(usize, Class), TensorSummary>,
}

impl Observer {
    /// Adds `xs`, stored as `class` by layer `layer`.
    pub fn observe<T: Real>(&mut self, layer: usize, class: Class, xs: &[T]) {
        self.summaries.entry((layer, class)).or_default().add(xs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_counts_zeros_nonfinite_and_range() {
        let mut o = Observer::default();
        o.observe(
            0,
            Class::Activation,
            &[0.0f32, 1e-3, -4.0, f32::NAN, f32::INFINITY],
        );
        o.observe(0, Class::Activation, &[2.0f32]);
        let s = o.summaries[&(0, Class::Activation)];
        assert_eq!((s.count, s.zeros, s.nonfinite), (6, 1, 2));
        assert_eq!(s.max_abs, 4.0);
        assert_eq!(s.min_abs, f64::from(1e-3f32));
    }

    #[test]
    fn step_record_json_has_the_contract_keys() {
        let r = StepRecord {
            step: 3,
            loss: 0.5,
            loss_scale: 65536.0,
            overflow: true,
            skipped: true,
            first_nonfinite: Some(Site {
                layer: "2.linear".into(),
                tensor: Class::ActivationGrad,
            }),
            updates_lost: 0.0,
        };
        let v: serde_json::Value = serde_json::to_value(&r).unwrap();
        for key in [
            "step",
            "loss",
            "loss_scale",
            "overflow",
            "skipped",
            "first_nonfinite",
        ] {
            assert!(v.get(key).is_some(), "{key} missing in {v}");
        }
        assert_eq!(v["first_nonfinite"]["tensor"], "activation_grad");
    }
}
