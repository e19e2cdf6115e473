//! The records of a run directory, one type per kind of line or file (see [`super`] for the
//! contract). Every writer (`train`, and anything else that makes run directories) and every
//! reader (`report`, studies, replay) goes through these types.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::format::FloatFormat;
use crate::format::RoundCounts;
use crate::recipe::Recipe;
use crate::recipe::{Class, Site, StoreCounts};
use crate::stats::Histogram;

/// Octaves are split into `2^CAPTURE_SUB_BINS_LOG2` sub-bins in captured histograms: one bin
/// per power of two, the resolution at which underflow and overflow thresholds are read.
pub const CAPTURE_SUB_BINS_LOG2: u32 = 0;

/// The version of the run directory's schema, written as `"schema"` in `config.json` and
/// `summary.json`. Readers accept this version and runs written before versions existed (no key:
/// version 0, which had no per-step counts, no `grad_amax` and no shadow).
pub const SCHEMA: u32 = 1;

/// `config.json` of a run recorded outside mixprec's training core (`"source": "pytorch"`: the
/// PyTorch recorder), the keys `report` and `replay` read; the recorder's own description of the
/// loop (model, layers, parameters, optimizer, versions, rank) is kept as written.
///
/// Added in schema 1 without a version change: runs recorded before it lack `recipe`'s formats
/// and loss scaling, which readers then report as unknown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedConfig {
    /// What recorded the run: `pytorch`.
    pub source: String,
    /// The precision the loop trained in, as a recipe: for `torch.autocast`, `format` for the
    /// weights the forward pass reads, the activations and both gradients, FP32 master weights
    /// and optimizer state; its `loss_scaling` the loop's scaler's policy (a PyTorch GradScaler
    /// is the `gradscaler` preset with its own `init_scale`, `growth_factor`, `backoff_factor`
    /// and `growth_interval`; `none` without a scaler, or with one disabled).
    pub recipe: Recipe,
    /// The format the captured values are judged against (rounding counts, windows).
    pub format: FloatFormat,
    /// Steps between capture steps (and the first); 0: none.
    pub capture_every: u64,
    /// The rest, as the recorder wrote it.
    #[serde(flatten)]
    pub about: serde_json::Map<String, serde_json::Value>,
}

/// One training step: a line of `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// 1-based step number.
    pub step: u64,
    /// The mean loss of the batch, unscaled (`null` in the file when not finite).
    #[serde(with = "nullable")]
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
    /// Updates that changed no master weight, over nonzero updates, this step, counting only
    /// the weights whose gradient is nonzero (a weight without one still moves under Adam or
    /// momentum; runs written before issue 29 counted those too) (`null` in the file, NaN here,
    /// when the writer did not measure it: the PyTorch recorder).
    #[serde(with = "nullable")]
    pub updates_lost: f64,
    /// The GAN's generator loss (`loss` is then the discriminator's).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub generator_loss: Option<f64>,
    /// The largest finite magnitude among the gradient values this step's backward pass formed
    /// in the loop's precision, before rounding into their storage format, divided by the loss
    /// scale (not by `loss_multiplier`, which is part of the loss): what decides whether the step
    /// overflows a format at another scale `S` (it does when `grad_amax * S` rounds above the
    /// format's largest value). `mixprec train`: the activation and weight gradients at their
    /// storage points, before rounding. The PyTorch recorder: every tensor the backward pass
    /// formed in a format narrower than FP32 (any floating tensor, in a loop with none), as
    /// stored, and for a cast into such a format the FP32 values cast (see
    /// [`StepRecord::grad_amax_bounded`] for steps where an inf or NaN hid values). `None` when
    /// no gradient value was finite and nonzero.
    #[serde(default)]
    pub grad_amax: Option<f64>,
    /// Whether `grad_amax` is only a lower bound: an inf or NaN formed in the backward pass (the
    /// loss being finite) and reached later gradient values, whose magnitudes at a smaller scale
    /// are then unknown. Such a step is known to overflow at its own `loss_scale` and above, and
    /// at any scale where `grad_amax * S` overflows; below that, unknown. False (written only when
    /// true; absent in runs written before it) when `grad_amax` is exact: the step overflows at
    /// `S` exactly when `grad_amax * S` does, or, when an inf or NaN that `grad_amax` does not
    /// explain was recorded (a non-finite loss), at every scale.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grad_amax_bounded: bool,
    /// The autograd nodes (the PyTorch recorder: their type names, such as `PowBackward0`) whose
    /// backward formula formed an inf or NaN from finite gradients and formed it again when
    /// given zero gradients: an intermediate value of the formula (GELU's `3x^2` of a large
    /// activation in FP16) that overflows whatever the loss scale, so that no scale avoids the
    /// step's overflow (`grad_amax_bounded` is then false: the step overflows at every scale).
    /// Empty (absent in the file) when there was none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intermediate_overflow: Vec<String>,
    /// Per tensor class, summed over layers: what this step's stores held and what rounding did
    /// to them. Classes with no store this step are absent (a skipped step stores no update).
    #[serde(default)]
    pub counts: BTreeMap<Class, StoreCounts>,
    /// On evaluation steps (`eval_every`), the test metric after this step's update.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub eval: Option<EvalMetric>,
}

/// One storage point on a capture step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteCapture {
    /// Layer name.
    pub layer: String,
    /// Tensor class.
    pub tensor: Class,
    /// Which tensor of the class, when the layer stores several (the optimizer's state:
    /// `momentum`; Adam's `adam_m`, `adam_v`, `adam_eps`, `adam_denominator`); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub part: Option<String>,
    /// Log2 histogram of the FP32 values before rounding (with zeros, NaN, infinities, amax,
    /// smallest nonzero magnitude, sums): `mixprec::stats::Histogram`'s serde form.
    pub values: Histogram,
    /// What rounding did to them.
    pub rounding: RoundCounts,
    /// The format `rounding` counts rounding into, when it is not the one the recipe stores the
    /// class in: the PyTorch recorder (without a `Simulate`) rounds every value it captures into
    /// its judged format, an FP32 optimizer state too. Absent: the recipe's format (`train`, a
    /// `Simulate`, runs written before issue 29).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounded_into: Option<FloatFormat>,
}

/// The update-to-weight ratios of one layer on a capture step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdateRatios {
    /// Layer name.
    pub layer: String,
    /// Histogram of `|w| / |update|` over the layer's nonzero updates (`w` the master weight
    /// before the update). In fp16 an update is lost when the ratio exceeds about 2^11.
    pub ratios: Histogram,
}

/// One line of `captures.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaptureRecord {
    /// The step captured.
    pub step: u64,
    /// The loss scale that step's backward pass used: gradient histograms divided by it are the
    /// unscaled gradients (exactly, for a power of two). Absent in schema 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
    /// Every storage point written that step, in layer order then class order.
    pub sites: Vec<SiteCapture>,
    /// Per layer with parameters that were updated (none on a skipped step).
    pub update_ratios: Vec<UpdateRatios>,
}

impl CaptureRecord {
    /// The activation and weight gradients of every layer pooled, as stored (scaled by
    /// `loss_scale`): what a loss-scale window is computed from.
    #[must_use]
    pub fn gradients(&self) -> Histogram {
        self.pooled(&[Class::ActivationGrad, Class::WeightGrad])
    }

    /// The weight gradients of every layer pooled, as stored: what the predicted lower edge
    /// ([`crate::stats::recommend::predicted_min_log2_scale`]) is computed from.
    #[must_use]
    pub fn weight_gradients(&self) -> Histogram {
        self.pooled(&[Class::WeightGrad])
    }

    fn pooled(&self, classes: &[Class]) -> Histogram {
        let mut pooled = Histogram::new(crate::run::CAPTURE_SUB_BINS_LOG2);
        for site in &self.sites {
            if classes.contains(&site.tensor)
                && site.values.sub_bins_log2() == pooled.sub_bins_log2()
            {
                pooled.merge(&site.values);
            }
        }
        pooled
    }
}

/// One gradient tensor (a layer's tensor class) compared with the FP32 shadow step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShadowSite {
    /// Layer name.
    pub layer: String,
    /// `activation_grad` or `weight_grad`.
    pub tensor: Class,
    /// Values compared.
    pub values: u64,
    /// `||g / S - g32|| / ||g32||`, `g` the run's stored gradient, `S` the loss scale, `g32`
    /// the shadow's (`null` when not finite, or when `g32` is all zero).
    #[serde(with = "nullable")]
    pub relative_error: f64,
    /// `<g, g32> / (||g|| ||g32||)` (`null` when either is zero or not finite).
    #[serde(with = "nullable")]
    pub cosine: f64,
    /// Of the values nonzero in FP32, the share that are zero in the run.
    pub zeroed: f64,
    /// The share of FP32's squared norm held by the values that are zero in the run.
    pub norm_lost: f64,
}

/// One line of `shadow.jsonl`: a step also run in FP32 from the same weights and batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShadowRecord {
    /// The step.
    pub step: u64,
    /// Its loss scale.
    pub loss_scale: f64,
    /// The FP32 step's loss.
    #[serde(with = "nullable")]
    pub loss: f64,
    /// Per layer and gradient class, in the order the backward pass stored them.
    pub sites: Vec<ShadowSite>,
}

/// The evaluation of the trained model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalMetric {
    /// What is measured: `test_accuracy` for classifiers, `modes_covered` (0 to 8) for the GAN.
    pub name: String,
    /// Its value (`null` in the file when not finite).
    #[serde(with = "nullable")]
    pub value: f64,
    /// Its value at chance, when known: for `test_accuracy`, the share of the test set's most
    /// common label (what always predicting it scores). Absent in runs written before issue 29
    /// and in recorded runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chance: Option<f64>,
}

/// `summary.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The schema version ([`SCHEMA`]; 0 when absent).
    #[serde(default)]
    pub schema: u32,
    /// The recipe's name.
    pub recipe: String,
    /// Steps run.
    pub steps: u64,
    /// Steps whose update was skipped (overflow under loss scaling).
    pub skipped_steps: u64,
    /// Steps whose gradients held an inf or NaN.
    pub overflow_steps: u64,
    /// Steps whose `grad_amax` is only a lower bound ([`StepRecord::grad_amax_bounded`]); the
    /// others' is exact. Written only when nonzero (absent: 0, as in runs written before it).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bounded_steps: u64,
    /// True when the final loss or a weight is not finite, or the last 20 steps were all skipped
    /// (the loss scale can no longer make gradients finite; a run of fewer steps that skipped
    /// them all has not diverged: its scaler was still backing off).
    pub diverged: bool,
    /// The last step's batch loss (the discriminator's for the GAN; `null` when not finite).
    #[serde(with = "nullable")]
    pub final_loss: f64,
    /// The test-set metric.
    pub eval_metric: EvalMetric,
    /// Trainable scalars.
    pub parameters: usize,
    /// Wall-clock time of the run (the one field that differs between identical runs).
    pub wall_seconds: f64,
    /// Which weights' products a recipe that casts the operands of products cast, where the
    /// trainer could miss some (`mixprec.torch.Simulate` in a user's model); absent otherwise
    /// (`mixprec train` casts every product of its own layers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Coverage>,
}

/// The weights whose products a run cast into the recipe's operand formats
/// ([`Recipe::gemm_operands`]), and those whose products ran uncast, in FP32.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coverage {
    /// The parameters whose products were cast (each once, however often read or tied).
    pub cast: Vec<String>,
    /// The parameters that formed a product left uncast.
    pub uncast: Vec<String>,
    /// The scalars of the weights cast.
    pub cast_weights: u64,
    /// The scalars of every weight that formed a product, cast or not.
    pub product_weights: u64,
    /// All the model's scalars.
    pub parameters: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` signature
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A non-finite `f64` as JSON `null`, and `null` read back as NaN (JSON has no inf or NaN;
/// serde_json writes them as `null` but cannot read that back into an `f64`).
mod nullable {
    use serde::{Deserialize, Deserializer, Serializer};

    #[allow(clippy::trivially_copy_pass_by_ref)] // serde's `with` signature
    pub fn serialize<S: Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
        if x.is_finite() {
            s.serialize_f64(*x)
        } else {
            s.serialize_none()
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
    }
}

/// Removes and checks the `schema` key of a JSON object (absent: 0).
pub(crate) fn take_schema(value: &mut Value, path: &Path) -> crate::Result<u32> {
    let bad = |problem: String| Error::BadFile {
        path: path.to_path_buf(),
        problem,
    };
    let Value::Object(object) = value else {
        return Err(bad("expected a JSON object".into()));
    };
    let version = match object.remove("schema") {
        None => 0,
        Some(v) => v
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| bad(format!("schema {v} is not a version number")))?,
    };
    if version > SCHEMA {
        return Err(bad(format!(
            "schema {version} is newer than this mixprec reads ({SCHEMA}); upgrade mixprec"
        )));
    }
    Ok(version)
}
