//! What a dump's values say about the step they came from, before any loss scale is weighed:
//! whether it overflowed (any inf or NaN), and whether far more values are exact zeros than in
//! an FP32 dump.

use serde::{Deserialize, Serialize};

use super::{TensorAnalysis, ValueSummary};

/// The largest share of a dump's values that may be exactly zero before [`DumpCheck::many_zeros`]
/// says so: above every FP32 dump measured (docs/src/analyze.md, "Many zeros"): 0.006-0.014% of
/// the example transformer's weight gradients (`examples/pytorch_recorder.py`, autocast off) at
/// every step measured, 6.0% of `examples/gradients.rs`'s file, and 16-19% of the built-in MLP's weight
/// gradients on the digits (blank pixels give exact zeros in FP32 too); the same transformer's
/// step under fp16 autocast with its loss 2^-12 as large held 72% zeros.
pub const TYPICAL_MAX_ZERO_SHARE: f64 = 0.2;

/// What the values say about the step they were dumped from, before any loss scale is weighed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DumpCheck {
    /// The share of all values that are inf or NaN.
    pub nonfinite_share: f64,
    /// Whether any value is inf or NaN: the step's gradients overflowed (a GradScaler skips such
    /// a step), so the finite values are what survived and their amax understates the step's.
    /// The recommendation then backs off ([`super::Advice::log2_scale`]).
    pub overflowed: bool,
    /// The tensors (labelled as in [`TensorAnalysis::label`]) that hold no finite value.
    pub no_finite_tensors: Vec<String>,
    /// The share of all values that are exactly zero.
    pub zero_share: f64,
    /// Whether that share is above [`TYPICAL_MAX_ZERO_SHARE`]: under fp16 autocast the backward
    /// pass may already have flushed small gradients to zero, which no scale here brings back
    /// (the sweep's shares are of the nonzero values).
    pub many_zeros: bool,
}

impl DumpCheck {
    pub(super) fn of(tensors: &[TensorAnalysis], all: &ValueSummary, several: bool) -> DumpCheck {
        let share = |c: u64| {
            if all.count == 0 {
                0.0
            } else {
                c as f64 / all.count as f64
            }
        };
        DumpCheck {
            nonfinite_share: share(all.nonfinite),
            overflowed: all.nonfinite > 0,
            no_finite_tensors: tensors
                .iter()
                .filter(|t| t.values.count > 0 && t.values.amax.is_none())
                .map(|t| t.label(several))
                .collect(),
            zero_share: share(all.zeros),
            many_zeros: share(all.zeros) > TYPICAL_MAX_ZERO_SHARE,
        }
    }
}
