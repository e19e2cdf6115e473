//! The plan directory (issue 43): which layers of a model may run a narrow recipe, measured and
//! checked by re-training. Written by `mixprec plan` for the built-in models and by the PyTorch
//! side for any model; read by `mixprec report DIR`. Plain data, so that a reader needs nothing
//! of the training core.
//!
//! ```text
//! DIR/sensitivity.json      each product-forming layer cast alone, against FP32 (Sensitivity)
//! DIR/plan.json             the greedy plan under a budget (Plan)
//! DIR/plan-recipe.json      the plan as a recipe: the cast recipe with a keep of the kept layers
//! DIR/validation.json       the re-training runs (Validation), after validation
//! DIR/runs/<arm>-seed<k>/   ordinary run directories
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

/// `sensitivity.json`.
pub const SENSITIVITY: &str = "sensitivity.json";
/// `plan.json`.
pub const PLAN: &str = "plan.json";
/// `plan-recipe.json`.
pub const PLAN_RECIPE: &str = "plan-recipe.json";
/// `validation.json`.
pub const VALIDATION: &str = "validation.json";

/// What casting some layers does to one forward and backward pass, against FP32 on the same
/// weights and batches, averaged over the batches. A measurement that was not finite (a cast
/// that made the gradients infinite) is written `null`, as JSON has no NaN, and read as NaN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Harm {
    /// `||g_cast - g_ref|| / ||g_ref||` over all the model's weight gradients.
    #[serde(deserialize_with = "nan_if_null")]
    pub grad_rel_err: f64,
    /// `cos(g_cast, g_ref)` over all the model's weight gradients.
    #[serde(deserialize_with = "nan_if_null")]
    pub grad_cosine: f64,
    /// `|loss_cast - loss_ref| / |loss_ref|`.
    #[serde(deserialize_with = "nan_if_null")]
    pub loss_change: f64,
    /// The share of the cast operand values (nonzero before) that became zero.
    #[serde(deserialize_with = "nan_if_null")]
    pub underflow: f64,
    /// The share of the cast operand values clamped to the format's largest value (or made
    /// infinite).
    #[serde(deserialize_with = "nan_if_null")]
    pub saturate: f64,
}

/// One product-forming layer cast alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerHarm {
    /// The layer's name.
    pub layer: String,
    /// Its matrix-product FLOPs per step, forward and backward (an integer; a writer that
    /// computed it as a float, `1.2e9`, is read too).
    #[serde(deserialize_with = "whole_number")]
    pub flops: u64,
    /// What casting it alone does.
    #[serde(flatten)]
    pub harm: Harm,
}

/// A count written as an integer or as a float with no fraction.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let x = f64::deserialize(d)?;
    if x >= 0.0 && x.fract() == 0.0 && x < 2f64.powi(64) {
        Ok(x as u64)
    } else {
        Err(serde::de::Error::custom(format!(
            "flops {x}: expected a whole number"
        )))
    }
}

/// `sensitivity.json`: every product-forming layer, most harmful first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sensitivity {
    /// `"mixprec-sensitivity/1"`.
    pub schema: String,
    /// The model's short name.
    pub model: String,
    /// The cast recipe's name.
    pub recipe: String,
    /// The reference recipe (`fp32`).
    pub reference: String,
    /// Batches measured.
    pub batches: u64,
    /// The seed of the weights and batches.
    pub seed: u64,
    /// Sorted by `grad_rel_err`, largest first.
    pub layers: Vec<LayerHarm>,
    /// Every layer cast at once.
    pub all: Harm,
}

/// How far a plan casts.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Budget {
    /// Cast layers while the joint gradient error stays at most this.
    #[serde(rename = "max_grad_error")]
    MaxGradError(f64),
    /// Cast layers until this share of the product FLOPs is cast.
    #[serde(rename = "flops_share")]
    FlopsShare(f64),
}

impl Budget {
    /// The budget in words, as the page and the command say it: `a gradient error of at most
    /// 0.05`, `60.0% of the product FLOPs cast`.
    #[must_use]
    pub fn in_words(self) -> String {
        match self {
            Budget::MaxGradError(x) => format!("a gradient error of at most {x}"),
            Budget::FlopsShare(s) => format!("{} of the product FLOPs cast", crate::text::pct(s)),
        }
    }
}

/// Layer names in words: joined by commas, or `no layer`.
#[must_use]
pub fn layers_in_words(layers: &[String]) -> String {
    if layers.is_empty() {
        "no layer".into()
    } else {
        layers.join(", ")
    }
}

/// One layer added on the greedy path, measured with all the layers added so far cast together.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanStep {
    /// The layer added.
    pub layer: String,
    /// The share of the product FLOPs cast with it.
    pub flops_share: f64,
    /// The joint gradient error with it.
    pub grad_rel_err: f64,
}

/// `plan.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// `"mixprec-plan/1"`.
    pub schema: String,
    /// The cast recipe's name.
    pub recipe: String,
    /// The recipe the kept layers keep.
    pub high: String,
    /// The budget.
    pub budget: Budget,
    /// The layers cast, in the order they were added (least harm first).
    pub cast: Vec<String>,
    /// The layers kept in `high`.
    pub keep: Vec<String>,
    /// The share of the product FLOPs cast.
    pub flops_share: f64,
    /// The gradient error of the plan's recipe, all its cast layers at once.
    pub grad_rel_err: f64,
    /// The greedy path (the last step that fits the budget and any step tried past it are
    /// both here: the plan is the prefix of `cast`).
    pub steps: Vec<PlanStep>,
}

/// One re-training run of a validation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValidationRun {
    /// `fp32`, `all` or `plan`.
    pub arm: String,
    /// The seed.
    pub seed: u64,
    /// The run directory, relative to the plan directory.
    pub run: String,
}

/// `validation.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Validation {
    /// `"mixprec-validation/1"`.
    pub schema: String,
    /// `loss`, or an evaluation metric the runs record (`test_accuracy`).
    pub metric: String,
    /// The metric of a run is its mean over the run's last `last_steps` steps (`loss`).
    pub last_steps: u64,
    /// The runs.
    pub runs: Vec<ValidationRun>,
}

/// The arms of a validation, in the order pages show them.
pub const ARMS: [&str; 3] = ["fp32", "all", "plan"];

/// Whether `dir` is a plan directory (holds `plan.json`).
#[must_use]
pub fn is_plan(dir: &Path) -> bool {
    dir.join(PLAN).is_file()
}

/// Reads the JSON file `name` of the plan directory `dir`.
///
/// # Errors
/// [`crate::Error::Io`] or [`crate::Error::BadFile`] naming the file.
pub fn read<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> crate::Result<T> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(crate::Error::io_at(&path))?;
    serde_json::from_str(&text).map_err(|e| crate::Error::BadFile {
        path,
        problem: e.to_string(),
    })
}

/// Writes `value` as pretty JSON to `path`, atomically (a file of the plan directory).
///
/// # Errors
/// A failed write.
pub fn write(path: &Path, value: &impl Serialize) -> crate::Result<()> {
    let json = serde_json::to_vec_pretty(value).map_err(|e| crate::Error::BadFile {
        path: path.to_path_buf(),
        problem: e.to_string(),
    })?;
    crate::io::write_atomic(path, |w| {
        w.write_all(&json)?;
        w.write_all(b"\n")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measurement that was not finite is written `null` (serde_json writes NaN so, and the
    /// PyTorch side writes None) and read back as NaN, not refused.
    #[test]
    fn a_non_finite_measurement_reads_back_as_nan() {
        let harm = Harm {
            grad_rel_err: f64::NAN,
            grad_cosine: 0.5,
            ..Harm::default()
        };
        let text = serde_json::to_string(&harm).unwrap();
        assert!(text.contains("\"grad_rel_err\":null"), "{text}");
        let back: Harm = serde_json::from_str(&text).unwrap();
        assert!(back.grad_rel_err.is_nan());
        assert_eq!(back.grad_cosine, 0.5);
    }
}
